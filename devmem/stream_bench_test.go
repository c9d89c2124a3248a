package devmem

import (
	"errors"
	"testing"
	"time"
)

// BenchmarkHostStreamHostCost is the host time of the stream calls a
// stream-ordered operation makes on a host device (the local and mpi
// backends' path without a GPU): a HostFunc and the Synchronize that waits
// for it, the same with 1 µs of host work, the wait for work under way
// elsewhere that the mpi backend queues (HostWait), and the Query a
// stream-ordered call may make first. The stream is synchronized every 256
// calls, so its queue stays short.
func BenchmarkHostStreamHostCost(b *testing.B) {
	s := mustStream(b, NewHostDevice())
	work := func() error { busy(time.Microsecond); return nil }
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"hostfunc-then-synchronize", func() error {
			return errors.Join(s.HostFunc(func() error { return nil }), s.Synchronize())
		}},
		{"hostfunc-of-1us-then-synchronize", func() error {
			return errors.Join(s.HostFunc(work), s.Synchronize())
		}},
		{"hostwait-deferred-of-1us-then-synchronize", func() error {
			return errors.Join(s.hostWait(work, func() (bool, error) { return false, nil }, true), s.Synchronize())
		}},
		{"query-idle", func() error {
			_, err := s.Query()
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				must(b, c.op())
				if i++; i%256 == 0 {
					must(b, s.Synchronize())
				}
			}
			must(b, s.Synchronize())
		})
	}
}

// busy spins for d, as a thread blocked in MPI's progress loop does.
func busy(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}
