//go:build cgo

package nccl

import (
	"context"
	"testing"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// BenchmarkGPUBenchRunRounds runs bench.Run as `gpucomm bench -backend nccl
// -op allreduce` does, in this process, beside single rounds of the same
// event-timed loop and of the C loop, and logs each size's medians and the
// 8-byte samples in order (issue 23.2: the CLI's 20-iteration rounds showed
// gpucomm 1.3x the C loop where 20 rounds of 20 showed parity). Run it as
// one rank:
// mpirun -np 1 comm_nccl.test -test.run XXX -test.bench GPUBenchRunRounds -test.benchtime 1x -test.v
func BenchmarkGPUBenchRunRounds(b *testing.B) {
	cc, _ := gpuComm(b)
	c := comm.Communicator(cc)
	const most = 2 << 20
	send := gpuAlloc(b, cc, most)
	recv := gpuAlloc(b, cc, most)
	s := gpuStream(b, cc)
	const k = 20
	ev := gpuEvents(b, cc, 2*k)
	cl := cLoop(b, cc)
	out := make([]byte, most)
	round := func(n int, barrier, checks bool) []float64 {
		for range 5 {
			if err := c.AllReduce(send, recv, n, comm.Float32, comm.Sum, s); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Synchronize(); err != nil {
			b.Fatal(err)
		}
		if barrier {
			if err := c.Barrier(nil); err != nil {
				b.Fatal(err)
			}
		}
		part, err := recv.Slice(0, 4*n)
		if err != nil {
			b.Fatal(err)
		}
		for i := range k {
			checked := checks && (i == 0 || i == k-1)
			if checked {
				if err := devmem.Memset(part, 0xff, s); err != nil {
					b.Fatal(err)
				}
			}
			if err := ev[2*i].Record(s); err != nil {
				b.Fatal(err)
			}
			if err := c.AllReduce(send, recv, n, comm.Float32, comm.Sum, s); err != nil {
				b.Fatal(err)
			}
			if err := ev[2*i+1].Record(s); err != nil {
				b.Fatal(err)
			}
			if checked {
				if err := devmem.CopyToHost(out[:4*n], part, s); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := s.Synchronize(); err != nil {
			b.Fatal(err)
		}
		var t []float64
		for i := range k {
			d, err := devmem.Elapsed(ev[2*i], ev[2*i+1])
			if err != nil {
				b.Fatal(err)
			}
			t = append(t, d.Seconds()*1e6)
		}
		return t
	}
	cfg := bench.DefaultConfig()
	cfg.Ops = []bench.Operation{bench.AllReduce}
	cfg.MinBytes, cfg.MaxBytes, cfg.StepFactor = 8, most, 8
	for b.Loop() {
		for r := range 3 {
			for _, nb := range []bool{false, true} {
				cfg.NoBaseline = nb
				rep, err := bench.Run(context.Background(), c, cfg, nil)
				if err != nil {
					b.Fatal(err)
				}
				for _, res := range rep.Results {
					base := 0.0
					if res.Baseline != nil {
						base = res.Baseline.Time.Median
					}
					b.Logf("round %d bench.Run nobaseline=%v %8d B: %.2f µs, C loop %.2f", r, nb, res.Size, res.Time.Median, base)
				}
			}
			for _, size := range []int{8, 4096, 262144, most} {
				for _, v := range []struct {
					name             string
					barrier, checked bool
				}{{"plain", false, false}, {"barrier", true, false}, {"barrier+checks", true, true}} {
					// Both orders: a gap that follows the order (whichever
					// loop runs second faster) is the machine's, not the
					// call's.
					for _, cFirst := range []bool{false, true} {
						var t, ct []float64
						if cFirst {
							ct = cRound(b, cl, send, recv, size/4, k)
							t = round(size/4, v.barrier, v.checked)
						} else {
							t = round(size/4, v.barrier, v.checked)
							ct = cRound(b, cl, send, recv, size/4, k)
						}
						b.Logf("round %d single %-15s cfirst=%v %8d B: %.2f µs, C loop %.2f", r, v.name, cFirst, size, median(t), median(ct))
						if size == 8 {
							b.Logf("  gpucomm %.2f", t)
							b.Logf("  C loop  %.2f", ct)
						}
					}
				}
			}
		}
	}
}
