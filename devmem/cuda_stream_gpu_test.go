//go:build cgo

package devmem

import (
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/cuda"
)

// The stream queue's deferred work and polled waits, against the cuda
// driver (on a GPU, and on the fake library through
// TestCUDADriverOnAFakeLibrary); they read the cuda driver's sweep.

// Deferred host work starts no goroutine: the next Synchronize runs it, on
// its own goroutine, and returns its error; work queued behind it starts
// it, in order; nobody waiting for it, the sweep starts it; Destroy runs it
// once. Query says whether a stream holds anything not done.
func TestCUDAOnGPUDeferredHostWork(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	if done, err := s.Query(); err != nil || !done {
		t.Errorf("Query of a new stream = %v, %v; want done", done, err)
	}

	sentinel := errors.New("from deferred work")
	var ranOn atomic.Int64
	swept := sweep.started.Load()
	must(t, s.hostFuncDeferred(func() error { ranOn.Store(goid()); return sentinel }))
	if done, err := s.Query(); err != nil || done {
		t.Errorf("Query with deferred work queued = %v, %v; want not done", done, err)
	}
	if err := s.Synchronize(); !errors.Is(err, sentinel) {
		t.Errorf("Synchronize after deferred work that failed returned %v, want its error", err)
	}
	if g := ranOn.Load(); g != goid() && sweep.started.Load() == swept {
		t.Errorf("deferred work ran on goroutine %d, not on the one that synchronized (%d), and the sweep did not start it", g, goid())
	}
	if done, err := s.Query(); err != nil || !done {
		t.Errorf("Query after Synchronize = %v, %v; want done", done, err)
	}

	var order []string // written by host functions only, which run one at a time
	done := make(chan struct{})
	must(t, s.hostFuncDeferred(func() error { order = append(order, "deferred"); return nil }))
	copyThenCheck(t, d, s, 5, func() { order = append(order, "after the copy") }, done)
	awaitClosed(t, done, "work queued behind deferred work did not run without a Synchronize")
	if want := []string{"deferred", "after the copy"}; !slices.Equal(order, want) {
		t.Errorf("host work ran as %q, want %q", order, want)
	}
	must(t, s.Synchronize())

	unwatched := make(chan struct{})
	must(t, s.hostFuncDeferred(func() error { close(unwatched); return nil }))
	awaitClosed(t, unwatched, "deferred work that nobody waits for never ran")
	must(t, s.Synchronize())

	s2, err := d.NewStream()
	must(t, err)
	var runs atomic.Int64
	must(t, s2.hostFuncDeferred(func() error { runs.Add(1); return sentinel }))
	if err := s2.Destroy(); !errors.Is(err, sentinel) {
		t.Errorf("Destroy right after failing deferred work returned %v, want its error", err)
	}
	time.Sleep(5 * sweepEvery) // a sweep must find nothing left to start
	if r := runs.Load(); r != 1 {
		t.Errorf("deferred work queued before Destroy ran %d times, want once", r)
	}
}

