//go:build cgo

package mpicomm

import (
	"os"
	"runtime"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/devhook"
)

// gpuContext opens GPU 0 and returns its primary context, or skips unless
// GPUCOMM_GPU_TESTS=1 on a machine with a GPU.
func gpuContext(tb testing.TB) cuda.Context {
	tb.Helper()
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		tb.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU")
	}
	dev, err := devmem.Open("cuda:0", 0)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := cuda.Context(devhook.Context(dev))
	if ctx == 0 {
		tb.Fatalf("%v has no primary context", dev)
	}
	return ctx
}

// On an OS thread with no context current (as every Go thread starts), the
// MPI thread setup makes the GPU's primary context current for the call and
// leaves it there, so that MPI's own CUDA calls, now or deferred to a later
// call on that thread, find it.
func TestCUDAThreadMakesThePrimaryContextCurrent(t *testing.T) {
	ctx := gpuContext(t)
	ct := &cudaThread{ctx: ctx}
	type result struct {
		during, after cuda.Context
		err           error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var r result
		if r.err = cuda.CtxSetCurrent(0); r.err == nil {
			ct.Enter()
			r.during, r.err = cuda.CtxGetCurrent()
			ct.Leave()
		}
		if r.err == nil {
			r.after, r.err = cuda.CtxGetCurrent()
		}
		ch <- r
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.during != ctx || r.after != ctx {
		t.Errorf("context current during the call %#x, after it %#x; want the primary context %#x both times", r.during, r.after, ctx)
	}
}

// Once a thread has the context, Enter and Leave allocate nothing, so the
// calls on no stream of the cudaaware backend stay free of allocations.
func TestCUDAThreadAllocatesNothingOnceSet(t *testing.T) {
	ct := &cudaThread{ctx: gpuContext(t)}
	ct.Enter()
	ct.Leave()
	runtime.LockOSThread() // stay on the thread that has it
	defer runtime.UnlockOSThread()
	if n := testing.AllocsPerRun(1000, func() { ct.Enter(); ct.Leave() }); n != 0 {
		t.Errorf("Enter and Leave allocate %v times a call on a thread that has the context, want 0", n)
	}
}

// The cost the setup adds to each MPI call on a GPU: on a thread that has
// the context already, a lock and one cgo call reading a thread-local flag.
func BenchmarkCUDAThreadEnterLeave(b *testing.B) {
	ct := &cudaThread{ctx: gpuContext(b)}
	b.ReportAllocs()
	for b.Loop() {
		ct.Enter()
		ct.Leave()
	}
}
