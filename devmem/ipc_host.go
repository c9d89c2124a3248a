package devmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// The host driver shares its memfd-backed memory: another process of the
// same user opens /proc/PID/fd/N of the exporter (the kernel refuses other
// users: the link needs ptrace-read access) and maps the same file. The file
// lives until the last mapping and descriptor are gone, so the memory
// outlives the exporter's Free for processes that opened it already.
//
// Driver bytes, little-endian: pid uint32, fd uint32, inode uint64, device
// uint64, size uint64, owner uid uint32; the rest zero. The inode and device
// tell the file apart from whatever later reuses the descriptor number.
type hostIPC struct {
	pid, fd  uint32
	ino, dev uint64
	size     uint64
	uid      uint32
}

const hostIPCLen = 36

func (x hostIPC) bytes() (b [64]byte) {
	binary.LittleEndian.PutUint32(b[0:], x.pid)
	binary.LittleEndian.PutUint32(b[4:], x.fd)
	binary.LittleEndian.PutUint64(b[8:], x.ino)
	binary.LittleEndian.PutUint64(b[16:], x.dev)
	binary.LittleEndian.PutUint64(b[24:], x.size)
	binary.LittleEndian.PutUint32(b[32:], x.uid)
	return b
}

func parseHostIPC(b [64]byte) (hostIPC, error) {
	x := hostIPC{
		pid:  binary.LittleEndian.Uint32(b[0:]),
		fd:   binary.LittleEndian.Uint32(b[4:]),
		ino:  binary.LittleEndian.Uint64(b[8:]),
		dev:  binary.LittleEndian.Uint64(b[16:]),
		size: binary.LittleEndian.Uint64(b[24:]),
		uid:  binary.LittleEndian.Uint32(b[32:]),
	}
	for _, c := range b[hostIPCLen:] {
		if c != 0 {
			return x, badHandle("host driver bytes: trailing bytes set")
		}
	}
	if x.pid == 0 || x.pid > math.MaxInt32 || x.fd > math.MaxInt32 || x.size == 0 || x.size > math.MaxInt {
		return x, badHandle("host driver bytes: pid %d, fd %d, size %d", x.pid, x.fd, x.size)
	}
	return x, nil
}

func (h *hostDriver) ipcExport(a *allocation) ([64]byte, bool, int, error) {
	b, err := exportShared(a)
	return b, false, -1, err
}

func (h *hostDriver) ipcOpen(b [64]byte, _ int, need int) (*allocation, error) {
	return openShared(b, need)
}

func (h *hostDriver) ipcClose(a *allocation) error { return closeShared(a) }

// exportShared returns the bytes through which another process maps a's
// memfd: host-driver memory, or pinned memory from AllocPinnedShared.
func exportShared(a *allocation) ([64]byte, error) {
	if a.shared == nil {
		return [64]byte{}, fmt.Errorf("devmem: export of an empty host allocation: %w", ErrInvalidArgument)
	}
	// memfds start out world-accessible (0777); only the owner may map it.
	if err := unix.Fchmod(a.shared.fd, 0o600); err != nil {
		return [64]byte{}, fmt.Errorf("devmem: export: chmod of the memfd: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(a.shared.fd, &st); err != nil {
		return [64]byte{}, fmt.Errorf("devmem: export: fstat of the memfd: %w", err)
	}
	x := hostIPC{pid: uint32(a.shared.pid), fd: uint32(a.shared.fd), ino: st.Ino, dev: st.Dev, size: uint64(st.Size), uid: st.Uid}
	return x.bytes(), nil
}

// openShared maps the memfd exportShared described; need is how many bytes
// the handle's range reaches.
func openShared(b [64]byte, need int) (*allocation, error) {
	x, err := parseHostIPC(b)
	if err != nil {
		return nil, err
	}
	if uint64(need) > x.size {
		return nil, badHandle("range reaches byte %d of a %d-byte allocation", need, x.size)
	}
	if uid := uint32(unix.Geteuid()); uid != x.uid {
		return nil, badHandle("memory of uid %d, this process runs as uid %d", x.uid, uid)
	}
	path := fmt.Sprintf("/proc/%d/fd/%d", x.pid, x.fd)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, badHandle("process %d has exited or freed the buffer (%s: %v)", x.pid, path, err)
		}
		return nil, badHandle("open %s: %v", path, err)
	}
	defer unix.Close(fd) // the mapping keeps the file alive on its own
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("devmem: OpenIPC: fstat %s: %w", path, err)
	}
	if st.Ino != x.ino || st.Dev != x.dev || uint64(st.Size) != x.size {
		return nil, badHandle("%s is no longer the exported buffer (it was freed and the descriptor reused)", path)
	}
	mem, err := unix.Mmap(fd, 0, int(x.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("devmem: OpenIPC: mmap of %d bytes: %w", x.size, err)
	}
	return &allocation{host: mem, addr: addrOf(mem), size: int(x.size)}, nil
}

func closeShared(a *allocation) error {
	if err := unix.Munmap(a.host); err != nil {
		return fmt.Errorf("devmem: CloseIPC: munmap: %w", err)
	}
	return nil
}

// memfdMap makes n bytes of memory that other processes of the user can map
// (exportShared, openShared): a memfd of n bytes mapped shared.
func memfdMap(n int) (mem []byte, fd int, err error) {
	fd, err = unix.MemfdCreate("gpucomm", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("ftruncate to %d bytes: %w", n, err)
	}
	mem, err = unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("mmap of %d bytes: %w", n, err)
	}
	return mem, fd, nil
}
