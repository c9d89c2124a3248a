//go:build cgo

package nccl

import (
	"os"
	"slices"
	"testing"

	"github.com/gpucomm/gpucomm/bench/cbaseline"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// The GPU benchmarks' common setup (hostcost_gpu_test.go,
// eventloop_gpu_test.go, benchrun_gpu_test.go): each piece is undone when
// the benchmark ends.

// gpuComm opens a one-rank Comm on the GPU over the real NCCL engine, or
// skips the benchmark: GPU tests not asked for, NCCL unusable here, or an
// engine that is not NCCL's.
func gpuComm(b *testing.B) (*Comm, *ncclEngine) {
	b.Helper()
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		b.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU and NCCL, and run as one rank")
	}
	if v := Probe(); !v.Usable {
		b.Skip("NCCL cannot run here: " + v.Reason)
	}
	cc, err := comm.Open(Name, comm.WithDevice("cuda"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	c := cc.(*Comm)
	e, ok := c.eng.(*ncclEngine)
	if !ok {
		b.Skip("not the real NCCL engine")
	}
	return c, e
}

// gpuAlloc is a device buffer of n bytes on c's device.
func gpuAlloc(b *testing.B, c *Comm, n int) devmem.Buffer {
	b.Helper()
	buf, err := c.Device().Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { buf.Free() })
	return buf
}

// gpuStream is a new stream of c's device.
func gpuStream(b *testing.B, c *Comm) *devmem.Stream {
	b.Helper()
	s, err := c.Device().NewStream()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Destroy() })
	return s
}

// gpuEvents are n devmem events of c's device.
func gpuEvents(b *testing.B, c *Comm, n int) []*devmem.Event {
	b.Helper()
	evs := make([]*devmem.Event, n)
	for i := range evs {
		ev, err := c.Device().NewEvent()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ev.Destroy() })
		evs[i] = ev
	}
	return evs
}

// rawEvents are n CUDA events made in e's context through internal/cuda.
func rawEvents(b *testing.B, e *ncclEngine, n int) []cuda.Event {
	b.Helper()
	evs := make([]cuda.Event, n)
	err := e.do(func() error {
		for i := range evs {
			var err error
			if evs[i], err = cuda.EventCreate(0); err != nil {
				return err
			}
		}
		return nil
	})
	b.Cleanup(func() {
		e.do(func() error {
			for _, ev := range evs {
				if ev != 0 {
					cuda.EventDestroy(ev)
				}
			}
			return nil
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	return evs
}

// ownComm is a one-rank NCCL communicator the benchmark makes itself with
// ncclCommInitRank in e's context, beside the Comm's.
func ownComm(b *testing.B, e *ncclEngine) nccl.Comm {
	b.Helper()
	var own nccl.Comm
	err := e.do(func() error {
		id, err := nccl.GetUniqueID()
		if err != nil {
			return err
		}
		own, err = nccl.CommInitRank(1, id, 0)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.do(func() error { return nccl.CommDestroy(own) }) })
	return own
}

// cLoop is bench's C loop over NCCL on a one-rank communicator of its own
// on c's GPU.
func cLoop(b *testing.B, c *Comm) *cbaseline.NCCL {
	b.Helper()
	id, err := cbaseline.NCCLUniqueID()
	if err != nil {
		b.Fatal(err)
	}
	cl, err := cbaseline.NewNCCL(c.Device().Ordinal(), 1, 0, id)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	return cl
}

// cRound is one round of the C loop: k AllReduces of n float32 from send
// into recv after 5 warm-up ones, each iteration's event time in µs.
func cRound(b *testing.B, cl *cbaseline.NCCL, send, recv devmem.Buffer, n, k int) []float64 {
	b.Helper()
	times := make([]float64, k)
	a := cbaseline.Args{Send: send.Addr(), Recv: recv.Addr(), Count: n, DType: comm.Float32, Op: comm.Sum, Warmup: 5}
	if err := cl.Run(cbaseline.AllReduce, a, times); err != nil {
		b.Fatal(err)
	}
	for i := range times {
		times[i] *= 1e6
	}
	return times
}

// median is the middle of samples (a sorted copy's).
func median(samples []float64) float64 {
	u := slices.Clone(samples)
	slices.Sort(u)
	return u[len(u)/2]
}
