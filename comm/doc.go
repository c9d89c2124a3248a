// Package comm defines gpucomm's Communicator: one interface for collectives
// and point-to-point transfers of device memory among the ranks of a
// multi-GPU program, whatever moves the bytes underneath (an in-process
// group, host-staged MPI, CUDA-aware MPI or NCCL).
//
// It also holds element types (DType) and reductions (Op), errors, the
// backend registry (Open, Backends, Probe) and generic typed helpers over
// devmem.Slice. What only backends use (the description of a call and its
// argument checks, host reductions, error constructors, the Front
// dispatcher, what a backend registers) is in package comm/driver, whose
// types comm names for programs through aliases (comm.DType is
// driver.DType).
//
// Operations are stream-ordered: an operation given a stream starts after
// all earlier work on that stream, and later work on that stream sees its
// result; the call may return before the data has moved. With a nil stream
// the operation is complete when the call returns.
//
// The typed helpers (AllReduce, Broadcast, ... over devmem.Slice) take the
// element type from T and the count from one of the two slices: from send
// where every rank contributes all of its send (AllReduce, Reduce,
// AllGather, Gather, and AllToAll, whose send is cut into Size() equal
// blocks), from recv where every rank receives all of its recv (Broadcast,
// ReduceScatter, Scatter). The other slice must be at least as long as the
// operation needs, and may be longer; each helper's doc says which it reads.
//
// Every rank must call the same collectives in the same order with the same
// count, dtype, op and root, as MPI and NCCL require. A mismatch is not
// always detected: without GPUCOMM_DEBUG=1 (WithDebug) a count that differs
// between ranks can return nil on some ranks, with wrong data, and the next
// good collective's timeout then blames that later collective. GPUCOMM_DEBUG
// compares every collective's signature across the ranks first and fails
// with ErrMismatch naming the ranks; turn it on when a job misbehaves.
//
// Programs launched as several processes (mpirun, mpiexec, srun) must open
// an MPI-based backend (mpi, cudaaware, nccl), which needs a binary built
// with -tags mpi or -tags mpich. Open refuses the in-process backend (local)
// under such a launcher, and "auto" never falls back to it there, rather
// than let each process run as rank 0 of a one-rank job.
//
// comm never imports a backend; programs enable backends with a blank import
// (gpucomm/comm/all enables every one).
package comm
