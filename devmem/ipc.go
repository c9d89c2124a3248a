package devmem

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// HandleSize is the length of a marshalled IPCHandle.
const HandleSize = 196

// handleVersion is bumped whenever the layout below changes, so that a
// process built from another version refuses a handle instead of misreading it.
// Version 2: the token of the exporter's service, and VMM handles.
const handleVersion = 2

var handleMagic = [4]byte{'g', 'c', 'I', 'H'}

// Marshalled layout, little-endian. The checksum covers every byte before it.
const (
	hoMagic   = 0   // [4]byte
	hoVersion = 4   // uint16
	hoKind    = 6   // uint8: Kind
	hoFlags   = 7   // uint8: flagPinned, flagVMM or zero
	hoPID     = 8   // uint32: the exporting process
	hoToken   = 12  // uint32: its service's token (ipc_service.go); zero for host memory
	hoOffset  = 16  // uint64: the view's offset into its allocation
	hoSize    = 24  // uint64: the view's length
	hoUUID    = 32  // [16]byte: the exporting device
	hoBoot    = 48  // [16]byte: the node's boot_id
	hoHost    = 64  // [64]byte: the node's hostname, zero-padded
	hoDriver  = 128 // [64]byte: the driver's bytes (cudaIpcMemHandle_t, or vmmIPC's)
	hoCRC     = 192 // uint32: CRC-32C of [0, 192)
)

// flagPinned marks a handle to pinned host memory from AllocPinnedShared;
// its driver bytes are then the memfd's (as a host device's), whatever the
// device. flagVMM marks GPU memory from the driver's virtual memory
// management (AllocShared), whose driver bytes are vmmIPC's and whose
// descriptor the exporter's service hands out.
const (
	flagPinned = 1
	flagVMM    = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// IPCHandle names a range of device memory that other processes of the same
// node can open with Device.OpenIPC. It holds the driver's bytes (a legacy
// CUDA IPC handle, or a VMM allocation's id and size, on GPUs), the range,
// the exporting device and process (and its service's token), the node, and
// a checksum. The zero IPCHandle names nothing. Handles travel as
// bytes (MarshalBinary) or text (MarshalText, hex); they are not secrets,
// but only the exporter's own user can open them.
type IPCHandle struct {
	raw [HandleSize]byte
}

// handleFields is an IPCHandle decoded.
type handleFields struct {
	kind      Kind
	pinned    bool
	vmm       bool
	pid       uint32
	token     uint32
	off, size uint64
	uuid      [16]byte
	node      nodeID
	drv       [64]byte
}

// nodeID says which booted machine a process runs on: a reboot or another
// machine with the same hostname gets a different boot_id.
type nodeID struct {
	host [64]byte
	boot [16]byte
}

func (n nodeID) String() string {
	return fmt.Sprintf("%s (boot %x)", bytes.TrimRight(n.host[:], "\x00"), n.boot)
}

var localNode = sync.OnceValues(func() (nodeID, error) {
	var id nodeID
	host, err := os.Hostname()
	if err != nil {
		return id, fmt.Errorf("devmem: node identity: %w", err)
	}
	copy(id.host[:], host) // a hostname past 64 bytes is cut the same way on every process
	raw, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return id, fmt.Errorf("devmem: node identity: %w", err)
	}
	b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(string(raw)), "-", ""))
	if err != nil || len(b) != len(id.boot) {
		return id, fmt.Errorf("devmem: node identity: malformed boot_id %q", raw)
	}
	copy(id.boot[:], b)
	return id, nil
})

func (f *handleFields) seal() IPCHandle {
	var h IPCHandle
	r := h.raw[:]
	copy(r[hoMagic:], handleMagic[:])
	binary.LittleEndian.PutUint16(r[hoVersion:], handleVersion)
	r[hoKind] = byte(f.kind)
	if f.pinned {
		r[hoFlags] = flagPinned
	}
	if f.vmm {
		r[hoFlags] = flagVMM
	}
	binary.LittleEndian.PutUint32(r[hoPID:], f.pid)
	binary.LittleEndian.PutUint32(r[hoToken:], f.token)
	binary.LittleEndian.PutUint64(r[hoOffset:], f.off)
	binary.LittleEndian.PutUint64(r[hoSize:], f.size)
	copy(r[hoUUID:], f.uuid[:])
	copy(r[hoBoot:], f.node.boot[:])
	copy(r[hoHost:], f.node.host[:])
	copy(r[hoDriver:], f.drv[:])
	binary.LittleEndian.PutUint32(r[hoCRC:], crc32.Checksum(r[:hoCRC], castagnoli))
	return h
}

