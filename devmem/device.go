package devmem

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// Sentinels shared with comm; errors.Is works with either name.
var (
	ErrInvalidArgument = errs.ErrInvalidArgument
	ErrUnsupported     = errs.ErrUnsupported
	ErrLibraryNotFound = errs.ErrLibraryNotFound
	ErrBadHandle       = errs.ErrBadHandle
	ErrClosed          = errs.ErrClosed
)

// Kind says which driver a Device uses.
type Kind int

const (
	// Host is the simulated device whose memory is host memory.
	Host Kind = iota + 1
	// CUDA is an NVIDIA GPU driven through the CUDA driver API.
	CUDA
)

func (k Kind) String() string {
	switch k {
	case Host:
		return "host"
	case CUDA:
		return "cuda"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Device is one device: a GPU, or a simulated host device. Devices come
// from Open, NewHostDevice and the like; a nil *Device, or a zero Device
// that none of them made, is no device: every method that returns an error
// refuses it with one wrapping ErrInvalidArgument, and the accessors that
// return none (Kind, Ordinal, Name, UUID, PCIBusID, Stats) give their zero
// answers.
type Device struct {
	drv     driver
	kind    Kind
	ordinal int
	name    string
	uuid    [16]byte
	stats   stats
}

// usable returns an error wrapping ErrInvalidArgument, naming op, unless d
// is a device that Open, NewHostDevice or the cuda driver made.
func (d *Device) usable(op string) error {
	switch {
	case d == nil:
		return fmt.Errorf("devmem: %s on a nil device: %w", op, ErrInvalidArgument)
	case d.drv == nil:
		return fmt.Errorf("devmem: %s on a zero Device (devices come from Open or NewHostDevice): %w", op, ErrInvalidArgument)
	}
	return nil
}

// Kind reports the device's driver; 0, which is neither Host nor CUDA, for
// a nil or zero Device.
func (d *Device) Kind() Kind {
	if d == nil {
		return 0
	}
	return d.kind
}

// Ordinal is the device's index among the driver's devices of this process
// (0 for a nil Device).
func (d *Device) Ordinal() int {
	if d == nil {
		return 0
	}
	return d.ordinal
}

// Name is the device's product name ("NVIDIA H200", "host"); "" for a nil
// or zero Device.
func (d *Device) Name() string {
	if d == nil {
		return ""
	}
	return d.name
}

// UUID identifies the device across processes; it is all zero for a nil or
// zero Device.
func (d *Device) UUID() [16]byte {
	if d == nil {
		return [16]byte{}
	}
	return d.uuid
}

func (d *Device) String() string {
	if d == nil {
		return "<nil device>"
	}
	if d.drv == nil {
		return "<zero device>"
	}
	return fmt.Sprintf("%s:%d (%s)", d.kind, d.ordinal, d.name)
}

// Synchronize waits for all work queued on the device's live streams
// before the call, host functions included, on every driver. It returns the
// errors that work met since each stream's last Synchronize, as the
// streams' own Synchronize would (which then no longer returns them). A host
// function queued on one of the device's streams must not call it: it would
// wait for itself (see Stream.HostFunc).
func (d *Device) Synchronize() error {
	if err := d.usable("Synchronize"); err != nil {
		return err
	}
	return d.drv.synchronize()
}

// Stats counts a device's live objects, so tests can assert nothing leaked.
type Stats struct {
	Buffers int64 // device allocations not yet freed
	Pinned  int64 // pinned host allocations not yet freed
	Bytes   int64 // bytes held by both
	Streams int64
	Events  int64
	Opened  int64 // IPC views opened and not yet closed
}

type stats struct{ buffers, pinned, bytes, streams, events, opened atomic.Int64 }

// Stats returns the device's live-object counts (all zero for a nil
// Device).
func (d *Device) Stats() Stats {
	if d == nil {
		return Stats{}
	}
	s := &d.stats
	return Stats{s.buffers.Load(), s.pinned.Load(), s.bytes.Load(), s.streams.Load(), s.events.Load(), s.opened.Load()}
}

var hostDevices atomic.Int64

// NewHostDevice makes a simulated device whose memory is host memory. Each
// call makes a distinct device with its own UUID and counters.
func NewHostDevice() *Device {
	n := hostDevices.Add(1) - 1
	d := &Device{kind: Host, ordinal: int(n), name: "host"}
	d.uuid = hostUUID(n)
	d.drv = &hostDriver{dev: d}
	return d
}

// openCUDA is set by the cuda driver when it is compiled in.
var openCUDA func(ordinal int) (*Device, error)

// CUDADeviceCount reports how many GPUs the cuda driver sees (0 and an error
// when it cannot run here).
func CUDADeviceCount() (int, error) { return countCUDA() }

// countCUDA is set by the cuda driver when it is compiled in.
var countCUDA = func() (int, error) {
	return 0, fmt.Errorf("devmem: cuda driver not available: %w", ErrLibraryNotFound)
}

// CheckSpec reports whether Open understands spec: "", "auto", "host",
// "cuda" or "cuda:N" with N >= 0, in any case and with spaces around. It
// opens nothing, so a GPU that is not there is Open's error, not this one's.
func CheckSpec(spec string) error {
	s := strings.ToLower(strings.TrimSpace(spec))
	switch s {
	case "", "auto", "host", "cuda":
		return nil
	}
	if rest, ok := strings.CutPrefix(s, "cuda:"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
			return nil
		}
	}
	return fmt.Errorf("devmem: unknown device %q (want auto, host, cuda or cuda:N): %w", spec, ErrInvalidArgument)
}

// IsGPUSpec reports whether spec asks for a GPU ("cuda" or "cuda:N"), which
// a backend that runs on host devices only must refuse.
func IsGPUSpec(spec string) bool {
	s := strings.ToLower(strings.TrimSpace(spec))
	return s == "cuda" || strings.HasPrefix(s, "cuda:")
}

// Memory reports the bytes free and in total where the device's buffers
// live: the GPU's memory (MemInfo) for a cuda device, and for a host device
// the host's memory as Linux counts it (MemAvailable and MemTotal of
// /proc/meminfo), since its buffers are host memory. Elsewhere the error
// wraps ErrUnsupported.
func (d *Device) Memory() (free, total int, err error) {
	if err := d.usable("Memory"); err != nil {
		return 0, 0, err
	}
	if d.kind != Host {
		return d.MemInfo()
	}
	return HostMemory()
}

// MemoryText writes a byte count as memory refusals say it: decimal
// gigabytes, or megabytes below one ("57.6 GB", "12.6 MB").
func MemoryText(n int64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}

// HostMemory reports the host's available and total memory in bytes, from
// /proc/meminfo's MemAvailable and MemTotal.
func HostMemory() (available, total int, err error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("devmem: host memory: %v: %w", err, ErrUnsupported)
	}
	return parseMeminfo(string(b))
}

