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
// # NCCL's faulty average
//
// NCCL 2.28.3 gets reductions with Avg wrong on an H200 (AllReduce, Reduce
// and ReduceScatter alike, one rank): out of place, the elements past a
// large power-of-two-aligned prefix come back as garbage: float64 from 65537
// elements (1000003: the last 3), float32, float16 and bfloat16 from 262147;
// not at every count (1000003 float32 was right). Integers, the other
// reductions and every call in place were right; nccl-tests'
// all_reduce_perf -d double -o avg shows it too. So that every release this
// package accepts gives the right average, the table in avgfault.go says,
// per release and type, how an Avg is taken instead, both steps queued on
// the call's stream so that stream order holds as for any operation:
//   - float64 and float32, in place or not: NCCL's Sum on the same buffers,
//     then x *= 1/nranks on the device (kernels.Scale, compiled by NVRTC at
//     first use; without NVRTC the first such call returns an error). On one
//     rank, or a power of two, exactly NCCL's Avg; elsewhere within the same
//     rounding error (NCCL multiplies each input by 1/nranks, then sums).
//   - float16 and bfloat16 out of place: send copied to recv on the device,
//     then NCCL's own Avg in place on recv. A ReduceScatter on several ranks
//     cannot be made in place that way and runs as it is: several ranks
//     could not be measured (NCCL refuses two ranks on one GPU).
//
// Every release up to 2.28.x is listed (no release with a fix is known;
// older ones were not tried and are kept safe); later releases use NCCL's
// own Avg. The version is ncclGetVersion's, read once when NCCL is loaded;
// an unknown one counts as affected. TestRankGPUReductionsAtPrimeCounts
// measures a release's own results against the table.
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
// bounded. A failure is seen up to a poll interval late; a host call stuck
// in NCCL up to two (the watchdog times it from the first poll that finds
// it there, so that marking a call reads no clock). Then the
// communicator is aborted (ncclCommAbort), the calls waiting on it return an
// error wrapping ErrTimeout (or NCCL's error): a nil-stream operation, or
// Comm.Wait, which is stream.Synchronize that gives up when the communicator
// fails. Every later call returns that error too; Close is all that is left.
//
// This package must not call NCCL before the arguments are checked, make
// two NCCL calls on one communicator at once, or call NCCL on a handle that
// was aborted; it holds no C types (internal/nccl does).
package nccl