func badHandle(format string, args ...any) error {
	return fmt.Errorf("devmem: IPC handle: "+format+": %w", append(args, ErrBadHandle)...)
}

// decodeHandle checks every byte of a marshalled handle and decodes it.
func decodeHandle(r []byte) (handleFields, error) {
	var f handleFields
	switch {
	case len(r) != HandleSize:
		return f, badHandle("%d bytes, want %d", len(r), HandleSize)
	case !bytes.Equal(r[hoMagic:hoMagic+4], handleMagic[:]):
		return f, badHandle("not a gpucomm handle (magic %x)", r[hoMagic:hoMagic+4])
	case binary.LittleEndian.Uint16(r[hoVersion:]) != handleVersion:
		return f, badHandle("version %d, this build reads version %d", binary.LittleEndian.Uint16(r[hoVersion:]), handleVersion)
	case binary.LittleEndian.Uint32(r[hoCRC:]) != crc32.Checksum(r[:hoCRC], castagnoli):
		return f, badHandle("checksum mismatch (corrupted in transit?)")
	}
	f.kind = Kind(r[hoKind])
	f.pinned = r[hoFlags] == flagPinned
	f.vmm = r[hoFlags] == flagVMM
	f.pid = binary.LittleEndian.Uint32(r[hoPID:])
	f.token = binary.LittleEndian.Uint32(r[hoToken:])
	f.off = binary.LittleEndian.Uint64(r[hoOffset:])
	f.size = binary.LittleEndian.Uint64(r[hoSize:])
	copy(f.uuid[:], r[hoUUID:])
	copy(f.node.boot[:], r[hoBoot:])
	copy(f.node.host[:], r[hoHost:])
	copy(f.drv[:], r[hoDriver:])
	// A checksum only catches accidents; these checks keep a well-formed
	// forgery from reaching a driver with nonsense.
	switch {
	case f.kind != Host && f.kind != CUDA:
		return f, badHandle("unknown device kind %d", r[hoKind])
	case r[hoFlags] != 0 && r[hoFlags] != flagPinned && r[hoFlags] != flagVMM:
		return f, badHandle("unknown flags %#x", r[hoFlags])
	case f.vmm && f.kind != CUDA:
		return f, badHandle("VMM memory of a %s device", f.kind)
	case (f.token != 0) != (f.kind == CUDA && !f.pinned):
		// GPU memory is served by its exporter; host memory needs no service.
		return f, badHandle("service token %#x for %s memory (pinned %v)", f.token, f.kind, f.pinned)
	case f.pid == 0 || f.pid > math.MaxInt32:
		return f, badHandle("exporting process %d", f.pid)
	case f.off > math.MaxInt || f.size > math.MaxInt-f.off:
		return f, badHandle("range [%d:+%d] out of bounds", f.off, f.size)
	case !canonicalHost(f.node.host[:]):
		return f, badHandle("malformed hostname")
	}
	if f.vmm {
		x, err := parseVMMIPC(f.drv)
		if err != nil {
			return f, err
		}
		if f.off > x.size || f.size > x.size-f.off {
			return f, badHandle("range [%d:+%d] outside the %d-byte VMM allocation", f.off, f.size, x.size)
		}
	}
	if f.kind == Host || f.pinned {
		// Memfd bytes name the process whose descriptor they open; a
		// handle whose header names another would be judged by the header
		// (this process's memory or another's) while the memory it opens
		// is the other's. (A GPU's driver bytes are the driver's own.)
		x, err := parseHostIPC(f.drv)
		if err != nil {
			return f, err
		}
		if x.pid != f.pid {
			return f, badHandle("exported by process %d, but its memory is process %d's", f.pid, x.pid)
		}
	}
	return f, nil
}

