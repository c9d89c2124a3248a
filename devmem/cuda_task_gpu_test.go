//go:build cgo

package devmem

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/cuda"
)

// Stream tasks (internal/devhook.Task) on the cuda driver, on a GPU and on
// the fake library through TestCUDADriverOnAFakeLibrary.

// A task runs in line with the stream's host work, after what was queued
// before it and before what comes after, with the device's context and
// the stream's handle; its error and its panic come back from the next
// Synchronize; a nil stream, a nil function and a destroyed stream are
// refused without running anything.
func TestCUDAOnGPUTaskRunsInLineWithTheStreamsHostWork(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	cs := s.impl.(*cudaStream)
	wantCtx, wantH := uintptr(cs.c.ctx), uintptr(cs.h)
	var order []string // written by host work, which runs one item at a time
	var gotCtx, gotH uintptr
	must(t, s.HostFunc(func() error { time.Sleep(5 * time.Millisecond); order = append(order, "host before"); return nil }))
	must(t, s.task(func(ctx, h uintptr) error { gotCtx, gotH = ctx, h; order = append(order, "task"); return nil }))
	must(t, s.HostFunc(func() error { order = append(order, "host after"); return nil }))
	must(t, s.Synchronize())
	if want := []string{"host before", "task", "host after"}; !slices.Equal(order, want) {
		t.Errorf("ran as %q, want %q", order, want)
	}
	if gotCtx != wantCtx || gotH != wantH {
		t.Errorf("task got context %#x and stream %#x, want %#x and %#x", gotCtx, gotH, wantCtx, wantH)
	}

	sentinel := errors.New("from a task")
	must(t, s.task(func(ctx, h uintptr) error { return sentinel }))
	if err := s.Synchronize(); !errors.Is(err, sentinel) {
		t.Errorf("Synchronize after a failing task = %v, want its error", err)
	}
	must(t, s.task(func(ctx, h uintptr) error { panic("task panic") }))
	if err := s.Synchronize(); err == nil || !strings.Contains(err.Error(), "task panic") {
		t.Errorf("Synchronize after a task that panicked = %v, want the panic as an error", err)
	}
	must(t, s.Synchronize()) // each reported once

	ran := false
	mark := func(ctx, h uintptr) error { ran = true; return nil }
	var nilStream *Stream
	if err := nilStream.task(mark); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("task on a nil stream = %v, want ErrInvalidArgument", err)
	}
	if err := s.task(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("task of a nil function = %v, want ErrInvalidArgument", err)
	}
	gone, err := d.NewStream()
	must(t, err)
	must(t, gone.Destroy())
	if err := gone.task(mark); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "destroyed") {
		t.Errorf("task on a destroyed stream = %v, want HostFunc's ErrInvalidArgument", err)
	}
	must(t, s.Synchronize())
	if ran {
		t.Error("a task given with a bad argument ran")
	}
}

