//go:build cgo

package devmem

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