// canonicalHost accepts a non-empty name padded with zero bytes only.
func canonicalHost(h []byte) bool {
	end := bytes.IndexByte(h, 0)
	if end < 0 {
		return true
	}
	return end > 0 && len(bytes.Trim(h[end:], "\x00")) == 0
}

// MarshalBinary returns the handle's HandleSize bytes.
func (h IPCHandle) MarshalBinary() ([]byte, error) {
	if _, err := decodeHandle(h.raw[:]); err != nil {
		return nil, err
	}
	return bytes.Clone(h.raw[:]), nil
}

// UnmarshalBinary reads a handle written by MarshalBinary. Anything else,
// including a handle whose checksum fails, is an error wrapping ErrBadHandle
// and leaves h unchanged.
func (h *IPCHandle) UnmarshalBinary(b []byte) error {
	if _, err := decodeHandle(b); err != nil {
		return err
	}
	copy(h.raw[:], b)
	return nil
}

// MarshalText returns the handle in hex, for environment variables and
// command lines.
func (h IPCHandle) MarshalText() ([]byte, error) {
	b, err := h.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return hex.AppendEncode(nil, b), nil
}

// UnmarshalText reads a handle written by MarshalText.
func (h *IPCHandle) UnmarshalText(t []byte) error {
	b, err := hex.DecodeString(string(t))
	if err != nil {
		return badHandle("not hex: %v", err)
	}
	return h.UnmarshalBinary(b)
}

// IsZero reports whether h is the zero handle.
func (h IPCHandle) IsZero() bool { return h.raw == IPCHandle{}.raw }

// Kind is the kind of the exporting device.
func (h IPCHandle) Kind() Kind { return Kind(h.raw[hoKind]) }

// Pinned reports whether the handle names pinned host memory
// (AllocPinnedShared) rather than device memory.
func (h IPCHandle) Pinned() bool { return h.raw[hoFlags] == flagPinned }

// VMM reports whether the handle names GPU memory from the driver's virtual
// memory management (AllocShared on a GPU), opened through a file
// descriptor, rather than a legacy CUDA IPC handle.
func (h IPCHandle) VMM() bool { return h.raw[hoFlags] == flagVMM }

// Size is the length of the exported range in bytes.
func (h IPCHandle) Size() int { return int(binary.LittleEndian.Uint64(h.raw[hoSize:])) }

// Offset is where the exported range starts in the exporter's allocation.
func (h IPCHandle) Offset() int { return int(binary.LittleEndian.Uint64(h.raw[hoOffset:])) }

// DeviceUUID is the UUID of the exporting device.
func (h IPCHandle) DeviceUUID() (u [16]byte) { copy(u[:], h.raw[hoUUID:]); return u }

// PID is the exporting process.
func (h IPCHandle) PID() int { return int(binary.LittleEndian.Uint32(h.raw[hoPID:])) }

// Node is the hostname of the exporting node.
func (h IPCHandle) Node() string {
	return string(bytes.TrimRight(h.raw[hoHost:hoHost+64], "\x00"))
}

func (h IPCHandle) String() string {
	if h.IsZero() {
		return "IPCHandle(zero)"
	}
	return fmt.Sprintf("IPCHandle(%s, %d bytes at offset %d, pid %d on %s)", h.Kind(), h.Size(), h.Offset(), h.PID(), h.Node())
}

// The process-wide IPC state. One lock: exports and opens are rare next to
// the copies they enable, and it keeps "one mapping per handle" simple.
var (
	ipcMu sync.Mutex
	// exports holds this process's exported allocations, by allocation and
	// by the key under which a handle names them.
	exports      = map[*allocation]*export{}
	exportsByKey = map[exportKey]*export{}
	// mappings holds other processes' allocations opened here, once per
	// device (by UUID, as two Device values of one GPU share its context)
	// and handle.
	mappings = map[mappingKey]*mapping{}
	// served holds this process's exported GPU allocations by driver bytes,
	// for the service's answers (ipc_service.go).
	served = map[[64]byte]*export{}
	// views holds every Buffer OpenIPC returned and that is not closed yet.
	views = map[*allocation]*ipcView{}
	// hostSlots holds the host driver's mappings by the place their memory
	// had in its exporter (hostSlot), as the CUDA driver keeps legacy
	// mappings: see ErrAlreadyMapped.
	hostSlots = map[hostSlot]*mapping{}
)

