//go:build cgo

package devmem

import "github.com/gpucomm/gpucomm/internal/cuda"

// Raw handles for libraries that queue work on a GPU themselves (NCCL),
// which gpucomm's backends reach through internal/devhook: such libraries
// take the CUstream as their cudaStream_t, and their calls must run with
// the device's primary context current (cuda.WithContext).

// handle is the CUstream under s, or 0 for a nil stream or a stream of a
// host device (internal/devhook.StreamHandle).
func (s *Stream) handle() uintptr {
	if s == nil {
		return 0
	}
	if cs, ok := s.impl.(*cudaStream); ok {
		return uintptr(cs.h)
	}
	return 0
}

// eventHandle is the CUevent under e, or 0 for a nil event or an event of
// a host device (internal/devhook.EventHandle).
func (e *Event) eventHandle() uintptr {
	if e == nil {
		return 0
	}
	if ce, ok := e.impl.(*cudaEvent); ok {
		return uintptr(ce.h)
	}
	return 0
}

// context is the primary CUcontext of a GPU device, or 0 for a host device
// (internal/devhook.Context).
func (d *Device) context() uintptr {
	if d == nil {
		return 0
	}
	if c, ok := d.drv.(*cudaDriver); ok {
		return uintptr(c.ctx)
	}
	return 0
}

// enqueue runs fn with s's CUstream at s's place in line
// (internal/devhook.Enqueue).
func (s *Stream) enqueue(fn func(handle uintptr) error) error {
	if err := s.check(nil); err != nil {
		return err
	}
	if s == nil {
		return fn(0)
	}
	cs, ok := s.impl.(*cudaStream)
	if !ok {
		return fn(0)
	}
	return cs.issue(func(h cuda.Stream) error { return fn(uintptr(h)) }, nil)
}

// enqueueIn runs fn with the device's primary context and s's CUstream at
// s's place in line, without making the context current: fn does that
// itself, inside its own C call (internal/devhook.EnqueueIn).
func (s *Stream) enqueueIn(fn func(ctx, handle uintptr) error) error {
	if err := s.check(nil); err != nil {
		return err
	}
	if s == nil {
		return fn(0, 0)
	}
	cs, ok := s.impl.(*cudaStream)
	if !ok {
		return fn(0, 0)
	}
	if ran, err := cs.enqueueNow(fn); ran {
		return err
	}
	ctx := uintptr(cs.c.ctx)
	return cs.issueAs(func(h cuda.Stream) error { return fn(ctx, uintptr(h)) }, nil, false)
}
