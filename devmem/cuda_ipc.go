//go:build cgo

package devmem

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/internal/cuda"
)

// The cuda driver's half of IPC (ipc.go holds the rest). Two kinds of
// memory are shared:
//
//   - cuMemAlloc memory (Alloc): the opaque bytes are a cudaIpcMemHandle_t,
//     which names a whole allocation. Another process maps it with
//     cuIpcOpenMemHandle, once per process (ipc.go caches the mapping), with
//     peer access enabled lazily so that a GPU other than the exporter's can
//     map it too. CUDA allows one such mapping of an allocation per process,
//     and a CUDA-aware MPI makes its own of memory it moves: then ours fails
//     with CUDA_ERROR_ALREADY_MAPPED.
//   - VMM memory (AllocShared): cuMemCreate'd, exportable as a POSIX file
//     descriptor, which the exporter's service passes to the opener; the
//     opener imports it (cuMemImportFromShareableHandle) and maps it at an
//     address range of its own. Nothing limits how often that happens, and
//     the physical memory lives until every process has let it go.

// vmmSupport reports whether c's device and driver can share VMM memory
// through POSIX descriptors, and if not, why.
func (c *cudaDriver) vmmSupport() (bool, string) {
	c.vmmOnce.Do(func() {
		switch {
		case !cuda.HasVMM():
			c.vmmWhy = "the driver has no VMM calls (CUDA 10.2 or later)"
		default:
			vmm, err1 := cuda.DeviceAttribute(c.cu, cuda.AttrVirtualMemoryManagementSupported)
			fd, err2 := cuda.DeviceAttribute(c.cu, cuda.AttrHandleTypePosixFDSupported)
			switch {
			case err1 != nil || err2 != nil:
				c.vmmWhy = fmt.Sprintf("device attributes: %v", errors.Join(err1, err2))
			case vmm == 0:
				c.vmmWhy = "the device does not support virtual memory management"
			case fd == 0:
				c.vmmWhy = "the device cannot export memory as POSIX file descriptors"
			default:
				c.vmmOK = true
			}
		}
	})
	return c.vmmOK, c.vmmWhy
}

