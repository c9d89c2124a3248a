//go:build cgo

package nccl

import (
	"runtime"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/devhook"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// BenchmarkGPUAllReduceHostCost splits a one-rank stream-ordered 8-byte
// AllReduce's host time (issue 23.2: bench's figure is host-bound there) into
// what each layer adds: NCCL called from Go on the communicator's own
// ncclComm_t and the stream's handle (raw), through the engine (engine: the
// type mapping and devhook.EnqueueIn's stream-ordered hand-off), through the
// Comm (comm: Front's checks, the lock and the watchdog's mark), an event
// record through devmem and through internal/cuda, and a whole wait for a
// nil-stream operation (comm-nil) against NCCL plus cuStreamSynchronize from
// Go. ns/op is host wall time a call; the queue is drained every 64 calls
// outside the timing (allocs/op includes the drain's, spread over 64 calls).
// Run it as one rank:
// mpirun -np 1 comm_nccl.test -test.run XXX -test.bench GPUAllReduceHostCost.
func BenchmarkGPUAllReduceHostCost(b *testing.B) {
	c, e := gpuComm(b)
	cc := comm.Communicator(c)
	buf := gpuAlloc(b, c, 64)
	s := gpuStream(b, c)
	ev := gpuEvents(b, c, 1)[0]
	cev := rawEvents(b, e, 1)[0]
	h := cuda.Stream(devhook.StreamHandle(s))
	p := cuda.DevicePtr(buf.Addr())
	cases := []struct {
		name string
		call func() error
	}{
		{"raw", func() error { return nccl.AllReduce(e.ctx, p, p, 2, nccl.Float32, nccl.Sum, e.h, h) }},
		{"engine", func() error { return e.allReduce(buf, buf, 2, comm.Float32, comm.Sum, s) }},
		{"comm", func() error { return cc.AllReduce(buf, buf, 2, comm.Float32, comm.Sum, s) }},
		{"raw-record", func() error { return cuda.EventRecordIn(e.ctx, cev, h) }},
		{"devmem-record", func() error { return ev.Record(s) }},
		{"raw-and-sync", func() error {
			if err := nccl.AllReduce(e.ctx, p, p, 2, nccl.Float32, nccl.Sum, e.h, h); err != nil {
				return err
			}
			return cuda.WithContext(e.ctx, func() error { return cuda.StreamSynchronize(h) })
		}},
		{"comm-nil", func() error { return cc.AllReduce(buf, buf, 2, comm.Float32, comm.Sum, nil) }},
	}
	for _, k := range cases {
		b.Run(k.name, func(b *testing.B) {
			b.ReportAllocs()
			var spent time.Duration
			i := 0
			for b.Loop() {
				t0 := time.Now()
				if err := k.call(); err != nil {
					b.Fatal(err)
				}
				spent += time.Since(t0)
				if i++; i%64 == 0 {
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), "host-ns/call")
			runtime.KeepAlive(buf)
		})
	}
}