// On an idle stream the task still starts on another goroutine, with
// nobody synchronizing the stream: task returns while its function blocks
// (on a channel closed only once task has returned; a watchdog ends a task
// that blocked its caller, and fails).
func TestCUDAOnGPUTaskNeverRunsOnTheCallersGoroutine(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	must(t, s.Synchronize())
	for i := range 3 {
		release := make(chan struct{})
		started := make(chan int64, 1)
		watchdog := time.AfterFunc(10*time.Second, func() { close(release) })
		caller := goid()
		must(t, s.task(func(ctx, h uintptr) error { started <- goid(); <-release; return nil }))
		if !watchdog.Stop() {
			t.Fatalf("round %d: task returned only once its function was released by the watchdog", i)
		}
		select {
		case ranOn := <-started:
			if ranOn == caller {
				t.Errorf("round %d: the task ran on its caller's goroutine %d", i, caller)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: a task on an idle stream never started without a Synchronize", i)
		}
		close(release)
		must(t, s.Synchronize())
	}
}

// A task does not wait for the GPU work queued before it (a host function
// would); what it issues on the stream's handle is stream work: a copy
// queued after the task sees it, and a Synchronize, with nothing but the
// task's work issued since the stream was last idle, waits for it (the
// fake runs stream work only when something waits: a Synchronize that took
// the stream for idle would leave the task's copy undone), as Query counts
// it.
func TestCUDAOnGPUTaskIssuesStreamWorkWithoutWaitingForTheGPU(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	cs := s.impl.(*cudaStream)
	const n = 4 << 20
	src := mustAlloc(t, d, n, false)
	dst := mustAlloc(t, d, n, false)
	early := mustAlloc(t, d, n, true)
	late := mustAlloc(t, d, n, true)
	mine := mustAlloc(t, d, n, true)
	must(t, Memset(src, 0x11, nil))
	must(t, Memset(dst, 0, nil))
	for _, b := range []Buffer{early, late, mine} {
		must(t, Memset(b, 0, nil))
	}
	hEarly, _ := early.Bytes()
	hLate, _ := late.Bytes()
	hMine, _ := mine.Bytes()

	// GPU work before the task: on the fake it has not run when the task
	// runs, since nothing waited for it (on a GPU it may have).
	must(t, CopyN(early, src, n, s))
	var earlyDone bool
	var streamIdle, queryErr error
	must(t, s.task(func(ctx, h uintptr) error {
		earlyDone = hEarly[0] == 0x11 && hEarly[n-1] == 0x11
		var idle bool
		idle, streamIdle = cuda.StreamQueryIn(cuda.Context(ctx), cuda.Stream(h))
		if idle {
			queryErr = errors.New("the stream was idle")
		}
		return cuda.MemsetD8AsyncIn(cuda.Context(ctx), cudaPtr(dst), 0x22, n, cuda.Stream(h))
	}))
	must(t, CopyN(late, dst, n, s)) // queued after the task: must see its memset
	must(t, s.Synchronize())
	if onFake() && (earlyDone || queryErr != nil || streamIdle != nil) {
		t.Errorf("the task waited for the GPU work before it (copy done %v, stream query %v, %v)", earlyDone, queryErr, streamIdle)
	} else if !onFake() {
		t.Logf("the GPU work before the task was done when it ran: %v (query: %v, %v)", earlyDone, queryErr, streamIdle)
	}
	if hLate[0] != 0x22 || hLate[n-1] != 0x22 {
		t.Errorf("a copy queued after a task read %#x..%#x, want the task's memset (0x22)", hLate[0], hLate[n-1])
	}

	// A Synchronize waits for what the task issued, when nothing else
	// was issued since the stream was last found idle.
	must(t, s.Synchronize())
	if cs.issued.Load() != cs.synced.Load() {
		t.Fatalf("after Synchronize: issued %d, synced %d", cs.issued.Load(), cs.synced.Load())
	}
	issued := make(chan struct{})
	must(t, s.task(func(ctx, h uintptr) error {
		defer close(issued)
		return cuda.MemcpyDtoHAsyncIn(cuda.Context(ctx), mine.Addr(), cudaPtr(src), n, cuda.Stream(h))
	}))
	awaitClosed(t, issued, "a task on an idle stream never ran")
	awaitTrue(t, func() bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return !cs.busyLocked()
	}, "the stream's host queue never emptied after the task")
	if done, err := s.Query(); err != nil || (onFake() && done) {
		t.Errorf("Query with the task's copy not yet waited for = %v, %v; want false on the fake", done, err)
	}
	must(t, s.Synchronize())
	if hMine[0] != 0x11 || hMine[n-1] != 0x11 {
		t.Errorf("after Synchronize the task's copy left %#x..%#x, want 0x11: Synchronize took the stream for idle", hMine[0], hMine[n-1])
	}
	if done, err := s.Query(); err != nil || !done {
		t.Errorf("Query after Synchronize = %v, %v", done, err)
	}
}
