// Package cbaseline times collectives and point-to-point transfers called
// straight from C loops on the library underneath a gpucomm backend, so that
// bench can report gpucomm's overhead as a ratio against it.
//
// The MPI loops (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block,
// MPI_Bcast, MPI_Reduce, MPI_Alltoall, and osu_latency/osu_bw style
// send-receive loops) run on MPI_COMM_WORLD and are linked at build time:
// -tags mpi uses pkg-config ompi, -tags mpich uses pkg-config mpich. Without
// either tag (or without cgo) MPI returns ErrNotBuilt. They run only on the
// MPI gpucomm started (internal/mpi, brought up by the first MPI backend or
// by Init of gpucomm/comm/mpi: the same thread level, the same launcher
// checks), each loop called as internal/mpi makes its own calls (the thread
// setup, so a CUDA-aware MPI sees the GPU's context current, and the lock
// below MPI_THREAD_MULTIPLE); this package never calls MPI_Init.
//
// The NCCL loops call NCCL and the CUDA driver through the functions
// gpucomm's own loaders resolved (internal/nccl and internal/cuda, with
// GPUCOMM_NCCL_LIB and GPUCOMM_CUDA_LIB honoured), handed to C once, so that
// they time the very library the nccl backend calls; Libraries says which
// files those are. They build with cgo alone, run on a communicator and a
// CUDA stream of their own, and time each iteration with CUDA events, or,
// when gpucomm is timed by wall clock (Args.SyncEach: bench's -nostream and
// -wall), by the host's clock from the call to the end of a synchronize of
// the stream, as gpucomm's own wall-clock iterations are.
//
// The loops have no table of element types or reductions of their own: Go
// hands them the library's values from the mappings the backends use
// (internal/mpimap, whose internal/mpi numbers the MPI loop turns into
// handles with internal/mpi's gc_type and gc_op; internal/ncclmap), so a
// DType or Op is timed as the backend would call it, and one a mapping
// lacks is ErrUnsupported here too.
//
// The timing loops are in C so that the numbers measure only the library.
// This package must not import gpucomm's backends.
package cbaseline
