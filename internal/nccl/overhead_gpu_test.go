package nccl_test

import (
	"os"
	"runtime"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// BenchmarkGPUAllReduceContext times a one-rank float32 ncclAllReduce on a
// stream between two events, as bench and its C loop do, from Go with each
// way of making the device's context current: held for the whole loop on a
// locked thread (the C loop's way), made current inside each call from a
// thread with no context (a Go thread's start), and inside each call on a
// thread where it is current already. The metric
// us/op is the mean of the event pairs' elapsed times, the figure bench
// prints; the differences between the cases are what the context switch
// costs the GPU's timeline when the host issues faster than it runs. On the
// H200 on 2026-12-04, when each call still put "no context" back (three
// driver calls a call), the second case took 1.63 µs an op at 8 B against
// 1.38-1.41 for the others; the calls now leave the context current where
// none was (internal/cuda's gc_leave), so only its first call sets it.
func BenchmarkGPUAllReduceContext(b *testing.B) {
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		b.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU and NCCL")
	}
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	ctx, err := cuda.PrimaryCtxRetain(0)
	must(err)
	defer cuda.PrimaryCtxRelease(0)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(cuda.CtxSetCurrent(ctx))
	defer cuda.CtxSetCurrent(0)
	id, err := nccl.GetUniqueID()
	must(err)
	c, err := nccl.CommInitRank(1, id, 0)
	must(err)
	defer nccl.CommDestroy(c)
	const max = 8 << 20
	buf, err := cuda.MemAlloc(max)
	must(err)
	defer cuda.MemFree(buf)
	s, err := cuda.StreamCreate(cuda.StreamNonBlocking)
	must(err)
	defer cuda.StreamDestroy(s)
	const iters = 2000
	evs := make([]cuda.Event, 2*iters)
	for i := range evs {
		evs[i], err = cuda.EventCreate(0)
		must(err)
	}
	defer func() {
		for _, e := range evs {
			cuda.EventDestroy(e)
		}
	}()
	for _, size := range []int{8, 512 << 10, 8 << 20} {
		for _, mode := range []string{"held", "in-call-from-none", "in-call-already-current"} {
			b.Run(mode+"/"+strconv.Itoa(size), func(b *testing.B) {
				runtime.LockOSThread() // each sub-benchmark runs on a goroutine of its own
				defer runtime.UnlockOSThread()
				n := size / 4
				var callCtx cuda.Context
				switch mode {
				case "held":
					must(cuda.CtxSetCurrent(ctx))
				case "in-call-from-none":
					must(cuda.CtxSetCurrent(0))
					callCtx = ctx
				case "in-call-already-current":
					must(cuda.CtxSetCurrent(ctx))
					callCtx = ctx
				}
				record := func(e cuda.Event) error {
					if callCtx == 0 {
						return cuda.EventRecord(e, s)
					}
					return cuda.EventRecordIn(callCtx, e, s)
				}
				var per []float64
				for b.Loop() {
					for range 20 { // warm-up
						must(nccl.AllReduce(callCtx, buf, buf, n, nccl.Float32, nccl.Sum, c, s))
					}
					for i := range iters {
						must(record(evs[2*i]))
						must(nccl.AllReduce(callCtx, buf, buf, n, nccl.Float32, nccl.Sum, c, s))
						must(record(evs[2*i+1]))
					}
					must(cuda.StreamSynchronize(s))
					for i := range iters {
						d, err := cuda.EventElapsedTime(evs[2*i], evs[2*i+1])
						must(err)
						per = append(per, float64(d)/float64(time.Microsecond))
					}
				}
				must(cuda.CtxSetCurrent(ctx))
				sort.Float64s(per)
				var sum float64
				for _, v := range per {
					sum += v
				}
				b.ReportMetric(sum/float64(len(per)), "us/op")
				b.ReportMetric(per[len(per)/2], "median-us/op")
			})
		}
	}
}
