//go:build cgo

package nccl

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/devhook"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// BenchmarkGPUEventLoop takes bench's event-timed loop apart (issue 23.2):
// the same one-rank float32 AllReduce, K iterations each between two CUDA
// events, timed as `gpucomm bench` and its C loop time them, with each
// piece swapped in turn: the events (recorded through internal/cuda or
// through devmem), the call (NCCL from Go on the communicator's handle or
// on a communicator of the test's own, the engine, the Comm), the checked
// iterations bench puts first and last (a memset before, a copy to the
// host after), and the C loop itself. It reports the median event time of
// an iteration (ev-µs) and the host's time to issue one (host-µs). Run it
// as one rank:
// mpirun -np 1 comm_nccl.test -test.run XXX -test.bench GPUEventLoop -test.benchtime 20x
func BenchmarkGPUEventLoop(b *testing.B) {
	c, e := gpuComm(b)
	cc := comm.Communicator(c)
	const most = 16 << 20
	send := gpuAlloc(b, c, most)
	recv := gpuAlloc(b, c, most)
	s := gpuStream(b, c)
	h := cuda.Stream(devhook.StreamHandle(s))
	const maxK = 500
	devEv := gpuEvents(b, c, 2*maxK)
	rawEv := rawEvents(b, e, 2*maxK)
	own := ownComm(b, e)
	cl := cLoop(b, c)

	type events struct {
		record  func(i int) error
		elapsed func(i int) (time.Duration, error)
	}
	raw := events{
		record: func(i int) error { return cuda.EventRecordIn(e.ctx, rawEv[i], h) },
		elapsed: func(i int) (time.Duration, error) {
			return cuda.EventElapsedTime(rawEv[2*i], rawEv[2*i+1])
		},
	}
	viaDevmem := events{
		record:  func(i int) error { return devEv[i].Record(s) },
		elapsed: func(i int) (time.Duration, error) { return devmem.Elapsed(devEv[2*i], devEv[2*i+1]) },
	}
	sp, rp := cuda.DevicePtr(send.Addr()), cuda.DevicePtr(recv.Addr())
	type call func(n int) error
	rawCall := func(h2 nccl.Comm) call {
		return func(n int) error { return nccl.AllReduce(e.ctx, sp, rp, n, nccl.Float32, nccl.Sum, h2, h) }
	}
	engineCall := func(n int) error {
		return e.allReduce(send, recv, n, comm.Float32, comm.Sum, s)
	}
	commCall := func(n int) error {
		return cc.AllReduce(send, recv, n, comm.Float32, comm.Sum, s)
	}
	cases := []struct {
		name    string
		ev      events
		call    call
		checked bool // bench's memset before and copy after the first and last iterations
		locked  bool // the loop on a locked OS thread
	}{
		{"raw-events/raw-nccl", raw, rawCall(e.h), false, false},
		{"raw-events/raw-nccl-own-comm", raw, rawCall(own), false, false},
		{"devmem-events/raw-nccl", viaDevmem, rawCall(e.h), false, false},
		{"raw-events/engine", raw, engineCall, false, false},
		{"raw-events/comm", raw, commCall, false, false},
		{"devmem-events/comm", viaDevmem, commCall, false, false},
		{"devmem-events/comm-locked", viaDevmem, commCall, false, true},
		{"devmem-events/comm-checked", viaDevmem, commCall, true, false},
		{"raw-events/raw-nccl-locked", raw, rawCall(e.h), false, true},
	}
	out := make([]byte, most)
	for _, size := range []int{8, 2 << 20, 16 << 20} {
		n := size / 4
		for _, k := range []int{20, maxK} {
			for _, tc := range cases {
				for _, withC := range []bool{false, true} {
					name := fmt.Sprintf("%dB/K=%d/%s", size, k, tc.name)
					if withC {
						// Each round followed by a round of the C loop, as bench
						// alternates them.
						name += "/then-c-loop"
					}
					b.Run(name, func(b *testing.B) {
						if tc.locked {
							runtime.LockOSThread()
							defer runtime.UnlockOSThread()
						}
						var samples, cs []float64
						var host time.Duration
						for b.Loop() {
							for range 5 {
								if err := tc.call(n); err != nil {
									b.Fatal(err)
								}
							}
							if err := s.Synchronize(); err != nil {
								b.Fatal(err)
							}
							t0 := time.Now()
							for i := range k {
								checked := tc.checked && (i == 0 || i == k-1)
								if checked {
									if err := devmem.Memset(recv, 0xff, s); err != nil {
										b.Fatal(err)
									}
								}
								if err := tc.ev.record(2 * i); err != nil {
									b.Fatal(err)
								}
								if err := tc.call(n); err != nil {
									b.Fatal(err)
								}
								if err := tc.ev.record(2*i + 1); err != nil {
									b.Fatal(err)
								}
								if checked {
									part, err := recv.Slice(0, size)
									if err == nil {
										err = devmem.CopyToHost(out[:size], part, s)
									}
									if err != nil {
										b.Fatal(err)
									}
								}
							}
							host += time.Since(t0)
							// The handle itself: devmem's Synchronize skips a
							// stream it issued nothing to since it was last idle.
							if err := e.do(func() error { return cuda.StreamSynchronize(h) }); err != nil {
								b.Fatal(err)
							}
							for i := range k {
								d, err := tc.ev.elapsed(i)
								if err != nil {
									b.Fatal(err)
								}
								samples = append(samples, d.Seconds()*1e6)
							}
							if withC {
								cs = append(cs, cRound(b, cl, send, recv, n, k)...)
							}
						}
						report(b, samples, host, k)
						if withC {
							b.ReportMetric(median(cs), "c-ev-µs")
						}
					})
				}
			}
			b.Run(fmt.Sprintf("%dB/K=%d/c-loop", size, k), func(b *testing.B) {
				var samples []float64
				t0 := time.Now()
				for b.Loop() {
					samples = append(samples, cRound(b, cl, send, recv, n, k)...)
				}
				// The whole call, warm-up and synchronizes included: an upper bound.
				report(b, samples, time.Since(t0), k)
			})
		}
	}
}