// A wait with a poll: the stream's goroutine polls it, and hands it over to
// a Synchronize that comes meanwhile, which calls wait on its own goroutine;
// done by a poll, it lets the work behind it run without a Synchronize;
// deferred, Synchronize waits for it itself; a poll that panics is an error
// of the next Synchronize.
func TestCUDAOnGPUHostWaitHandsOverToSynchronize(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)

	var polls, waits atomic.Int64
	var waitedOn atomic.Int64
	release := make(chan struct{})
	wait := func() error {
		waits.Add(1)
		waitedOn.Store(goid())
		<-release
		return nil
	}
	poll := func() (bool, error) { polls.Add(1); return false, nil }
	must(t, s.hostWait(wait, poll, false))
	awaitTrue(t, func() bool { return polls.Load() > 0 }, "the stream's goroutine never polled a queued wait")
	go func() { time.Sleep(10 * time.Millisecond); close(release) }()
	must(t, s.Synchronize())
	if waits.Load() != 1 || waitedOn.Load() != goid() {
		t.Errorf("wait ran %d times, on goroutine %d; want once, on the one that synchronized (%d)", waits.Load(), waitedOn.Load(), goid())
	}

	var order []string
	ready := make(chan struct{})
	done := make(chan struct{})
	must(t, s.hostWait(func() error { t.Error("wait called for a wait its poll finished"); return nil }, func() (bool, error) {
		select {
		case <-ready:
			order = append(order, "polled done")
			return true, nil
		default:
			return false, nil
		}
	}, false))
	must(t, s.HostFunc(func() error { order = append(order, "after"); close(done); return nil }))
	close(ready)
	awaitClosed(t, done, "work behind a wait that its poll finished never ran")
	if want := []string{"polled done", "after"}; !slices.Equal(order, want) {
		t.Errorf("ran as %q, want %q", order, want)
	}
	must(t, s.Synchronize())

	waits.Store(0)
	swept := sweep.started.Load()
	must(t, s.hostWait(func() error { waits.Add(1); waitedOn.Store(goid()); return nil }, func() (bool, error) { return false, nil }, true))
	must(t, s.Synchronize())
	if waits.Load() != 1 || (waitedOn.Load() != goid() && sweep.started.Load() == swept) {
		t.Errorf("deferred wait ran %d times, on goroutine %d; want once, on the one that synchronized (%d)", waits.Load(), waitedOn.Load(), goid())
	}

	var panicked atomic.Bool
	must(t, s.hostWait(func() error { return nil }, func() (bool, error) { panicked.Store(true); panic("poll fault") }, false))
	awaitTrue(t, panicked.Load, "the stream's goroutine never polled a queued wait")
	if err := s.Synchronize(); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("Synchronize after a poll that panicked: %v, want the panic as an error", err)
	}
	if err := s.hostWait(func() error { return nil }, nil, false); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("HostWait without a poll = %v, want ErrInvalidArgument", err)
	}
}

// goid is the calling goroutine's number, read off its stack trace.
func goid() int64 {
	var b [64]byte
	f := strings.Fields(string(b[:runtime.Stack(b[:], false)]))
	id, _ := strconv.ParseInt(f[1], 10, 64)
	return id
}

// Deferred work starts within a few sweeps even while more is deferred
// behind it all the time (each deferral must not restart its count). The
// bound, two seconds, is 1000 times the documented two milliseconds: a
// liveness check, not a timing.
func TestCUDAOnGPUDeferredWorkStartsWhileMoreIsDeferred(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	first := make(chan struct{})
	must(t, s.hostFuncDeferred(func() error { close(first); return nil }))
	for deadline := time.Now().Add(2 * time.Second); ; {
		select {
		case <-first:
			must(t, s.Synchronize())
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("deferred work never started while more was deferred behind it every 100 µs")
		}
		must(t, s.hostFuncDeferred(func() error { return nil }))
		busy(100 * time.Microsecond) // several deferrals a sweep (time.Sleep would take a millisecond)
	}
}

// A Synchronize that finds the stream's goroutine running long host work
// spins a little, then sleeps until it ends (a hand-back), instead of
// spinning all along.
func TestCUDAOnGPUSynchronizeSleepsThroughLongHostWork(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	cs := s.impl.(*cudaStream)
	started := make(chan struct{})
	must(t, s.HostFunc(func() error { close(started); time.Sleep(100 * time.Millisecond); return nil }))
	awaitClosed(t, started, "host work queued on a stream never started")
	before := cs.handBacks.Load()
	must(t, s.Synchronize())
	if cs.handBacks.Load() == before {
		t.Error("Synchronize never slept while the stream's goroutine ran 100 ms of host work")
	}
}

