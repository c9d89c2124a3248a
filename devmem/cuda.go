//go:build cgo

package devmem

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/cuda"
)

// The cuda driver exists only in cgo builds: internal/cuda reaches the
// driver library through dlopen, which needs cgo. Without it Open("cuda")
// says the driver was not compiled in.
func init() {
	openCUDA = cudaOpen
	countCUDA = cudaDeviceCount
}

// cudaDriver drives one GPU through its primary context, the context the
// CUDA runtime, NCCL and CUDA-aware MPI use too, so that pointers and
// streams pass between them.
//
// Threading rule: every driver call that uses the current context runs
// inside c.do (or c.enqueue, which calls it), that is inside
// cuda.WithContext; TestCUDACallsRunInsideTheContext checks this file set
// for any that does not.
type cudaDriver struct {
	dev   *Device
	cu    cuda.Device
	ctx   cuda.Context
	busID string
	// now is a private non-blocking stream for work given a nil *Stream:
	// it is queued there and waited for, so that it neither waits for
	// other streams (as CUDA's legacy default stream would) nor returns
	// before it is done.
	now cuda.Stream

	vmmOnce sync.Once // vmmSupport's answer, asked once
	vmmOK   bool
	vmmWhy  string

	streamsMu sync.Mutex
	streams   map[*cudaStream]struct{} // live streams, whose host queues Synchronize drains
}

// cudaDevices holds the one Device of each ordinal this process opened.
// Devices are never closed: buffers, streams and other libraries (NCCL)
// may use the primary context for as long as the process runs.
var cudaDevices struct {
	mu        sync.Mutex
	byOrdinal map[int]*Device
}

func cudaDeviceCount() (int, error) {
	if err := cuda.Load(); err != nil {
		switch {
		case cuda.IsCode(err, cuda.CUDA_ERROR_NO_DEVICE):
			return 0, nil // a driver, but no GPU visible (CUDA_VISIBLE_DEVICES="", say)
		case cuda.IsCode(err, cuda.CUDA_ERROR_STUB_LIBRARY):
			return 0, fmt.Errorf("devmem: cuda driver: the toolkit's stub libcuda was loaded, not a real driver: %w: %w", err, ErrLibraryNotFound)
		}
		return 0, fmt.Errorf("devmem: cuda driver: %w", err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return 0, fmt.Errorf("devmem: cuda driver: %w", err)
	}
	return n, nil
}

// cudaOpen returns the Device of a visible-device ordinal (the driver
// applies CUDA_VISIBLE_DEVICES), opening it on first use.
func cudaOpen(ordinal int) (*Device, error) {
	cudaDevices.mu.Lock()
	defer cudaDevices.mu.Unlock()
	if d := cudaDevices.byOrdinal[ordinal]; d != nil {
		return d, nil
	}
	n, err := cudaDeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("devmem: open cuda:%d: %d CUDA devices visible: %w", ordinal, n, ErrInvalidArgument)
	}
	wrap := func(err error) error { return fmt.Errorf("devmem: open cuda:%d: %w", ordinal, err) }
	cu, err := cuda.DeviceGet(ordinal)
	if err != nil {
		return nil, wrap(err)
	}
	name, err := cuda.DeviceName(cu)
	if err != nil {
		return nil, wrap(err)
	}
	uuid, err := cuda.DeviceUUID(cu)
	if err != nil {
		return nil, wrap(err)
	}
	bus, err := cuda.DevicePCIBusID(cu)
	if err != nil {
		return nil, wrap(err)
	}
	ctx, err := cuda.PrimaryCtxRetain(cu)
	if err != nil {
		return nil, wrap(err)
	}
	c := &cudaDriver{cu: cu, ctx: ctx, busID: bus}
	err = c.do(func() error {
		var err error
		c.now, err = cuda.StreamCreate(cuda.StreamNonBlocking)
		return err
	})
	if err != nil {
		return nil, wrap(errors.Join(err, cuda.PrimaryCtxRelease(cu)))
	}
	d := &Device{drv: c, kind: CUDA, ordinal: ordinal, name: name, uuid: uuid}
	c.dev = d
	if cudaDevices.byOrdinal == nil {
		cudaDevices.byOrdinal = map[int]*Device{}
	}
	cudaDevices.byOrdinal[ordinal] = d
	return d, nil
}

// do runs fn with the device's context current on a locked OS thread.
func (c *cudaDriver) do(fn func() error) error { return cuda.WithContext(c.ctx, fn) }

// enqueue queues work on cs (now, or behind the host work queued there), or
// for a nil cs on the private stream and waits for it there.
func (c *cudaDriver) enqueue(cs *cudaStream, fn func(h cuda.Stream) error) error {
	if cs != nil {
		return cs.issue(fn, nil)
	}
	return c.do(func() error {
		if err := fn(c.now); err != nil {
			return err
		}
		return cuda.StreamSynchronize(c.now)
	})
}

