// Package cudaaware is gpucomm's CUDA-aware MPI backend: device pointers go
// straight to an MPI built with CUDA support, with no staging, as a C
// program would pass them. Enable it with a blank import (or gpucomm/comm/all)
// and open it by name under mpirun:
//
//	c, err := comm.Open("cudaaware")
//
// Without -tags mpi or -tags mpich it still registers: Probe says how to
// rebuild and Open returns comm.ErrNotBuilt.
//
// # Is MPI CUDA-aware?
//
// Open decides on every rank alike. GPUCOMM_CUDA_AWARE=1 trusts MPI, 0
// refuses, probe runs the run-time check below. Otherwise: on the host
// device MPI moves host memory, which every MPI can; on a GPU MPI is asked
// (MPIX_Query_cuda_support, MPIX_GPU_query_support); when it cannot say, the
// ranks exchange small device buffers with their neighbours, bounded in
// time, and check the bytes. A non-CUDA-aware MPI may crash on a device
// pointer, so that check never runs when MPI says no. Refused, Open returns
// comm.ErrNotCUDAAware saying what to do instead: use -backend mpi
// (host-staged) or nccl, or an MPI built with CUDA support. Probe reports
// the verdict (the last Open's, or MPI's answer, or what Open will do) for
// gpucomm info.
//
// # What is not direct
//
// Collectives are MPI's blocking ones (CUDA-aware Open MPI does not take
// device memory in nonblocking reductions). A lone Send or Recv on no
// stream is MPI_Send or MPI_Recv of device memory, and allocates nothing;
// on a stream with nothing pending, a Send or GroupP2P is posted at once
// (Isend/Irecv) on the calling goroutine and a receive of at most 4 KiB is
// left whole to the stream's next Synchronize, which makes MPI_Recv itself
// (internal/devhook.HostWait), so that no goroutine starts for a stream-ordered
// ping-pong of small messages; otherwise they are Isend/Irecv queued on the
// stream. MPI cannot compute on the device, so:
//
//   - Avg: MPI sums into recv on the device, then the sum goes through
//     pinned memory to be divided on the host and back (chunked).
//   - float16 and bfloat16 reductions: internal/mpi's user ops run on host
//     memory, so those calls are staged through pinned memory exactly as in
//     comm/mpi: correct, not refused. So are 8-bit sums when MPI's saturate.
//   - A Broadcast root's send is copied to its recv on the device first;
//     ReduceScatter in place moves MPI's result to this rank's block.
//   - Reductions (AllReduce, Reduce, ReduceScatter) of at least
//     comm.Options.StageReduceBytes (the whole array; default 64 KiB with
//     Open MPI 4 on a GPU, off elsewhere; GPUCOMM_STAGE_REDUCE_BYTES) go
//     through the host-staged pipeline of comm/mpi: CUDA-aware Open MPI
//     4.1's reductions of device memory took 1.5-7 times as long as the
//     pipeline on an H200 from 16 KiB up (docs/PERFORMANCE.md). Moves
//     without arithmetic (Broadcast, AllGather, AllToAll, Gather, Scatter,
//     point-to-point) always go direct: there MPI is many times faster.
//
// A CUDA-aware MPI makes CUDA calls of its own (opening and closing peers'
// IPC handles, among others) on the thread that calls it, and they fail
// with CUDA_ERROR_INVALID_CONTEXT where no context is current, as on Go's
// threads: every MPI call therefore runs on a thread locked for it with the
// device's primary context current, as cudaSetDevice makes it in a C
// program (internal/mpicomm UseDeviceForMPI).
//
// Stream order, ticketed collective order, thread level, Debug, Timeout
// (with MPI_Abort at the Close of a broken communicator) and MPI's lifetime
// are as in comm/mpi; with a timeout, a blocking collective runs aside and
// is abandoned at the deadline.
//
// It stages nothing MPI does as well directly: the engine is
// internal/mpicomm, shared with comm/mpi.
package cudaaware