// ErrAlreadyMapped is wrapped (with ErrBadHandle) by an OpenIPC refused
// because this process still maps other memory that had the same place in
// the exporter: memory the exporter has freed since, whose views are not
// all closed here, and in whose place it allocated what the handle names.
// A GPU's driver refuses that open of a legacy CUDA IPC handle
// (CUDA_ERROR_ALREADY_MAPPED), and so does any open of an allocation a
// CUDA-aware MPI maps in this process outside gpucomm; the host device
// refuses it too, the place being the exporter's descriptor number (which
// the kernel hands out again as CUDA hands out an address again), so that
// code which keeps views of freed memory open (a cache of opened handles)
// meets the GPU's rule on the host. Closing the stale views and opening
// again succeeds.
var ErrAlreadyMapped = errors.New("devmem: this process still maps memory its exporter has freed at the same place")

// hostSlot is where host-driver memory was in its exporter: the memfd's
// descriptor number in the exporting process, seen from one device here.
type hostSlot struct {
	dev     [16]byte
	pid, fd uint32
}

// exportKey names an allocation across processes: VMM driver bytes are
// unique only within their exporter, hence its pid and token.
type exportKey struct {
	kind        Kind
	pinned, vmm bool
	pid, token  uint32
	uuid        [16]byte
	drv         [64]byte
}

type mappingKey = exportKey

// export is one of this process's allocations that has been exported. Views
// opened in this process point at its memory, so its release waits for them.
type export struct {
	a       *allocation
	key     exportKey
	drv     [64]byte
	vmm     bool
	token   uint32       // the service's, for GPU memory
	fd      int          // a VMM allocation's descriptor, which the service sends; -1 otherwise
	views   int          // in-process views still open
	freed   bool         // the owner called Free
	release func() error // the driver's release, run once freed and views is 0
}

// mapping is another process's allocation mapped into this one.
type mapping struct {
	key   mappingKey
	base  *allocation
	unmap func() error // the driver's ipcClose, or pinned memory's unlock and unmap
	refs  int
	slot  *hostSlot // host-driver memory's place in its exporter, held in hostSlots
}

// hostSlotOf is the mapping at slot, if slot is set, with ipcMu held.
func hostSlotOf(slot *hostSlot) *mapping {
	if slot == nil {
		return nil
	}
	return hostSlots[*slot]
}

// forget removes m from the maps, with ipcMu held.
func (m *mapping) forget() {
	delete(mappings, m.key)
	if m.slot != nil && hostSlots[*m.slot] == m {
		delete(hostSlots, *m.slot)
	}
}

// ipcView is one Buffer returned by OpenIPC; each has its own allocation
// record so that closing it twice, or using it after closing, is caught.
type ipcView struct {
	f   handleFields // the handle it was opened from
	exp *export      // set when opened in the exporting process
	m   *mapping     // set otherwise
}

