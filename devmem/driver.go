package devmem

import "time"

// driver is what each kind of device implements. Arguments reaching it have
// been checked already: buffers are live, on this device, and large enough.
type driver interface {
	alloc(n int, pinned bool) (*allocation, error)
	copy(dst, src Buffer, n int, s *Stream) error
	copyFromHost(dst Buffer, src []byte, s *Stream) error
	copyToHost(dst []byte, src Buffer, s *Stream) error
	memset(dst Buffer, v byte, s *Stream) error
	newStream() (streamImpl, error)
	newEvent() (eventImpl, error)
	synchronize() error
}

type streamImpl interface {
	hostFunc(fn func() error) error
	hostCall(fn func(before error) error) error
	hostFuncDeferred(fn func() error) error
	hostWait(wait func() error, poll func() (bool, error), deferred bool) error
	query() (bool, error)
	synchronize() error
	waitEvent(e eventImpl) error
	// task queues fn, given the device's context and the stream's handle
	// (0 and 0 on the host driver), behind the stream's host work but not
	// behind its GPU work (internal/devhook.Task).
	task(fn func(ctx, handle uintptr) error) error
	destroy() error
	// hq is the stream's host queue, which memory freed while it holds
	// work outlives (retire).
	hq() *hostQueue
}

type eventImpl interface {
	record(s streamImpl) error
	synchronize() error
	query() (bool, error)
	elapsedSince(start eventImpl) (time.Duration, error)
	destroy() error
}

// ipcDriver is implemented by drivers whose device memory other processes of
// the node can map. It is optional, found by type assertion, so a driver
// without it still builds; Export and OpenIPC then return ErrUnsupported.
// The cuda driver wraps cuIpcGetMemHandle, cuIpcOpenMemHandle and
// cuIpcCloseMemHandle for cuMemAlloc memory, and the VMM calls
// (cuMemExportToShareableHandle, cuMemImportFromShareableHandle, cuMemMap)
// for AllocShared memory.
type ipcDriver interface {
	// ipcExport returns the bytes through which another process maps all of
	// a (which is live, on this driver's device, and not pinned); for VMM
	// memory vmm is true and fd a new descriptor of the memory, which the
	// exporter's service hands out (and ipc.go closes), else fd is -1.
	ipcExport(a *allocation) (drv [64]byte, vmm bool, fd int, err error)
	// ipcOpen maps the allocation another process exported as drv; fd is
	// the descriptor its service sent for VMM memory (the caller closes it),
	// else -1; need is how many bytes the handle's range reaches. The result
	// must have addr, size (the whole allocation) and, for host-accessible
	// memory, host set; drv that names nothing mappable is an error wrapping
	// ErrBadHandle.
	ipcOpen(drv [64]byte, fd int, need int) (*allocation, error)
	// ipcClose unmaps what ipcOpen returned.
	ipcClose(a *allocation) error
}

// ipcEventDriver is implemented by drivers whose events another process of
// the node can wait for (the cuda driver, with CUDA's IPC events). It is
// optional, found by type assertion, as ipcDriver is; NewIPCEvent and
// OpenIPCEvent return ErrUnsupported on a device whose driver lacks it.
type ipcEventDriver interface {
	// newIPCEvent makes an event that ipcEvent.exportIPC can export.
	newIPCEvent() (eventImpl, error)
	// openIPCEvent opens the event another process exported as h (not the
	// zero handle); a handle that names no such event is an error wrapping
	// ErrInvalidArgument.
	openIPCEvent(h IPCEventHandle) (eventImpl, error)
}

// ipcEvent is an eventImpl that may be exported: exportIPC returns its
// handle, or an error wrapping ErrInvalidArgument for one that newIPCEvent
// did not make.
type ipcEvent interface {
	exportIPC() (IPCEventHandle, error)
}
