//go:build !cgo

package devmem

// Without cgo there is no cuda driver, so no CUDA handle: what
// cuda_handles.go answers for a host device.

func (s *Stream) handle() uintptr { return 0 }

func (e *Event) eventHandle() uintptr { return 0 }

func (d *Device) context() uintptr { return 0 }

func (s *Stream) enqueue(fn func(handle uintptr) error) error {
	if err := s.check(nil); err != nil {
		return err
	}
	return fn(0)
}

func (s *Stream) enqueueIn(fn func(ctx, handle uintptr) error) error {
	if err := s.check(nil); err != nil {
		return err
	}
	return fn(0, 0)
}
