//go:build cgo

package devmem

import (
	"errors"
	"testing"
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
