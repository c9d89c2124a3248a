// Package devmem is gpucomm's view of a device and its memory: devices,
// device buffers and typed slices over them, pinned host memory, streams,
// events, and the IPC handles that let the processes of one node share a
// buffer.
//
// Two drivers sit behind the same API. The cuda driver drives a real NVIDIA
// GPU through the driver API, loaded at run time. The host driver simulates a
// device whose memory is host memory, with streams that run their work in
// order on a goroutine each, so that everything above devmem (the
// communicators, the solver, node-shared buffers) runs and is tested on
// machines with no GPU.
//
// Stream order is the contract: work given a stream starts after all earlier
// work on that stream. A nil *Stream means "now": the call completes before
// it returns and is not ordered with work queued on other streams.
//
// # Sharing memory between the processes of a node
//
// Buffer.Export gives an IPCHandle that another process of the node (of the
// same user) opens with Device.OpenIPC; NewNodeShared builds one buffer
// for a node's ranks on it. GPU memory is shared one of two ways:
//
//   - VMM memory, from AllocShared (and so NodeShared) where the device
//     supports the driver's virtual memory management with POSIX file
//     descriptors (the H200 does): the exporter's service passes the
//     allocation's descriptor to the opener over a Unix socket, and the
//     opener maps it itself. It never meets a CUDA-aware
//     MPI's own CUDA IPC mappings (with legacy handles, NodeShared failed
//     with CUDA_ERROR_ALREADY_MAPPED under one), and the physical memory
//     lives while any process holds it: if the exporter frees while another
//     process has it open, that process keeps reading and writing it until
//     it closes its view; only new opens are refused.
//   - legacy CUDA IPC handles (cuIpcGetMemHandle), for Alloc memory and
//     where VMM is missing. If the exporter frees while another process has
//     the memory open, CUDA's rule applies: the opener must not touch it
//     any more (its contents are undefined); close the view.
//
// GPUCOMM_IPC chooses what AllocShared allocates on a GPU: auto (VMM where
// supported, else legacy; the default), vmm (VMM or ErrUnsupported), or
// legacy. Host-device memory and AllocPinnedShared memory are memfds, shared
// through /proc/PID/fd; they live until the last process unmaps them.
//
// Each process that exports GPU memory serves an abstract Unix socket
// (named by its pid and a random token carried in its handles) on a
// goroutine, answering only processes of its own user. Before it maps a GPU
// handle of another process, OpenIPC asks that service whether the memory
// is still exported (legacy; on every open, cached or not) or for its
// descriptor (VMM; on the first open in a process): a handle of memory its
// exporter has freed, or of an exporter that has exited, is refused with
// ErrBadHandle rather than opened. Buffer.Overlaps (and so every argument
// check) judges opened views by the memory they open: a view of a buffer
// overlaps that buffer.
//
// A process maps a legacy CUDA IPC allocation once: devmem maps it on the
// first OpenIPC and counts the views, however often it is opened. CUDA
// refuses to map new memory that the exporter allocated in the place of
// freed memory this process still maps (CUDA_ERROR_ALREADY_MAPPED), and
// any allocation that a CUDA-aware MPI already maps in this process outside
// gpucomm; OpenIPC then fails with ErrAlreadyMapped (and ErrBadHandle). The
// host device refuses the first kind too, the place being the exporter's
// descriptor number, so that code keeping views of freed memory open meets
// the GPU's rule on machines without one. Code that keeps idle views (a
// cache of opened handles, as internal/ipccache) registers with
// internal/devhook.OnStaleViews a function that closes the idle views of one exporter's
// memory on a device: an OpenIPC refused with ErrAlreadyMapped calls every
// such function and, when one closed some, opens once more.
//
// Work is ordered between the processes of a node on the GPU itself with
// interprocess events: Device.NewIPCEvent makes one, Event.ExportIPC gives
// its handle (CUDA's), and another process opens it with
// Device.OpenIPCEvent and makes a stream wait for it with Stream.WaitEvent.
// A host device has none.
//
// # What backends use besides
//
// gpucomm's own backends need more of a stream and a device than a user
// does: deferred and polled host waits and tasks on a stream's queue, the
// raw CUstream, CUevent and CUcontext for libraries that queue GPU work
// themselves (NCCL), and whether a buffer is VMM memory. They reach them through
// internal/devhook, which devmem fills at init; they are not part of this
// API.
//
// devmem knows nothing of communicators and must not import comm.
package devmem