// Export returns a handle through which other processes of this node (and
// this one) can open b's bytes with OpenIPC. The handle stays valid while b's
// allocation is not freed: once it is, OpenIPC refuses it with ErrBadHandle
// (GPU memory: the exporter's service says so; host memory: its file is
// gone). Exporting an opened view gives a handle to the same memory, so a
// handle can be passed along. Pinned host memory can be exported when it
// comes from AllocPinnedShared, not from AllocPinned or RegisterHost. GPU
// memory from AllocShared gets a VMM handle, from Alloc a legacy CUDA IPC
// handle (see the package documentation for the difference).
func (b Buffer) Export() (IPCHandle, error) {
	if err := b.Check("devmem: export", nil, 0); err != nil {
		return IPCHandle{}, err
	}
	node, err := localNode()
	if err != nil {
		return IPCHandle{}, err
	}
	ipcMu.Lock()
	defer ipcMu.Unlock()
	if v, ok := views[b.a]; ok {
		f := v.f
		f.off += uint64(b.off)
		f.size = uint64(b.n)
		return f.seal(), nil
	}
	pinned := b.a.pinned
	if pinned && b.a.shared == nil {
		return IPCHandle{}, fmt.Errorf("devmem: export of pinned host memory from AllocPinned or RegisterHost (allocate it with AllocPinnedShared to share it): %w", ErrInvalidArgument)
	}
	e := exports[b.a]
	if e == nil {
		e = &export{a: b.a, release: b.a.release, fd: -1}
		var err error
		if pinned {
			e.drv, err = exportShared(b.a)
		} else if drv, ok := b.a.dev.drv.(ipcDriver); ok {
			e.drv, e.vmm, e.fd, err = drv.ipcExport(b.a)
		} else {
			err = fmt.Errorf("devmem: export from %v: the driver cannot share memory: %w", b.a.dev, ErrUnsupported)
		}
		if err == nil && b.a.dev.kind == CUDA && !pinned {
			// GPU memory is served: openers ask before they map it.
			e.token, err = serviceToken()
		}
		if err != nil {
			if e.fd >= 0 {
				unix.Close(e.fd)
			}
			return IPCHandle{}, err
		}
		e.key = exportKey{b.a.dev.kind, pinned, e.vmm, uint32(os.Getpid()), e.token, b.a.dev.uuid, e.drv}
		exports[b.a], exportsByKey[e.key] = e, e
		if e.token != 0 {
			served[e.drv] = e
		}
		// Free finds e in exports and runs e.ownerFree instead of the
		// driver's release, so that views opened in this process keep the
		// memory until they close.
	}
	f := handleFields{kind: b.a.dev.kind, pinned: pinned, vmm: e.vmm, pid: uint32(os.Getpid()), token: e.token,
		off: uint64(b.off), size: uint64(b.n), uuid: b.a.dev.uuid, node: node, drv: e.drv}
	return f.seal(), nil
}

func (e *export) ownerFree() error {
	ipcMu.Lock()
	e.freed = true
	delete(exports, e.a)
	delete(exportsByKey, e.key)
	if served[e.drv] == e {
		delete(served, e.drv)
	}
	last := e.views == 0
	ipcMu.Unlock()
	err := retire(e.a.dev, e.a.markGone)
	if last {
		err = errors.Join(err, retire(nil, e.finalRelease))
	}
	return err
}

// finalRelease closes the descriptor the service sent copies of (processes
// that imported it keep the memory alive) and returns the memory, once
// the owner has freed it and the last view opened here has closed, and the
// work queued on streams before that has run (retire).
func (e *export) finalRelease() error {
	e.a.gone.Store(true)
	var closeErr error
	if e.fd >= 0 {
		if err := unix.Close(e.fd); err != nil {
			closeErr = fmt.Errorf("devmem: closing an exported descriptor: %w", err)
		}
		e.fd = -1
	}
	return errors.Join(e.release(), closeErr)
}

// OpenIPC opens the memory a handle names and returns a view of it on d. An
// allocation is mapped once per device and process however often it is
// opened; each view is released by CloseIPC and the mapping goes with the
// last. Opened in the exporting process, the view is the exported memory
// itself. A handle that is corrupt, from another node, or for another kind
// of device is refused with ErrBadHandle before any driver call, and so is
// a handle of GPU memory its exporter has freed (or an exporter that has
// exited): the exporter's service is asked first.
//
// An open refused with ErrAlreadyMapped asks every function registered with
// internal/devhook.OnStaleViews (gpucomm's cache of opened handles) to close the idle views it keeps of the exporter's memory,
// and when one closed some, opens once more.
func (d *Device) OpenIPC(h IPCHandle) (Buffer, error) {
	b, err := d.openIPC(h)
	if !errors.Is(err, ErrAlreadyMapped) {
		return b, err
	}
	if closeStale(d, h.PID()) > 0 {
		b, err = d.openIPC(h)
	}
	return b, err
}

// The functions onStaleViews registered, by id.
var (
	staleMu    sync.Mutex
	staleFuncs = map[int]func(*Device, int) int{}
	staleNext  int
)

