package devmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync/atomic"
)

// vmmMem is GPU memory from the driver's virtual memory management: one
// physical allocation mapped at a reserved range of its own. Other
// processes open it from a file descriptor, which the exporter's service
// passes them, and map it themselves; the physical memory lives while any
// process holds it, so an exporter's Free does not pull it from under them.
type vmmMem struct {
	handle uint64 // CUmemGenericAllocationHandle
	size   int    // bytes mapped: the request rounded up to the granularity
	span   int    // bytes of address space reserved (size, rounded up to this device's granularity)
	id     uint64 // names the allocation in this process's handles (0 for one opened from another's)
}

var vmmIDs atomic.Uint64

// vmmIPC is a VMM handle's driver bytes, little-endian: id uint64, size
// uint64 (mapped bytes), the rest zero. The exporter's pid and token are in
// the handle itself.
type vmmIPC struct {
	id   uint64
	size uint64
}

func (x vmmIPC) bytes() (b [64]byte) {
	binary.LittleEndian.PutUint64(b[0:], x.id)
	binary.LittleEndian.PutUint64(b[8:], x.size)
	return b
}

func parseVMMIPC(b [64]byte) (vmmIPC, error) {
	x := vmmIPC{id: binary.LittleEndian.Uint64(b[0:]), size: binary.LittleEndian.Uint64(b[8:])}
	for _, c := range b[16:] {
		if c != 0 {
			return x, badHandle("VMM driver bytes: trailing bytes set")
		}
	}
	if x.id == 0 || x.size == 0 || x.size > math.MaxInt {
		return x, badHandle("VMM driver bytes: allocation %d of %d bytes", x.id, x.size)
	}
	return x, nil
}

// IPCModeEnv names the setting that chooses how AllocShared (and so
// NewNodeShared) allocates GPU memory: "auto" (the default: VMM where the
// device supports it and exports POSIX descriptors, else legacy), "vmm"
// (VMM or an error) or "legacy" (cuMemAlloc, shared with CUDA IPC handles).
const IPCModeEnv = "GPUCOMM_IPC"

type ipcMode int

const (
	ipcAuto ipcMode = iota
	ipcVMM
	ipcLegacy
)

// CheckIPCModeEnv returns the error AllocShared would give for a malformed
// GPUCOMM_IPC (wrapping ErrInvalidArgument), or nil when it is unset or
// valid, so that a program refuses it before it starts any work
// (comm.DefaultOptions, and so Open, does).
func CheckIPCModeEnv() error {
	_, err := ipcModeFromEnv()
	return err
}

func ipcModeFromEnv() (ipcMode, error) {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(IPCModeEnv))); v {
	case "", "auto":
		return ipcAuto, nil
	case "vmm":
		return ipcVMM, nil
	case "legacy":
		return ipcLegacy, nil
	default:
		return 0, fmt.Errorf("devmem: %s=%q: want auto, vmm or legacy: %w", IPCModeEnv, v, ErrInvalidArgument)
	}
}

// sharedAllocator is implemented by drivers whose shareable memory is not
// what alloc gives (the cuda driver's VMM memory). Others share alloc's.
type sharedAllocator interface {
	allocShared(n int, mode ipcMode) (*allocation, error)
}

// AllocShared allocates n bytes of device memory meant to be exported to
// the other processes of the node (NewNodeShared's root allocates with it).
// On a GPU it is VMM memory where the device supports it: a handle to it
// opens through a file descriptor its exporter passes, which neither
// collides with a CUDA-aware MPI's own CUDA IPC mappings of the memory
// (CUDA maps a legacy handle once per process) nor lets the memory go while
// another process has it open. GPUCOMM_IPC (IPCModeEnv) chooses otherwise.
// On the host device it is Alloc's memory, which is shareable already.
func (d *Device) AllocShared(n int) (Buffer, error) {
	if err := d.usable("AllocShared"); err != nil {
		return Buffer{}, err
	}
	mode, err := ipcModeFromEnv()
	if err != nil {
		return Buffer{}, err
	}
	sa, ok := d.drv.(sharedAllocator)
	if !ok || n <= 0 {
		return d.Alloc(n) // which refuses n < 0; an empty buffer has nothing to share
	}
	a, err := sa.allocShared(n, mode)
	if err != nil {
		return Buffer{}, err
	}
	if vm := a.vmm; vm != nil {
		if vm.handle == 0 || vm.size < n || vm.span < vm.size {
			return Buffer{}, errors.Join(fmt.Errorf("devmem: AllocShared of %d bytes: the driver mapped %d bytes of handle %#x in a %d-byte range", n, vm.size, vm.handle, vm.span), a.release())
		}
		vm.id = vmmIDs.Add(1) // names it in handles
	}
	a.dev, a.size = d, n
	d.stats.buffers.Add(1)
	d.stats.bytes.Add(int64(n))
	return Buffer{a: a, n: n}, nil
}