// report gives the median, p10 and p90 of the iterations' event times in
// µs and, when host is not zero, the host's time to issue one iteration.
func report(b *testing.B, samples []float64, host time.Duration, k int) {
	slices.Sort(samples)
	b.ReportMetric(samples[len(samples)/2], "ev-µs")
	b.ReportMetric(samples[len(samples)/10], "ev-p10-µs")
	b.ReportMetric(samples[len(samples)*9/10], "ev-p90-µs")
	if host > 0 {
		b.ReportMetric(host.Seconds()*1e6/float64(b.N*k), "host-µs")
	}
}

// BenchmarkGPUCommHandles times the same event-timed loop of raw NCCL
// calls from Go (raw events, one stream) on different ncclComm_t handles of
// one process, interleaved three times: the Comm's own, a second Comm's,
// that second Comm's after its watchdog stopped, and communicators the test
// makes itself with ncclCommInitRank (issue 23.2: a handle of the test's
// own ran the loop faster than the Comm's on two machines). Run it as one
// rank:
// mpirun -np 1 comm_nccl.test -test.run XXX -test.bench GPUCommHandles -test.benchtime 20x
func BenchmarkGPUCommHandles(b *testing.B) {
	c1, e1 := gpuComm(b)
	buf := gpuAlloc(b, c1, 2<<20)
	out := gpuAlloc(b, c1, 2<<20)
	s := gpuStream(b, c1)
	h := cuda.Stream(devhook.StreamHandle(s))
	const k = 20
	ev := rawEvents(b, e1, 2*k)
	own1 := ownComm(b, e1)
	c2, e2 := gpuComm(b)
	own2 := ownComm(b, e2)
	sp, rp := cuda.DevicePtr(buf.Addr()), cuda.DevicePtr(out.Addr())
	sync := func() {
		if err := e1.do(func() error { return cuda.StreamSynchronize(h) }); err != nil {
			b.Fatal(err)
		}
	}
	for rep := range 3 {
		handles := []struct {
			name string
			h    nccl.Comm
		}{{"comm-first", e1.h}, {"own-made-second", own1}, {"comm-third", e2.h}, {"own-made-fourth", own2}}
		if rep == 2 {
			c2.dog.stop() // the third round: the second Comm without its watchdog
			handles[2].name = "comm-third-watchdog-stopped"
		}
		for _, size := range []int{8, 2 << 20} {
			n := size / 4
			for _, hd := range handles {
				b.Run(fmt.Sprintf("%dB/rep%d/%s", size, rep, hd.name), func(b *testing.B) {
					var samples []float64
					for b.Loop() {
						for range 5 {
							if err := nccl.AllReduce(e1.ctx, sp, rp, n, nccl.Float32, nccl.Sum, hd.h, h); err != nil {
								b.Fatal(err)
							}
						}
						sync()
						for i := range k {
							if err := cuda.EventRecordIn(e1.ctx, ev[2*i], h); err != nil {
								b.Fatal(err)
							}
							if err := nccl.AllReduce(e1.ctx, sp, rp, n, nccl.Float32, nccl.Sum, hd.h, h); err != nil {
								b.Fatal(err)
							}
							if err := cuda.EventRecordIn(e1.ctx, ev[2*i+1], h); err != nil {
								b.Fatal(err)
							}
						}
						sync()
						for i := range k {
							d, err := cuda.EventElapsedTime(ev[2*i], ev[2*i+1])
							if err != nil {
								b.Fatal(err)
							}
							samples = append(samples, d.Seconds()*1e6)
						}
					}
					report(b, samples, 0, k)
				})
			}
		}
	}
}