// onStaleViews registers f, which closes the views of memory of process pid
// opened on d's device that its owner keeps open while nothing uses them
// (a cache of opened handles keeps such idle views), and says how many it
// closed: an OpenIPC refused with ErrAlreadyMapped calls it, with no lock of
// devmem's held, and opens again when some were closed. The returned
// function unregisters f. Backends reach it as internal/devhook.OnStaleViews.
func onStaleViews(f func(d *Device, pid int) int) (unregister func()) {
	staleMu.Lock()
	defer staleMu.Unlock()
	id := staleNext
	staleNext++
	staleFuncs[id] = f
	return func() {
		staleMu.Lock()
		delete(staleFuncs, id)
		staleMu.Unlock()
	}
}

func closeStale(d *Device, pid int) int {
	staleMu.Lock()
	fs := make([]func(*Device, int) int, 0, len(staleFuncs))
	for _, f := range staleFuncs {
		fs = append(fs, f)
	}
	staleMu.Unlock()
	n := 0
	for _, f := range fs {
		n += f(d, pid)
	}
	return n
}

func (d *Device) openIPC(h IPCHandle) (Buffer, error) {
	if err := d.usable("OpenIPC"); err != nil {
		return Buffer{}, err
	}
	f, err := decodeHandle(h.raw[:])
	if err != nil {
		return Buffer{}, err
	}
	if f.kind != d.kind {
		return Buffer{}, badHandle("exported from a %s device, opened on %v", f.kind, d)
	}
	node, err := localNode()
	if err != nil {
		return Buffer{}, err
	}
	if f.node != node {
		return Buffer{}, badHandle("exported on node %v, this is node %v", f.node, node)
	}
	off, n := int(f.off), int(f.size)
	remote := int(f.pid) != os.Getpid()
	key := mappingKey{d.kind, f.pinned, f.vmm, f.pid, f.token, d.uuid, f.drv}

	// Questions to the exporter are asked with ipcMu released: two processes
	// opening each other's handles would otherwise wait for each other.
	fd := -1
	if remote && f.token != 0 {
		ipcMu.Lock()
		_, have := mappings[key]
		ipcMu.Unlock()
		// A legacy handle is checked on every open, cached or not; a VMM
		// mapping keeps its memory alive, so only the first open asks.
		if !f.vmm || !have {
			if fd, err = askExporter(f, f.vmm); err != nil {
				return Buffer{}, err
			}
			defer func() {
				if fd >= 0 {
					unix.Close(fd)
				}
			}()
		}
	}

	// Host-driver memory's place in its exporter (see ErrAlreadyMapped).
	var slot *hostSlot
	if remote && d.kind == Host && !f.pinned {
		if x, err := parseHostIPC(f.drv); err == nil {
			slot = &hostSlot{dev: d.uuid, pid: x.pid, fd: x.fd}
		}
	}

	ipcMu.Lock()
	defer ipcMu.Unlock()
	v := &ipcView{f: f}
	var mem *allocation // the whole allocation the view is cut from
	if !remote {
		e := exportsByKey[exportKey{f.kind, f.pinned, f.vmm, f.pid, f.token, f.uuid, f.drv}]
		if e == nil {
			return Buffer{}, badHandle("exported by this process from memory since freed")
		}
		if off > e.a.size || n > e.a.size-off {
			return Buffer{}, badHandle("range [%d:+%d] outside the %d-byte allocation", off, n, e.a.size)
		}
		e.views++
		v.exp, mem = e, e.a
	} else {
		m := mappings[key]
		if m == nil {
			var base *allocation
			var unmap func() error
			if f.pinned {
				var err error
				if base, unmap, err = openPinnedShared(d, f.drv, off+n); err != nil {
					return Buffer{}, err
				}
			} else {
				drv, ok := d.drv.(ipcDriver)
				if !ok {
					return Buffer{}, fmt.Errorf("devmem: OpenIPC on %v: the driver cannot share memory: %w", d, ErrUnsupported)
				}
				if f.vmm && fd < 0 {
					// Another goroutine's mapping went away while we asked; ask again.
					return Buffer{}, fmt.Errorf("devmem: OpenIPC: the mapping of %v closed during the open; open again: %w", h, ErrBadHandle)
				}
				var err error
				if base, err = drv.ipcOpen(f.drv, fd, off+n); err != nil {
					return Buffer{}, err
				}
				// Checked once the driver has found the handle good, so that a
				// handle of freed memory is refused as such (a GPU's is, by
				// its exporter's service, before the driver).
				if old := hostSlotOf(slot); old != nil {
					return Buffer{}, errors.Join(fmt.Errorf("devmem: OpenIPC on %v: %d views of memory process %d has freed since are still open here, at the place (descriptor %d) of the memory %v names; close them first: %w: %w",
						d, old.refs, slot.pid, slot.fd, h, ErrAlreadyMapped, ErrBadHandle), drv.ipcClose(base))
				}
				unmap = func() error { return drv.ipcClose(base) }
			}
			base.dev = d
			m = &mapping{key: key, base: base, unmap: unmap}
			if slot != nil {
				m.slot = slot
				hostSlots[*slot] = m
			}
			mappings[key] = m
		}
		if off > m.base.size || n > m.base.size-off {
			if m.refs == 0 {
				m.forget()
				err := m.unmap()
				return Buffer{}, errors.Join(badHandle("range [%d:+%d] outside the %d-byte allocation", off, n, m.base.size), err)
			}
			return Buffer{}, badHandle("range [%d:+%d] outside the %d-byte allocation", off, n, m.base.size)
		}
		m.refs++
		v.m, mem = m, m.base
	}
	a := &allocation{dev: d, addr: mem.addr + uintptr(off), size: n, pinned: mem.pinned, home: mem, homeOff: off}
	if mem.host != nil {
		a.host = mem.host[off : off+n : off+n]
	}
	views[a] = v
	d.stats.opened.Add(1)
	return Buffer{a: a, n: n}, nil
}

