// Package mpi is gpucomm's binding to MPI, linked at build time: tag mpi
// builds it against Open MPI (pkg-config ompi), tag mpich against MPICH and
// the libraries that share its ABI (Intel MPI, MVAPICH, Cray MPICH). Without
// either tag, or without cgo, it still compiles and every call returns an
// error wrapping errs.ErrNotBuilt that says how to rebuild.
//
// It is for the MPI-based backends (comm/mpi, comm/cudaaware) and for
// bootstrapping NCCL: lifecycle with reference counting (Init/Finalize,
// Acquire/Release, MPI_Finalize exactly once), communicators (World, Dup,
// Split, SplitShared), the collectives, point-to-point and nonblocking calls
// on buffers given as addresses, small Go-value helpers for bookkeeping,
// bounded waits (WaitTimeout), a CUDA-awareness query, and float16/bfloat16
// reductions as user-defined MPI ops.
//
// Buffers are addresses with counts in elements; passing the same address
// for send and receive asks for MPI_IN_PLACE, with the conventions listed in
// coll_cgo.go: for Allgather and Gather they are NCCL's too; in-place
// ReduceScatterBlock follows MPI (result in the first block), not NCCL, so a
// backend offering NCCL's form must move the block itself. A bad argument
// is reported on the rank that made it, before MPI is called: the other
// ranks of that collective are then left waiting, so such an error ends the
// communicator's useful life, as any collective mismatch does.
//
// Init checks that the process can join its launcher's job
// (internal/launcher): under the other MPI family's launcher it fails before
// MPI_Init, which would hang or run alone; when MPI_Init makes a world of
// another size than the launcher announced, it finalizes the MPI it started
// and fails, and so does every later Init or Acquire. SetThreadSetup runs a
// backend's preparation (a GPU's context) around every MPI call.
//
// Library bugs it works around, found by its tests on Debian's MPICH 4.0.2:
// built-in MPI_MIN/MPI_MAX that compare unsigned integers as signed (probed
// at Init, replaced by C ops where wrong), and MPI_Reduce with MPI_IN_PLACE
// crashing at a root other than 0 (MPICH before 4.2: Reduce then runs on a
// cached copy of the communicator whose rank 0 is the root). And one it
// bounds on request: MPICH 4.0.2 + UCX 1.13 leaving a rank in MPI_Finalize
// (FinalizeBoundEnv: a barrier, then MPI_Finalize given a bound, after which
// the rank goes on to exit with its own status; for MPICH only: Open MPI
// ignores it, as its mpirun fails such a job).
//
// A point-to-point request that MPI completes with an error names its peer
// (*PeerError around MPI's *Error), so that a dead or unreachable rank is
// named by the ranks that waited on it.
//
// What it must not do:
//   - expose a C type: MPI handles stay unexported, and MPI_COMM_WORLD, the
//     datatypes and the ops come from C, so one Go source serves Open MPI
//     (pointer handles) and MPICH (int handles);
//   - turn a uintptr into an unsafe.Pointer in Go: addresses cross to C as
//     uintptr_t and are cast there; Go memory reaches MPI only in blocking
//     calls;
//   - panic or let MPI abort on a bad argument: arguments are checked in Go
//     first, every communicator has MPI_ERRORS_RETURN, failures are errors
//     (*Error for MPI's own, sentinels from internal/errs for the rest);
//   - know about devices, streams or staging: ordering device work before MPI
//     touches a buffer is the backends' job;
//   - finalize an MPI that someone else initialised, or finalize twice.
package mpi
