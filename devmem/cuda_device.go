package devmem

import (
	"fmt"
	"os"
)

// gpuDriver is what a driver of a real GPU adds to driver: kernel modules,
// memory figures, page-locking of memory it did not allocate and copies
// between devices. It is optional, found by type assertion, so that this
// file (and package kernels above it) builds without cgo; on a device whose
// driver lacks it the calls below return ErrUnsupported.
type gpuDriver interface {
	computeCapability() (major, minor int, err error)
	loadModule(image []byte) (moduleImpl, error)
	memInfo() (free, total int, err error)
	pciBusID() string
	// registerHost page-locks mem and returns how to undo it.
	registerHost(mem []byte) (unregister func() error, err error)
	// copyPeer copies between device memory of two devices of this driver;
	// s is nil or a stream of one of them.
	copyPeer(dst, src Buffer, n int, s *Stream) error
}

// ComputeCapability is the GPU's architecture version (9, 0 for an H200).
// A host device has none: the error wraps ErrUnsupported.
func (d *Device) ComputeCapability() (major, minor int, err error) {
	g, err := d.gpu("ComputeCapability")
	if err != nil {
		return 0, 0, err
	}
	return g.computeCapability()
}

// MemInfo reports the free and total bytes of the device's memory, as the
// driver counts them (other processes' allocations included).
func (d *Device) MemInfo() (free, total int, err error) {
	g, err := d.gpu("MemInfo")
	if err != nil {
		return 0, 0, err
	}
	return g.memInfo()
}

// PCIBusID is the GPU's PCI address as the driver writes it
// ("0000:19:00.0"), or "" for a device that is not on the PCI bus.
func (d *Device) PCIBusID() string {
	if d == nil {
		return ""
	}
	if g, ok := d.drv.(gpuDriver); ok {
		return g.pciBusID()
	}
	return ""
}

func (d *Device) gpu(op string) (gpuDriver, error) {
	if err := d.usable(op); err != nil {
		return nil, err
	}
	g, ok := d.drv.(gpuDriver)
	if !ok {
		return nil, fmt.Errorf("devmem: %s: %v is not a GPU: %w", op, d, ErrUnsupported)
	}
	return g, nil
}

// RegisterHost page-locks mem so that the device copies to and from it
// asynchronously, as it does with AllocPinned memory, and returns it as a
// pinned Buffer whose Free unregisters it (and does not free it).
//
// The caller must own mem for as long as the Buffer lives: memory from mmap
// or C, never the Go heap, whose memory the driver must not keep addresses
// of. mem must start on a page boundary and span whole pages, because the
// driver locks whole pages and two registrations may not share one. On a
// host device the memory is used as it is.
func (d *Device) RegisterHost(mem []byte) (Buffer, error) {
	if err := d.usable("RegisterHost"); err != nil {
		return Buffer{}, err
	}
	page := os.Getpagesize()
	switch {
	case len(mem) == 0:
		return Buffer{}, fmt.Errorf("devmem: RegisterHost of no memory: %w", ErrInvalidArgument)
	case addrOf(mem)%uintptr(page) != 0:
		return Buffer{}, fmt.Errorf("devmem: RegisterHost: memory at %#x does not start on a %d-byte page (use mmap): %w", addrOf(mem), page, ErrInvalidArgument)
	case len(mem)%page != 0:
		return Buffer{}, fmt.Errorf("devmem: RegisterHost: %d bytes is not a whole number of %d-byte pages: %w", len(mem), page, ErrInvalidArgument)
	}
	mem = mem[:len(mem):len(mem)]
	unregister := func() error { return nil } // host memory needs no locking on a host device
	if g, ok := d.drv.(gpuDriver); ok {
		var err error
		if unregister, err = g.registerHost(mem); err != nil {
			return Buffer{}, err
		}
	}
	a := &allocation{dev: d, addr: addrOf(mem), host: mem, size: len(mem), pinned: true, release: unregister}
	d.stats.pinned.Add(1)
	d.stats.bytes.Add(int64(len(mem)))
	return Buffer{a: a, n: len(mem)}, nil
}

// CopyPeer copies the first n bytes of src to the start of dst, in stream
// order on s, where dst and src may belong to different devices of the same
// kind (two GPUs: cuMemcpyPeer). s is nil or a stream of either device. On
// one device it is CopyN. Across devices both sides must be device memory:
// pinned memory is copied with CopyN on its own device.
func CopyPeer(dst, src Buffer, n int, s *Stream) error {
	if err := src.Check("devmem: peer copy source", nil, n); err != nil {
		return err
	}
	if err := dst.Check("devmem: peer copy destination", nil, n); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("devmem: peer copy of %d bytes: %w", n, ErrInvalidArgument)
	}
	sd, dd := src.a.dev, dst.a.dev
	if sd == dd {
		return CopyN(dst, src, n, s)
	}
	switch {
	case sd.kind != dd.kind:
		return fmt.Errorf("devmem: peer copy from %v to %v: devices of different kinds: %w", sd, dd, ErrInvalidArgument)
	case src.a.pinned || dst.a.pinned:
		return fmt.Errorf("devmem: peer copy between %v and %v of pinned memory (copy it on its own device with CopyN): %w", sd, dd, ErrInvalidArgument)
	case s != nil && s.dev != sd && s.dev != dd:
		return fmt.Errorf("devmem: peer copy from %v to %v on a stream of %v: %w", sd, dd, s.dev, ErrInvalidArgument)
	}
	if err := s.check(nil); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	// Two devices can reach one memory: a view OpenIPC gave one of them.
	if (Buffer{a: dst.a, off: dst.off, n: n}).Overlaps(Buffer{a: src.a, off: src.off, n: n}) {
		return fmt.Errorf("devmem: peer copy between overlapping ranges (views of one memory): %w", ErrInvalidArgument)
	}
	if g, ok := sd.drv.(gpuDriver); ok {
		return g.copyPeer(dst, src, n, s)
	}
	d, dok := dst.Bytes()
	v, vok := src.Bytes()
	if !dok || !vok {
		return fmt.Errorf("devmem: peer copy from %v to %v: the driver cannot copy between devices: %w", sd, dd, ErrUnsupported)
	}
	// Host devices: both sides are host memory, so the stream's own queue orders the copy.
	return onStream(s, func() error { copy(d[:n], v[:n]); return nil })
}