// CloseIPC releases a view that OpenIPC returned (the whole view, as
// returned). The memory stays mapped while other views of it are open, and
// for the work queued on streams before the close, as after Free (host
// memory: the host device's, and pinned memory; a GPU's driver unmaps
// device memory at once, since it maps a legacy allocation once a process
// and an open of it may follow).
func (b Buffer) CloseIPC() error {
	if b.a == nil {
		return fmt.Errorf("devmem: CloseIPC of the zero Buffer: %w", ErrInvalidArgument)
	}
	ipcMu.Lock()
	v, ok := views[b.a]
	switch {
	case !ok:
		ipcMu.Unlock()
		return fmt.Errorf("devmem: CloseIPC of a buffer that is not an open IPC view (closed already?): %w", ErrInvalidArgument)
	case b.off != 0 || b.n != b.a.size:
		ipcMu.Unlock()
		return fmt.Errorf("devmem: CloseIPC of part of an opened view (offset %d, %d of %d bytes): %w", b.off, b.n, b.a.size, ErrInvalidArgument)
	}
	view := b.a
	delete(views, view)
	view.freed.Store(true)
	view.dev.stats.opened.Add(-1)
	var final *export // its memory is returned once the work queued before has run
	var err error
	if e := v.exp; e != nil {
		e.views--
		if e.views == 0 && e.freed {
			final = e
		}
	} else if m := v.m; m != nil {
		m.refs--
		if m.refs == 0 {
			// Unmapped before ipcMu is released, unless work queued on a
			// stream may still touch host memory (retire): an open of the
			// same allocation, which waits for ipcMu, must find it gone (a
			// GPU's driver refuses a second legacy mapping while one is
			// there; GPU memory is never left mapped for queued work).
			m.forget()
			if m.base.host != nil {
				err = retire(nil, func() error {
					view.gone.Store(true)
					return m.unmap()
				})
			} else {
				view.gone.Store(true)
				err = m.unmap()
			}
		}
	}
	ipcMu.Unlock()
	err = errors.Join(err, retire(view.dev, view.markGone))
	if final != nil {
		err = errors.Join(err, retire(nil, final.finalRelease))
	}
	return err
}

// IsOpenedIPC reports whether b is (part of) a view that OpenIPC returned
// and that is not closed yet.
func (b Buffer) IsOpenedIPC() bool {
	if b.a == nil {
		return false
	}
	ipcMu.Lock()
	defer ipcMu.Unlock()
	_, ok := views[b.a]
	return ok
}
