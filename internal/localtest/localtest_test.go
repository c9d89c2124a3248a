package localtest

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
)

// Every rank runs once, at once (a collective completes only if all do),
// and its error lands at its rank.
func TestRunRunsEveryRankOnceAndKeepsErrorsByRank(t *testing.T) {
	var calls atomic.Int32
	cs, errs := Run(t, 3, func(c comm.Communicator) error {
		calls.Add(1)
		if err := c.Barrier(nil); err != nil {
			return err
		}
		if c.Rank() == 1 {
			return fmt.Errorf("rank %d", c.Rank())
		}
		return nil
	})
	if len(cs) != 3 || len(errs) != 3 || calls.Load() != 3 {
		t.Fatalf("%d communicators, %d errors, %d calls; want 3 each", len(cs), len(errs), calls.Load())
	}
	for r, c := range cs {
		if c.Rank() != r || c.Size() != 3 {
			t.Errorf("communicator %d is rank %d of %d", r, c.Rank(), c.Size())
		}
	}
	if errs[0] != nil || errs[2] != nil || errs[1] == nil || errs[1].Error() != "rank 1" {
		t.Errorf("errors %v, want only rank 1's", errors.Join(errs...))
	}
}
