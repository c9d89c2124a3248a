package solver

import (
	"sync"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
)

// Helpers for this package's tests and, exported here, for package
// solver_test's too.

// RunRanks runs fn on every rank of a fresh local group of n, each in its
// goroutine, and gives the group and each rank's error.
func RunRanks(t *testing.T, n int, fn func(c comm.Communicator) error) ([]comm.Communicator, []error) {
	t.Helper()
	cs, err := local.NewGroup(n)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn(c) }()
	}
	wg.Wait()
	return cs, errs
}

// NewOnRanks runs New with cfg(rank) on every rank of a fresh local group
// of n, closing what opened, and gives the group and each rank's error of
// New.
func NewOnRanks(t *testing.T, n int, cfg func(rank int) Config) ([]comm.Communicator, []error) {
	t.Helper()
	return RunRanks(t, n, func(c comm.Communicator) error {
		s, err := New(c, cfg(c.Rank()))
		if err == nil {
			s.Close()
		}
		return err
	})
}