// enqueueIn is enqueue for fn that makes the context current itself, inside
// its own C call (internal/cuda's In calls), given the context and the
// stream: a copy or memset so costs one cgo call, where enqueue's
// cuda.WithContext adds two or three and locks the thread (several copies
// a message on the mpi backend's paths). For a nil cs the private stream's
// synchronize is one such call too.
func (c *cudaDriver) enqueueIn(cs *cudaStream, fn func(ctx cuda.Context, h cuda.Stream) error) error {
	if cs != nil {
		return cs.issueAs(func(h cuda.Stream) error { return fn(c.ctx, h) }, nil, false)
	}
	if err := fn(c.ctx, c.now); err != nil {
		return err
	}
	return cuda.StreamSynchronizeIn(c.ctx, c.now)
}

// onHost runs fn on the host once s's earlier work is done, before it
// returns: the copies that touch only host (pinned) memory, which no CUDA
// call does for us, and the copies into Go memory, which the caller reads
// as soon as the call returns.
func (c *cudaDriver) onHost(s *Stream, fn func()) error {
	if cs := cudaStreamOf(s); cs != nil {
		if err := cs.synchronize(); err != nil {
			return err
		}
	}
	fn()
	return nil
}

// cudaStreamOf is s's CUDA stream, nil for a nil s.
func cudaStreamOf(s *Stream) *cudaStream {
	if s == nil {
		return nil
	}
	return s.impl.(*cudaStream)
}

func cudaPtr(b Buffer) cuda.DevicePtr { return cuda.DevicePtr(b.Addr()) }

