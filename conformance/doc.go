// Package conformance is the one test body every gpucomm backend must pass.
//
// Run(t, newGroup) runs each case as a subtest with fresh communicators
// from newGroup, in the shape of nettest.TestConn and slogtest.Run; Check
// runs the same cases and returns a Report, for the gpucomm check command.
// The cases cover every operation × element type × reduction × in place,
// roots and peers other than 0, counts 0, 1, a prime and one of at least
// 4 MiB, subcommunicators from Split, several operations queued on one
// stream, and every bad input (each must return its sentinel and leave
// every buffer as it was). The Prime cases run every collective at
// 1000003 elements (a prime above a million) at odd element offsets, AllReduce for
// every element type × reduction (short mode: a subset that still gives
// every type and every reduction; under the race detector a few calls).
// NodeShared has the backend move data between two node-shared buffers
// alive at once; SendThenClose receives, 500 ms late, messages whose sender
// closed right after sending; IPC/FreedHandle opens a handle of freed
// memory (ErrBadHandle) and IPC/ViewOverlap gives AllReduce a recv that is
// an IPC view of send's own memory (ErrInvalidArgument).
//
// In-process backends hand Run all their ranks at once; MPI backends run it
// under mpirun, one rank a process. Inputs are drawn from a fixed seed, the
// case, the call and the rank, so each process computes the expected output
// of the ranks it holds alone; after each case the processes agree on the
// verdict through an AllReduce of a failure flag. Expected values come from
// this package's own reference code, never from the backend's helpers.
//
// conformance must not import a backend: its callers choose one.
package conformance
