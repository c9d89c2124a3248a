//go:build cgo

package devmem

import "github.com/gpucomm/gpucomm/internal/cuda"

// Raw handles for libraries that queue work on a GPU themselves (NCCL): they
// take the CUstream as their cudaStream_t, and their calls must run with the
// device's primary context current (cuda.WithContext). Both exist only in
// cgo builds, where the cuda driver does.

// Handle is the CUstream under s, or 0 for a nil stream or a stream of a
// host device. It stays valid until s is destroyed.
func (s *Stream) Handle() uintptr {
	if s == nil {
		return 0
	}
	if cs, ok := s.impl.(*cudaStream); ok {
		return uintptr(cs.h)
	}
	return 0
}

// Context is the primary CUcontext of a GPU device, or 0 for a host device.
// Devices are never closed, so it stays valid for the life of the process.
func (d *Device) Context() uintptr {
	if d == nil {
		return 0
	}
	if c, ok := d.drv.(*cudaDriver); ok {
		return uintptr(c.ctx)
	}
	return 0
}

// Enqueue runs fn with s's CUstream, the device's primary context current,
// at s's place in line: now when no host work is queued on s (and fn's
// error is returned here), or else once the host work queued before it is
// done (and fn's error is returned by the next Synchronize of s). Libraries
// that queue GPU work on the stream themselves (NCCL) go through it, so
// that their work keeps its order among the stream's other work. For a nil
// stream or a stream of a host device fn gets 0 and runs now.
func (s *Stream) Enqueue(fn func(handle uintptr) error) error {
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
