// Package conformance is the one test body every gpucomm backend must pass.
//
// Run(t, newGroup) runs each case as a subtest with fresh communicators
// from newGroup, in the shape of nettest.TestConn and slogtest.Run; Check
// runs the same cases and returns a Report, for the gpucomm check command.
// The cases cover every operation × element type × reduction × in place,
// roots and peers other than 0, counts 0, 1, a prime and one of at least
// 4 MiB, subcommunicators from Split, several operations queued on one
// stream, and every bad input (each must return its sentinel and leave
// every buffer as it was).
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
