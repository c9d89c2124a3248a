// Package cbaseline times collectives and point-to-point transfers called
// straight from C loops on the library underneath a gpucomm backend, so that
// bench can report gpucomm's overhead as a ratio against it.
//
// The MPI loops (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block,
// MPI_Bcast, MPI_Reduce, MPI_Alltoall, and osu_latency/osu_bw style
// send-receive loops) run on MPI_COMM_WORLD and are linked at build time:
// -tags mpi uses pkg-config ompi, -tags mpich uses pkg-config mpich. Without
// either tag (or without cgo) MPI returns ErrNotBuilt. MPI must already be
// initialised, by gpucomm's MPI backend or by the program; this package
// never calls MPI_Init.
//
// The NCCL loops load libnccl.so.2 and libcuda.so.1 with dlopen, so they
// build with cgo alone; they run on a communicator and a CUDA stream of their
// own, and time each iteration with CUDA events.
//
// The timing loops are in C so that the numbers measure only the library.
// This package must not import gpucomm's backends.
package cbaseline
