// Package nccl is gpucomm's NCCL backend: collectives and point-to-point
// transfers run by NCCL on the caller's stream, one GPU per rank, with the
// ncclUniqueId carried from rank 0 to the others by MPI_Bcast. Importing it
// registers "nccl" (rank 30, preferred by "auto" when usable).
//
// Open needs MPI built in (-tags mpi or mpich; otherwise it returns
// ErrNotBuilt with the rebuild command), loads NCCL (ErrLibraryNotFound when
// it is missing) and opens the device for the rank's local rank, which must
// be a GPU (ErrUnsupported on the host device). Before NCCL is called, the
// ranks exchange their devices' UUIDs: two ranks on one GPU, which NCCL does
// not allow, is ErrDuplicateGPU on every rank, naming the ranks and the GPU.
// Any other failure on one rank during Open is an error on every rank.
//
// AllReduce, Reduce, Broadcast, AllGather and ReduceScatter are NCCL's own;
// Gather, Scatter, AllToAll, Send, Recv and GroupP2P are ncclSend and
// ncclRecv in one group, with a rank's own block copied on the stream.
// Barrier is a one-byte AllReduce. Split uses ncclCommSplit where NCCL has it
// (2.18 and later) and a new unique id within an MPI_Comm_split otherwise.
// With a nil stream an operation runs on a stream of the communicator's own
// and is waited for before the call returns.
//
// # The float64 average
//
// NCCL 2.28.3 gets AllReduce of float64 with Avg wrong: at 1000003
// elements on one H200 the last 3 came back as garbage, in place and out of
// place (nccl-tests' all_reduce_perf -d double -o avg shows it too). So that
// every NCCL release this package accepts gives the right average, a
// reduction with Avg (AllReduce, Reduce, ReduceScatter) of a type that the
// table in avgfault.go lists for the loaded release is run as NCCL's Sum on
// the same buffers, then a scaling by 1/nranks on the device
// (kernels.Scale, compiled by NVRTC at first use), both queued on the
// call's stream, so stream order holds as for any operation. The table is
// conservative until the fault's extent is measured: float64, every count,
// in place or not, on NCCL up to 2.28.x (no release with a fix is known);
// later releases, and every other type, use NCCL's own Avg. The version is
// ncclGetVersion's, read once when NCCL is loaded; an unknown one counts as
// affected. The result is the sum times 1/nranks: on one rank (or any
// power of two) exactly what NCCL's Avg gives, elsewhere within the same
// rounding error (NCCL's own multiplies each input by 1/nranks, then sums).
// Without NVRTC the workaround's first use returns an error.
//
// # Failures and the timeout
//
// A watchdog goroutine polls ncclCommGetAsyncError (every 100 ms, or an
// eighth of the timeout). With Options.Timeout (GPUCOMM_TIMEOUT) it also
// bounds, on each rank:
//
//   - each operation on the GPU, from the moment it may start on its stream
//     (work queued before it on that stream does not count) until it ends,
//     which is where a rank waits for a peer that skipped a collective;
//   - each NCCL call on the host made by an operation, Split or Close
//     (NCCL may block there connecting to a peer that never comes).
//
// Open's bootstrap, the MPI calls of Split, and stream.Synchronize are not
// bounded. A failure is seen up to a poll interval late. Then the
// communicator is aborted (ncclCommAbort), the calls waiting on it return an
// error wrapping ErrTimeout (or NCCL's error): a nil-stream operation, or
// Comm.Wait, which is stream.Synchronize that gives up when the communicator
// fails. Every later call returns that error too; Close is all that is left.
//
// This package must not call NCCL before the arguments are checked, make
// two NCCL calls on one communicator at once, or call NCCL on a handle that
// was aborted; it holds no C types (internal/nccl does).
package nccl