func (c *cudaDriver) allocShared(n int, mode ipcMode) (*allocation, error) {
	if mode == ipcLegacy {
		return c.alloc(n, false)
	}
	if ok, why := c.vmmSupport(); !ok {
		if mode == ipcVMM {
			return nil, fmt.Errorf("devmem: shared alloc on %v with %s=vmm: %s: %w", c.dev, IPCModeEnv, why, ErrUnsupported)
		}
		return c.alloc(n, false)
	}
	var h cuda.MemHandle
	err := c.do(func() error {
		g, err := cuda.MemGetAllocationGranularity(c.cu)
		if err != nil {
			return err
		}
		if g <= 0 || n > maxInt-g {
			return fmt.Errorf("%d bytes at a granularity of %d: %w", n, g, ErrInvalidArgument)
		}
		n = (n + g - 1) / g * g
		h, err = cuda.MemCreate(n, c.cu)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("devmem: shared (VMM) alloc of %d bytes on %v: %w", n, c.dev, err)
	}
	vm, p, err := c.vmmMap(h, n)
	if err != nil {
		return nil, fmt.Errorf("devmem: shared (VMM) alloc of %d bytes on %v: %w", n, c.dev, err)
	}
	release := func() error { return c.vmmUnmap(p, vm) }
	return &allocation{addr: uintptr(p), release: release, vmm: vm}, nil
}

// vmmMap maps the n bytes (a multiple of the granularity) of h at a new
// address range that c's device may read and write. On failure nothing is
// left, h released included.
func (c *cudaDriver) vmmMap(h cuda.MemHandle, n int) (*vmmMem, cuda.DevicePtr, error) {
	var p cuda.DevicePtr
	span := 0
	err := c.do(func() error {
		g, err := cuda.MemGetAllocationGranularity(c.cu)
		if err != nil {
			return errors.Join(err, cuda.MemRelease(h))
		}
		if g <= 0 || n <= 0 || n > maxInt-g {
			return errors.Join(fmt.Errorf("%d bytes at a granularity of %d: %w", n, g, ErrInvalidArgument), cuda.MemRelease(h))
		}
		span = (n + g - 1) / g * g
		if p, err = cuda.MemAddressReserve(span, g); err != nil {
			return errors.Join(err, cuda.MemRelease(h))
		}
		if err = cuda.MemMap(p, n, h); err != nil {
			return errors.Join(err, cuda.MemAddressFree(p, span), cuda.MemRelease(h))
		}
		if err = cuda.MemSetAccess(p, n, c.cu); err != nil {
			return errors.Join(err, cuda.MemUnmap(p, n), cuda.MemAddressFree(p, span), cuda.MemRelease(h))
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return &vmmMem{handle: uint64(h), size: n, span: span}, p, nil
}

// vmmUnmap undoes vmmMap.
func (c *cudaDriver) vmmUnmap(p cuda.DevicePtr, vm *vmmMem) error {
	return c.do(func() error {
		return errors.Join(cuda.MemUnmap(p, vm.size), cuda.MemAddressFree(p, vm.span), cuda.MemRelease(cuda.MemHandle(vm.handle)))
	})
}

const maxInt = int(^uint(0) >> 1)

func (c *cudaDriver) ipcExport(a *allocation) ([64]byte, bool, int, error) {
	if a.size == 0 {
		return [64]byte{}, false, -1, fmt.Errorf("devmem: export of an empty allocation (CUDA has no memory to share): %w", ErrInvalidArgument)
	}
	if vm := a.vmm; vm != nil {
		// cuIpcGetMemHandle refuses VMM memory: it is shared by descriptor.
		fd := -1
		err := c.do(func() error {
			var err error
			fd, err = cuda.MemExportToShareableHandle(cuda.MemHandle(vm.handle))
			return err
		})
		if err != nil {
			return [64]byte{}, false, -1, fmt.Errorf("devmem: export from %v: %w", c.dev, err)
		}
		return vmmIPC{id: vm.id, size: uint64(vm.size)}.bytes(), true, fd, nil
	}
	var h cuda.IpcMemHandle
	err := c.do(func() error {
		var err error
		h, err = cuda.IpcGetMemHandle(cuda.DevicePtr(a.addr))
		return err
	})
	if err != nil {
		return [64]byte{}, false, -1, fmt.Errorf("devmem: export from %v: %w", c.dev, err)
	}
	return h, false, -1, nil
}

func (c *cudaDriver) ipcOpen(h [64]byte, fd int, need int) (*allocation, error) {
	if fd >= 0 {
		return c.vmmOpen(h, fd, need)
	}
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
	case cuda.IsCode(err, cuda.CUDA_ERROR_ALREADY_MAPPED):
		return nil, fmt.Errorf("devmem: OpenIPC on %v: this process maps the allocation, or memory its exporter freed at the same place, already: a view of freed memory still open here (close it and open again), or a mapping outside gpucomm (a CUDA-aware MPI makes them, for memory it moved: allocate shared memory with AllocShared (VMM), or set %s=auto); CUDA allows one legacy mapping per process: %w: %w: %w", c.dev, IPCModeEnv, err, ErrAlreadyMapped, ErrBadHandle)
	default:
		return nil, fmt.Errorf("devmem: OpenIPC on %v: %w", c.dev, err)
	}
	if base != p || need > size {
		cerr := c.do(func() error { return cuda.IpcCloseMemHandle(p) })
		return nil, errors.Join(badHandle("range reaches byte %d of a %d-byte allocation mapped at offset %d", need, size, p-base), cerr)
	}
	return &allocation{addr: uintptr(p), size: size}, nil
}

// vmmOpen imports the descriptor of another process's VMM allocation and
// maps it.
func (c *cudaDriver) vmmOpen(drv [64]byte, fd int, need int) (*allocation, error) {
	x, err := parseVMMIPC(drv)
	if err != nil {
		return nil, err
	}
	if uint64(need) > x.size {
		return nil, badHandle("range reaches byte %d of a %d-byte allocation", need, x.size)
	}
	if ok, why := c.vmmSupport(); !ok {
		return nil, fmt.Errorf("devmem: OpenIPC of VMM memory on %v: %s: %w", c.dev, why, ErrUnsupported)
	}
	var h cuda.MemHandle
	err = c.do(func() error {
		var err error
		h, err = cuda.MemImportFromShareableHandle(fd)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("devmem: OpenIPC of VMM memory on %v: %w", c.dev, err)
	}
	vm, p, err := c.vmmMap(h, int(x.size))
	if err != nil {
		return nil, fmt.Errorf("devmem: OpenIPC of VMM memory on %v: %w", c.dev, err)
	}
	return &allocation{addr: uintptr(p), size: vm.size, vmm: vm}, nil
}

func (c *cudaDriver) ipcClose(a *allocation) error {
	var err error
	if a.vmm != nil {
		err = c.vmmUnmap(cuda.DevicePtr(a.addr), a.vmm)
	} else {
		err = c.do(func() error { return cuda.IpcCloseMemHandle(cuda.DevicePtr(a.addr)) })
	}
	if err != nil {
		return fmt.Errorf("devmem: CloseIPC on %v: %w", c.dev, err)
	}
	return nil
}