// A wait queued behind CUDA work that failed still runs (what it waits for
// is under way, and its caller counts on its end), and Synchronize reports
// the failure. The fake library's rejection of a stream handle stands in
// for the failure: a real GPU's would poison the context.
func TestCUDAOnGPUHostWaitRunsAfterFailedWork(t *testing.T) {
	if !onFake() {
		t.Skip("fails a stream on purpose: only against the fake library")
	}
	d := needCUDA(t)
	s := mustStream(t, d)
	cs := s.impl.(*cudaStream)
	junk := mustAlloc(t, d, 256, true)
	h, _ := junk.Bytes()
	clear(h)
	good := cs.h
	cs.h = cuda.Stream(uintptr(unsafe.Pointer(&h[0]))) // no stream's magic: CUDA_ERROR_INVALID_HANDLE
	cs.issued.Add(1)                                   // as if work were queued before the wait
	var waits atomic.Int64
	for _, deferred := range []bool{false, true} {
		must(t, s.hostWait(func() error { waits.Add(1); return nil }, func() (bool, error) { return false, nil }, deferred))
		if err := s.Synchronize(); !cuda.IsCode(err, cuda.CUDA_ERROR_INVALID_HANDLE) {
			t.Errorf("deferred %v: Synchronize after failed CUDA work = %v, want CUDA_ERROR_INVALID_HANDLE", deferred, err)
		}
	}
	cs.h = good
	cs.synced.Store(cs.issued.Load())
	if w := waits.Load(); w != 2 {
		t.Errorf("waits queued behind failed CUDA work ran %d times, want 2", w)
	}
}

// awaitClosed fails the test unless ch is closed within 30 s.
func awaitClosed(t *testing.T, ch <-chan struct{}, failure string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal(failure)
	}
}

// awaitTrue fails the test unless cond holds within 30 s.
func awaitTrue(t *testing.T, cond func() bool, failure string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(failure)
		}
	}
}

// enqueueIn (the way every stream-ordered NCCL call is issued) runs its
// function at once on an idle stream, with the device's context and the
// stream's handle, allocating nothing; behind queued host work it runs
// after that work, in order, and its error is the next Synchronize's.
func TestCUDAOnGPUEnqueueInRunsNowWhenIdleAndInLineOtherwise(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	cs := s.impl.(*cudaStream)
	wantCtx, wantH := uintptr(cs.c.ctx), uintptr(cs.h)

	var gotCtx, gotH uintptr
	ran := 0
	call := func(ctx, h uintptr) error { gotCtx, gotH = ctx, h; ran++; return nil }
	must(t, s.enqueueIn(call))
	if ran != 1 || gotCtx != wantCtx || gotH != wantH {
		t.Errorf("enqueueIn on an idle stream: ran %d times with context %#x and stream %#x; want once with %#x and %#x", ran, gotCtx, gotH, wantCtx, wantH)
	}
	if n := testing.AllocsPerRun(100, func() { must(t, s.enqueueIn(call)) }); n != 0 {
		t.Errorf("enqueueIn on an idle stream allocates %v times a call, want 0", n)
	}

	var order []string // written by host functions and calls that run one at a time
	release := make(chan struct{})
	must(t, s.HostFunc(func() error { <-release; order = append(order, "host work"); return nil }))
	sentinel := errors.New("from the enqueued call")
	must(t, s.enqueueIn(func(ctx, h uintptr) error {
		order = append(order, "enqueued")
		if ctx != wantCtx || h != wantH {
			t.Errorf("queued enqueueIn ran with context %#x and stream %#x, want %#x and %#x", ctx, h, wantCtx, wantH)
		}
		return sentinel
	}))
	close(release)
	if err := s.Synchronize(); !errors.Is(err, sentinel) {
		t.Errorf("Synchronize after a queued enqueueIn that failed returned %v, want its error", err)
	}
	if want := []string{"host work", "enqueued"}; !slices.Equal(order, want) {
		t.Errorf("ran as %q, want %q", order, want)
	}
}
