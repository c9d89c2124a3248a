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
// devmem knows nothing of communicators and must not import comm.
package devmem
