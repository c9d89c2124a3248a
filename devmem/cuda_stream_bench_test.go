//go:build cgo

package devmem

import (
	"errors"
	"testing"
	"time"
)

// BenchmarkCUDAStreamHostCost is the host time of the stream calls every
// stream-ordered operation makes, each call returning before the GPU is
// done: Enqueue of a function that calls nothing (what a backend adds around
// its library call, as NCCL's enqueue does), an event Record (a timed
// benchmark records two an iteration), and a HostFunc with the Synchronize
// that follows it (a stream-ordered MPI call waited for). The stream is
// synchronized every 256 calls, so its queue stays short.
func BenchmarkCUDAStreamHostCost(b *testing.B) {
	d := needCUDA(b)
	s := mustStream(b, d)
	ev := mustEvent(b, d)
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"enqueue-nothing", func() error { return s.Enqueue(func(uintptr) error { return nil }) }},
		{"event-record", func() error { return ev.Record(s) }},
		{"hostfunc-then-synchronize", func() error {
			return errors.Join(s.HostFunc(func() error { return nil }), s.Synchronize())
		}},
		// Host work long enough that the stream's goroutine has started it
		// when Synchronize comes (a stream-ordered MPI_Recv waiting for its
		// message): its time above 20 µs is the hand-over back to the caller.
		{"hostfunc-of-20us-then-synchronize", func() error {
			return errors.Join(s.HostFunc(func() error { busy(20 * time.Microsecond); return nil }), s.Synchronize())
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
