// Package localtest runs test code on every rank of a fresh local group,
// each rank on its own goroutine: the set-up of the tests of the packages
// and examples built on comm.
package localtest

import (
	"sync"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
)

// Run runs fn on every rank of a fresh local group of n, each on its own
// goroutine, and gives the group and each rank's error, by rank; it fails
// tb if the group cannot be made.
func Run(tb testing.TB, n int, fn func(c comm.Communicator) error) ([]comm.Communicator, []error) {
	tb.Helper()
	cs, err := local.NewGroup(n)
	if err != nil {
		tb.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = fn(c) })
	}
	wg.Wait()
	return cs, errs
}
