//go:build cgo

package devmem

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/internal/cuda"
)

// The cuda driver's half of IPC (ipc.go holds the rest): the opaque bytes
// are a cudaIpcMemHandle_t, which names a whole cuMemAlloc allocation.
// Another process maps it with cuIpcOpenMemHandle, once per process (ipc.go
// caches the mapping), with peer access enabled lazily so that a GPU other
// than the exporter's can map it too.

func (c *cudaDriver) ipcExport(a *allocation) ([64]byte, error) {
	if a.size == 0 {
		return [64]byte{}, fmt.Errorf("devmem: export of an empty allocation (CUDA has no memory to share): %w", ErrInvalidArgument)
	}
	var h cuda.IpcMemHandle
	err := c.do(func() error {
		var err error
		h, err = cuda.IpcGetMemHandle(cuda.DevicePtr(a.addr))
		return err
	})
	if err != nil {
		return [64]byte{}, fmt.Errorf("devmem: export from %v: %w", c.dev, err)
	}
	return h, nil
}

func (c *cudaDriver) ipcOpen(h [64]byte, need int) (*allocation, error) {
	var p, base cuda.DevicePtr
	var size int
	err := c.do(func() error {
		var err error
		if p, err = cuda.IpcOpenMemHandle(h, cuda.IpcMemLazyEnablePeerAccess); err != nil {
			return err
		}
		if base, size, err = cuda.MemGetAddressRange(p); err != nil {
			return errors.Join(err, cuda.IpcCloseMemHandle(p))
		}
		return nil
	})
	switch {
	case err == nil:
	case cuda.IsCode(err, cuda.CUDA_ERROR_INVALID_VALUE), cuda.IsCode(err, cuda.CUDA_ERROR_INVALID_HANDLE),
		cuda.IsCode(err, cuda.CUDA_ERROR_MAP_FAILED), cuda.IsCode(err, cuda.CUDA_ERROR_INVALID_DEVICE),
		cuda.IsCode(err, cuda.CUDA_ERROR_NOT_FOUND):
		return nil, fmt.Errorf("devmem: IPC handle: %v cannot map it (exporter gone, memory freed, or not a CUDA handle): %w: %w", c.dev, err, ErrBadHandle)
	default:
		return nil, fmt.Errorf("devmem: OpenIPC on %v: %w", c.dev, err)
	}
	if base != p || need > size {
		cerr := c.do(func() error { return cuda.IpcCloseMemHandle(p) })
		return nil, errors.Join(badHandle("range reaches byte %d of a %d-byte allocation mapped at offset %d", need, size, p-base), cerr)
	}
	return &allocation{addr: uintptr(p), size: size}, nil
}

func (c *cudaDriver) ipcClose(a *allocation) error {
	if err := c.do(func() error { return cuda.IpcCloseMemHandle(cuda.DevicePtr(a.addr)) }); err != nil {
		return fmt.Errorf("devmem: CloseIPC on %v: %w", c.dev, err)
	}
	return nil
}
