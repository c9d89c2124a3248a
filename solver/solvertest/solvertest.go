// Package solvertest runs the solver conformance check as Go subtests, in
// the shape of testing/slogtest: a backend's tests call Run with a function
// that makes the communicators the test process holds.
package solvertest

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/solver"
)

// Run runs every case of solver.Cases as a subtest on fresh communicators
// from newGroup (all ranks for an in-process backend, this process's rank
// under MPI) and closes them after each. Every held rank runs in its own
// goroutine. The field after the steps must equal solver.Reference bit for
// bit, and the residual agree within solver.ResidualTolerance.
func Run(t *testing.T, newGroup func() ([]comm.Communicator, error)) {
	t.Helper()
	first, err := newGroup()
	if err != nil {
		t.Fatalf("newGroup: %v", err)
	}
	if len(first) == 0 {
		t.Fatal("newGroup returned no communicators")
	}
	for _, c := range solver.Cases(first[0].Size()) {
		t.Run(c.Name, func(t *testing.T) {
			comms := first
			first = nil
			if comms == nil {
				if comms, err = newGroup(); err != nil {
					t.Fatalf("newGroup: %v", err)
				}
			}
			err := solver.Check(comms, c)
			for _, cm := range comms {
				err = errors.Join(err, cm.Close())
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, cm := range first { // no case ran (all filtered out by -run)
		cm.Close()
	}
}
