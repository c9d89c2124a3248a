package mpi

import (
	"fmt"
	"time"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// Polling bounds for WaitTimeout: start fast for requests about to finish,
// back off so a long wait costs little CPU, never sleep past the deadline.
const (
	pollFirst = 20 * time.Microsecond
	pollMax   = 2 * time.Millisecond
)

// WaitTimeout waits until every request in reqs has completed or d has
// passed. It polls Testall with short, growing sleeps, so the MPI lock (when
// MPI is not thread-multiple) is free between polls and other goroutines can
// drive their own requests. On timeout it returns an error wrapping
// errs.ErrTimeout and the requests stay pending: the caller decides whether to
// wait again, or Cancel and Wait the receives. d <= 0 waits forever (Waitall).
// nil entries are ignored.
func WaitTimeout(reqs []*Request, d time.Duration) error {
	if d <= 0 {
		return Waitall(reqs)
	}
	deadline := time.Now().Add(d)
	sleep := pollFirst
	for {
		done, err := Testall(reqs)
		if err != nil || done {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("mpi: %d of %d requests still pending after %v: %w",
				pending(reqs), len(reqs), d, errs.ErrTimeout)
		}
		time.Sleep(min(sleep, left))
		sleep = min(2*sleep, pollMax)
	}
}

func pending(reqs []*Request) int {
	n := 0
	for _, r := range reqs {
		if r != nil && !r.Done() {
			n++
		}
	}
	return n
}
