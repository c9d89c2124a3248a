package mpicomm

import (
	"runtime"
	"testing"
)

// A call's transfers poll MPI instead of each blocking a thread in
// MPI_Waitall only when the node's ranks would have more of them waiting
// than the node has CPUs, and never for a single transfer.
func TestCrowdedCountsTheNodesWaitersAgainstItsCPUs(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, tc := range []struct {
		local, n int
		want     bool
	}{
		{1, 1, false},
		{4, 1, false},                 // one transfer: MPI_Waitall, however many ranks
		{1, cpus, false},              // as many as the CPUs: not crowded
		{1, cpus + 1, true},           // one more than the CPUs
		{2, max(cpus/2+1, 2), true},   // two ranks of a node, each over half the CPUs
		{0, cpus + 1, true},           // a node size not known counts as one rank
		{cpus + 1, 2, true},           // more ranks than CPUs, two transfers each
		{2, max(cpus/2, 2), cpus < 4}, // exactly the CPUs between two ranks (or, on fewer than 4, over them)
	} {
		c := &Comm{localSize: tc.local}
		if got := c.crowded(tc.n); got != tc.want {
			t.Errorf("%d transfers on each of %d local ranks, %d CPUs: crowded = %v, want %v", tc.n, tc.local, cpus, got, tc.want)
		}
	}
}
