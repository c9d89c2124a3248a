package nccl

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// nullOps is an engine whose collectives queue nothing: what remains is the
// backend's own work on the host for each call.
type nullOps struct{ engine }

func (nullOps) allReduce(devmem.Buffer, devmem.Buffer, int, comm.DType, comm.Op, *devmem.Stream) error {
	return nil
}

// The host time a stream-ordered AllReduce spends in this package before
// NCCL (checks, locks, the watchdog's mark), against which NCCL's own
// enqueue time is small: a one-rank 16 MiB AllReduce on an H200 is about
// 8 µs of GPU time, so microseconds here show in docs/PERFORMANCE.md's NCCL
// table.
func BenchmarkAllReduceHostOverhead(b *testing.B) {
	for _, o := range []struct {
		name string
		opts comm.Options
	}{{"plain", comm.Options{}}, {"debug", comm.Options{Debug: true}}} {
		b.Run(o.name, func(b *testing.B) {
			net := newFakeNet()
			cs := mustOpenFake(b, net, 1, o.opts, nil)
			c := cs[0]
			// Under the locks the watchdog reads the engine with.
			c.mu.Lock()
			c.handle.Lock()
			c.eng = nullOps{c.eng}
			c.handle.Unlock()
			c.mu.Unlock()
			buf, err := c.Device().Alloc(64)
			if err != nil {
				b.Fatal(err)
			}
			s, err := c.Device().NewStream()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := c.AllReduce(buf, buf, 16, comm.Float32, comm.Sum, s); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := errors.Join(s.Destroy(), buf.Free()); err != nil {
				b.Fatal(err)
			}
			closeAll(b, cs)
		})
	}
}