func (c *cudaDriver) alloc(n int, pinned bool) (*allocation, error) {
	if n == 0 {
		// CUDA refuses empty allocations; an empty Buffer needs no memory.
		a := &allocation{release: func() error { return nil }}
		if pinned {
			a.host = []byte{}
		}
		return a, nil
	}
	if pinned {
		var p unsafe.Pointer
		err := c.do(func() error {
			var err error
			p, err = cuda.MemAllocHost(n)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("devmem: pinned alloc of %d bytes for %v: %w", n, c.dev, err)
		}
		// C memory, so Go may keep a slice over it; the driver frees it.
		host := unsafe.Slice((*byte)(p), n)
		release := func() error {
			return c.do(func() error { return cuda.MemFreeHost(p) })
		}
		return &allocation{host: host, addr: uintptr(p), release: release}, nil
	}
	var p cuda.DevicePtr
	err := c.do(func() error {
		var err error
		p, err = cuda.MemAlloc(n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("devmem: alloc of %d bytes on %v: %w", n, c.dev, err)
	}
	release := func() error {
		return c.do(func() error { return cuda.MemFree(p) })
	}
	return &allocation{addr: uintptr(p), release: release}, nil
}

func (c *cudaDriver) copy(dst, src Buffer, n int, s *Stream) error {
	// CopyN checked that both hold n bytes, so the views exist.
	d, _ := dst.Slice(0, n)
	w, _ := src.Slice(0, n)
	if d.Overlaps(w) {
		if d.Same(w) {
			return nil // a copy onto itself changes nothing
		}
		return fmt.Errorf("devmem: copy of %d bytes between overlapping ranges of one buffer: %w", n, ErrInvalidArgument)
	}
	var err error
	switch {
	case dst.a.pinned && src.a.pinned:
		err = c.onHost(s, func() {
			hd, _ := d.Bytes()
			hs, _ := w.Bytes()
			copy(hd, hs)
		})
	case src.a.pinned:
		err = c.enqueueIn(cudaStreamOf(s), func(ctx cuda.Context, h cuda.Stream) error {
			return cuda.MemcpyHtoDAsyncIn(ctx, cudaPtr(dst), src.Addr(), n, h)
		})
	case dst.a.pinned:
		err = c.enqueueIn(cudaStreamOf(s), func(ctx cuda.Context, h cuda.Stream) error {
			return cuda.MemcpyDtoHAsyncIn(ctx, dst.Addr(), cudaPtr(src), n, h)
		})
	default:
		err = c.enqueueIn(cudaStreamOf(s), func(ctx cuda.Context, h cuda.Stream) error {
			return cuda.MemcpyDtoDAsyncIn(ctx, cudaPtr(dst), cudaPtr(src), n, h)
		})
	}
	if err != nil {
		return fmt.Errorf("devmem: copy of %d bytes on %v: %w", n, c.dev, err)
	}
	return nil
}

// copyFromHost copies Go memory with the blocking cuMemcpyHtoD, the one
// copy the driver may be handed Go memory for. It runs on CUDA's legacy
// default stream, which waits for other libraries' blocking streams (ours
// are non-blocking, so they are not waited for).
func (c *cudaDriver) copyFromHost(dst Buffer, src []byte, s *Stream) error {
	if dst.a.pinned {
		return c.onHost(s, func() {
			hd, _ := dst.Bytes()
			copy(hd, src)
		})
	}
	if cs := cudaStreamOf(s); cs != nil {
		if err := cs.synchronize(); err != nil {
			return fmt.Errorf("devmem: copy of %d bytes from Go memory to %v: %w", len(src), c.dev, err)
		}
	}
	err := c.do(func() error {
		if err := cuda.MemcpyHtoDBytes(cudaPtr(dst), src); err != nil {
			return err
		}
		// From pageable memory the driver returns once src is staged, with
		// the DMA to dst maybe still queued on the legacy stream, which
		// work on our streams does not wait for.
		return cuda.StreamSynchronize(0)
	})
	if err != nil {
		return fmt.Errorf("devmem: copy of %d bytes from Go memory to %v: %w", len(src), c.dev, err)
	}
	return nil
}

// copyToHost copies into Go memory with the blocking cuMemcpyDtoH, which
// returns once the data is in dst.
func (c *cudaDriver) copyToHost(dst []byte, src Buffer, s *Stream) error {
	if src.a.pinned {
		return c.onHost(s, func() {
			hs, _ := src.Bytes()
			copy(dst, hs)
		})
	}
	if cs := cudaStreamOf(s); cs != nil {
		if err := cs.synchronize(); err != nil {
			return fmt.Errorf("devmem: copy of %d bytes from %v to Go memory: %w", len(dst), c.dev, err)
		}
	}
	err := c.do(func() error { return cuda.MemcpyDtoHBytes(dst, cudaPtr(src)) })
	if err != nil {
		return fmt.Errorf("devmem: copy of %d bytes from %v to Go memory: %w", len(dst), c.dev, err)
	}
	return nil
}

func (c *cudaDriver) memset(dst Buffer, v byte, s *Stream) error {
	if dst.a.pinned {
		return c.onHost(s, func() {
			hd, _ := dst.Bytes()
			for i := range hd {
				hd[i] = v
			}
		})
	}
	err := c.enqueueIn(cudaStreamOf(s), func(ctx cuda.Context, h cuda.Stream) error {
		return cuda.MemsetD8AsyncIn(ctx, cudaPtr(dst), v, dst.Len(), h)
	})
	if err != nil {
		return fmt.Errorf("devmem: memset of %d bytes on %v: %w", dst.Len(), c.dev, err)
	}
	return nil
}

// synchronize drains every stream's host queue, then waits for the device.
func (c *cudaDriver) synchronize() error {
	c.streamsMu.Lock()
	live := make([]*cudaStream, 0, len(c.streams))
	for s := range c.streams {
		live = append(live, s)
	}
	c.streamsMu.Unlock()
	var errs []error
	for _, s := range live {
		errs = append(errs, s.flush())
	}
	return errors.Join(append(errs, c.do(cuda.CtxSynchronize))...)
}

func (c *cudaDriver) computeCapability() (major, minor int, err error) {
	if major, err = cuda.DeviceAttribute(c.cu, cuda.AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = cuda.DeviceAttribute(c.cu, cuda.AttrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

func (c *cudaDriver) memInfo() (free, total int, err error) {
	err = c.do(func() error {
		var err error
		free, total, err = cuda.MemGetInfo()
		return err
	})
	return free, total, err
}

func (c *cudaDriver) pciBusID() string { return c.busID }

func (c *cudaDriver) registerHost(mem []byte) (func() error, error) {
	p, n := addrOf(mem), len(mem)
	// DeviceMap so kernels may take the Buffer's address, as they may an
	// AllocPinned one's; Portable so every context sees it locked.
	flags := cuda.MemHostRegisterPortable | cuda.MemHostRegisterDeviceMap
	if err := c.do(func() error { return cuda.MemHostRegister(p, n, flags) }); err != nil {
		return nil, fmt.Errorf("devmem: RegisterHost of %d bytes at %#x on %v: %w", n, p, c.dev, err)
	}
	return func() error {
		return c.do(func() error { return cuda.MemHostUnregister(p) })
	}, nil
}

func (c *cudaDriver) copyPeer(dst, src Buffer, n int, s *Stream) error {
	dc, ok := dst.a.dev.drv.(*cudaDriver)
	if !ok {
		return fmt.Errorf("devmem: peer copy from %v to %v: not a cuda device: %w", c.dev, dst.a.dev, ErrInvalidArgument)
	}
	// The stream's device queues the copy; a nil stream the destination's.
	owner := dc
	if s != nil {
		owner = s.dev.drv.(*cudaDriver)
	}
	err := owner.enqueue(cudaStreamOf(s), func(h cuda.Stream) error {
		return cuda.MemcpyPeerAsync(cudaPtr(dst), dc.ctx, cudaPtr(src), c.ctx, n, h)
	})
	if err != nil {
		return fmt.Errorf("devmem: peer copy of %d bytes from %v to %v: %w", n, c.dev, dst.a.dev, err)
	}
	return nil
}
