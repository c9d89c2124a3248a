package nccl

import (
	"errors"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// nullOps is an engine whose collectives queue nothing: what remains is the
// backend's own work on the host for each call.
type nullOps struct{ engine }

func (nullOps) allReduce(devmem.Buffer, devmem.Buffer, int, comm.DType, comm.Op, *devmem.Stream) error {
	return nil
}

func (nullOps) broadcast(devmem.Buffer, devmem.Buffer, int, comm.DType, int, *devmem.Stream) error {
	return nil
}

func (nullOps) allGather(devmem.Buffer, devmem.Buffer, int, comm.DType, *devmem.Stream) error {
	return nil
}

// The host time a call spends in this package before NCCL (checks, locks,
// the watchdog's mark), against which NCCL's own enqueue time is small: a
// one-rank 16 MiB AllReduce on an H200 is about 8 µs of GPU time, so
// microseconds here show in docs/PERFORMANCE.md's NCCL table. "plain" is a
// stream-ordered AllReduce with the default options; "nostream" the same on
// no stream (the null engine queues nothing, so the communicator's own
// stream is found done at once: what remains is the wait's host work);
// "timeout" with GPUCOMM_TIMEOUT set (two events a call, and the watchdog
// tracking a stream-ordered call); "debug" with GPUCOMM_DEBUG set (the
// signature compared across the ranks); "trace" and "trace-nostream" with
// the flight recorder on (GPUCOMM_TRACE_DIR); "broadcast" and "allgather"
// the other collectives of the same path.
func BenchmarkAllReduceHostOverhead(b *testing.B) {
	for _, o := range []struct {
		name   string
		opts   comm.Options
		stream bool
		op     string
		trace  bool
	}{
		{"plain", comm.Options{}, true, "allreduce", false},
		{"nostream", comm.Options{}, false, "allreduce", false},
		{"timeout", comm.Options{Timeout: time.Minute}, true, "allreduce", false},
		{"timeout-nostream", comm.Options{Timeout: time.Minute}, false, "allreduce", false},
		{"debug", comm.Options{Debug: true}, true, "allreduce", false},
		{"trace", comm.Options{}, true, "allreduce", true},
		{"trace-nostream", comm.Options{}, false, "allreduce", true},
		{"broadcast", comm.Options{}, true, "broadcast", false},
		{"allgather", comm.Options{}, true, "allgather", false},
	} {
		b.Run(o.name, func(b *testing.B) {
			if o.trace {
				b.Setenv("GPUCOMM_TRACE_DIR", b.TempDir()) // the flight recorder on
			}
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
			on := s
			if !o.stream {
				on = nil
			}
			call := func() error { return c.AllReduce(buf, buf, 16, comm.Float32, comm.Sum, on) }
			switch o.op {
			case "broadcast":
				call = func() error { return c.Broadcast(buf, buf, 16, comm.Float32, 0, on) }
			case "allgather":
				call = func() error { return c.AllGather(buf, buf, 16, comm.Float32, on) }
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := call(); err != nil {
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
