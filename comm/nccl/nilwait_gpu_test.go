//go:build cgo

package nccl

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/bench/cbaseline"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/devhook"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// BenchmarkGPUNilStreamWait takes a one-rank AllReduce on no stream apart
// (issue 23.2: bench -nostream put gpucomm 1.06-1.19x C's loop at 16 and
// 128 MiB, where a wait's way alone, internal/cuda's GPUWaitLatency, costs
// nothing): the Comm's call on no stream; NCCL called from Go on the
// Comm's handle and its own stream, then cuStreamSynchronize or a loop of
// cuStreamQuery; the engine's call on that stream waited for by devmem's
// Query in the Comm's own backoff (pollUntil), in a plain loop, and by
// devmem's Synchronize; and C's wall-clock loop (bench's -nostream baseline), in turn, each round
// after a wait for the device. Reports each case's median µs from the call
// to the end of the wait. Run it as one rank:
// mpirun -np 1 comm_nccl.test -test.run XXX -test.bench GPUNilStreamWait -test.benchtime 100x
func BenchmarkGPUNilStreamWait(b *testing.B) {
	c, e := gpuComm(b)
	cc := comm.Communicator(c)
	const most = 128 << 20
	send := gpuAlloc(b, c, most)
	recv := gpuAlloc(b, c, most)
	cl := cLoop(b, c)
	own := cuda.Stream(devhook.StreamHandle(c.own))
	sp, rp := cuda.DevicePtr(send.Addr()), cuda.DevicePtr(recv.Addr())
	raw := func(n int) error { return nccl.AllReduce(e.ctx, sp, rp, n, nccl.Float32, nccl.Sum, e.h, own) }
	cases := []struct {
		name string
		run  func(n int) error
	}{
		{"comm-nil", func(n int) error { return cc.AllReduce(send, recv, n, comm.Float32, comm.Sum, nil) }},
		{"raw-then-sync", func(n int) error {
			if err := raw(n); err != nil {
				return err
			}
			return cuda.StreamSynchronizeIn(e.ctx, own)
		}},
		// Through the engine, so that devmem knows of the work on its
		// stream (its Query skips cuStreamQuery for a stream it issued
		// nothing to since it was last found idle).
		{"engine-then-pollUntil", func(n int) error {
			if err := e.allReduce(send, recv, n, comm.Float32, comm.Sum, c.own); err != nil {
				return err
			}
			return c.pollUntil(c.own.Query)
		}},
		{"engine-then-query-loop", func(n int) error {
			if err := e.allReduce(send, recv, n, comm.Float32, comm.Sum, c.own); err != nil {
				return err
			}
			for {
				done, err := c.own.Query()
				if done || err != nil {
					return err
				}
				runtime.Gosched()
			}
		}},
		{"engine-then-synchronize", func(n int) error {
			if err := e.allReduce(send, recv, n, comm.Float32, comm.Sum, c.own); err != nil {
				return err
			}
			return c.own.Synchronize()
		}},
		{"raw-then-query-loop", func(n int) error {
			if err := raw(n); err != nil {
				return err
			}
			for {
				done, err := cuda.StreamQueryIn(e.ctx, own)
				if done || err != nil {
					return err
				}
				runtime.Gosched()
			}
		}},
	}
	for _, size := range []int{8, 16 << 20, most} {
		n := size / 4
		for _, tc := range cases {
			b.Run(fmt.Sprintf("%dB/%s", size, tc.name), func(b *testing.B) {
				var mine, cs []float64
				for b.Loop() {
					if err := c.own.Synchronize(); err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					if err := tc.run(n); err != nil {
						b.Fatal(err)
					}
					mine = append(mine, float64(time.Since(t0).Nanoseconds())/1e3)
					times := make([]float64, 1)
					a := cbaseline.Args{Send: send.Addr(), Recv: recv.Addr(), Count: n, DType: comm.Float32, Op: comm.Sum, Warmup: 1, SyncEach: true}
					if err := cl.Run(cbaseline.AllReduce, a, times); err != nil {
						b.Fatal(err)
					}
					cs = append(cs, times[0]*1e6)
				}
				b.ReportMetric(median(mine), "us")
				b.ReportMetric(median(cs), "c-wall-us")
			})
		}
	}
}