func parseMeminfo(s string) (available, total int, err error) {
	found := 0
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		var dst *int
		switch f[0] {
		case "MemAvailable:":
			dst = &available
		case "MemTotal:":
			dst = &total
		default:
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || kb < 0 || kb > math.MaxInt>>10 {
			return 0, 0, fmt.Errorf("devmem: /proc/meminfo line %q: %w", line, ErrUnsupported)
		}
		*dst = int(kb) << 10
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("devmem: /proc/meminfo lacks MemAvailable or MemTotal: %w", ErrUnsupported)
	}
	return available, total, nil
}

// Open returns the device named by spec for a process with the given local
// rank: "host", "cuda" (GPU localRank mod count), "cuda:N", or "auto"/"" (a
// GPU when one is usable, else the host device). An empty spec reads
// GPUCOMM_DEVICE first.
func Open(spec string, localRank int) (*Device, error) {
	if spec == "" {
		spec = os.Getenv("GPUCOMM_DEVICE")
	}
	if err := CheckSpec(spec); err != nil {
		return nil, err // a typo is the user's error, whatever the machine has
	}
	spec = strings.ToLower(strings.TrimSpace(spec))
	if localRank < 0 {
		localRank = 0
	}
	switch {
	case spec == "" || spec == "auto":
		if n, err := CUDADeviceCount(); err == nil && n > 0 && openCUDA != nil {
			return openCUDA(localRank % n)
		}
		return NewHostDevice(), nil
	case spec == "host":
		return NewHostDevice(), nil
	case spec == "cuda" || strings.HasPrefix(spec, "cuda:"):
		if openCUDA == nil {
			return nil, fmt.Errorf("devmem: device %q: cuda driver not compiled in (needs cgo): %w", spec, ErrUnsupported)
		}
		n, err := CUDADeviceCount()
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("devmem: device %q: no CUDA device visible: %w", spec, ErrInvalidArgument)
		}
		ord := localRank % n
		if rest, ok := strings.CutPrefix(spec, "cuda:"); ok {
			ord, err = strconv.Atoi(rest)
			if err != nil || ord < 0 || ord >= n {
				return nil, fmt.Errorf("devmem: device %q: want cuda:0..cuda:%d: %w", spec, n-1, ErrInvalidArgument)
			}
		}
		return openCUDA(ord)
	}
	return nil, fmt.Errorf("devmem: unknown device %q (want auto, host, cuda or cuda:N): %w", spec, ErrInvalidArgument)
}
