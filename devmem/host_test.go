package devmem

import (
	"bytes"
	"errors"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func random(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func TestHostCopiesEveryDirection(t *testing.T) {
	d := NewHostDevice()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	const n = 1<<20 + 7
	want := random(1, n)
	a, _ := d.Alloc(n)
	b, _ := d.Alloc(n)
	p, _ := d.AllocPinned(n)
	for _, st := range []*Stream{nil, s} {
		for _, buf := range []Buffer{a, b, p} {
			Memset(buf, 0xA5, st)
		}
		if err := CopyFromHost(a, want, st); err != nil {
			t.Fatal(err)
		}
		if err := Copy(p, a, st); err != nil { // device to pinned
			t.Fatal(err)
		}
		if err := Copy(b, p, st); err != nil { // pinned to device
			t.Fatal(err)
		}
		got := bytes.Repeat([]byte{0x5A}, n)
		if err := CopyToHost(got, b, st); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("stream %v: data changed on its way through device and pinned memory", st != nil)
		}
	}
	for _, buf := range []Buffer{a, b, p} {
		if err := buf.Free(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st != (Stats{}) {
		t.Fatalf("leaked: %+v", st)
	}
}

func TestStreamRunsWorkInOrderAndReportsErrors(t *testing.T) {
	d := NewHostDevice()
	s, _ := d.NewStream()
	defer s.Destroy()
	var seen []int
	var running atomic.Int32
	for i := 0; i < 100; i++ {
		i := i
		s.HostFunc(func() error {
			if running.Add(1) != 1 {
				t.Error("two tasks of one stream ran at once")
			}
			seen = append(seen, i)
			running.Add(-1)
			return nil
		})
	}
	boom := errors.New("boom")
	s.HostFunc(func() error { return boom })
	s.HostFunc(func() error { panic("kernel fault") })
	if err := s.Synchronize(); !errors.Is(err, boom) {
		t.Fatalf("Synchronize = %v, want the first task error", err)
	}
	for i, v := range seen {
		if v != i {
			t.Fatalf("task %d ran at position %d", v, i)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("error not cleared by Synchronize: %v", err)
	}
}

// A host function, and the drain goroutine it starts, allocate nothing
// once the stream is warm, and neither does a copy on no stream: a small
// stream-ordered collective on the host device pays for none (each
// allocation and its collection had cost it tens of ns). Each run queues
// a host function on an idle stream (no drain goroutine alive, so one
// starts) and waits for that goroutine to run it and end; the work ran
// every time.
func TestHostFuncAndCopyAllocateNothing(t *testing.T) {
	d := NewHostDevice()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	q := &s.impl.(*hostStream).hostQueue
	var ran atomic.Int64
	work := func() error { ran.Add(1); return nil }
	drained := func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return !q.drainer && !q.busyLocked()
	}
	runs := 0
	allocs := testing.AllocsPerRun(200, func() {
		runs++
		for !drained() {
			runtime.Gosched()
		}
		if err := s.HostFunc(work); err != nil {
			t.Fatal(err)
		}
		for !drained() {
			runtime.Gosched()
		}
	})
	if allocs != 0 {
		t.Errorf("a host function on an idle stream allocates %v objects, want none", allocs)
	}
	if got := ran.Load(); got != int64(runs) {
		t.Errorf("the host function ran %d times in %d runs", got, runs)
	}

	src, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { src.Free(); dst.Free() }()
	want := random(7, 64)
	if err := CopyFromHost(src, want, nil); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := CopyN(dst, src, 64, nil); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("a copy on no stream allocates %v objects, want none", allocs)
	}
	got := make([]byte, 64)
	if err := CopyToHost(got, dst, nil); err != nil || !bytes.Equal(got, want) {
		t.Errorf("copied %x (%v), want %x", got, err, want)
	}
}

// Query says whether a stream holds work not done; deferred host work runs
// in order and its error is the next Synchronize's.
func TestStreamQueryAndDeferredWork(t *testing.T) {
	d := NewHostDevice()
	s, _ := d.NewStream()
	if done, err := s.Query(); err != nil || !done {
		t.Errorf("Query of a new stream = %v, %v; want done", done, err)
	}
	var nilStream *Stream
	if done, err := nilStream.Query(); err != nil || !done {
		t.Errorf("Query of the nil stream = %v, %v; want done", done, err)
	}
	gate := make(chan struct{})
	var order []string
	s.HostFunc(func() error { <-gate; order = append(order, "gated"); return nil })
	boom := errors.New("boom")
	if err := s.hostFuncDeferred(func() error { order = append(order, "deferred"); return boom }); err != nil {
		t.Fatal(err)
	}
	if done, err := s.Query(); err != nil || done {
		t.Errorf("Query with work held = %v, %v; want not done", done, err)
	}
	close(gate)
	if err := s.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("Synchronize = %v, want the deferred work's error", err)
	}
	if len(order) != 2 || order[0] != "gated" || order[1] != "deferred" {
		t.Errorf("work ran as %q, want gated then deferred", order)
	}
	if done, err := s.Query(); err != nil || !done {
		t.Errorf("Query after Synchronize = %v, %v; want done", done, err)
	}
	if err := nilStream.hostFuncDeferred(func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("HostFuncDeferred on the nil stream = %v, want its function's error at once", err)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Query of a destroyed stream = %v, want ErrInvalidArgument", err)
	}
	if err := s.hostFuncDeferred(func() error { return nil }); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("HostFuncDeferred on a destroyed stream = %v, want ErrInvalidArgument", err)
	}
}

func TestEventsOrderStreamsAndTime(t *testing.T) {
	d := NewHostDevice()
	a, _ := d.NewStream()
	b, _ := d.NewStream()
	start, _ := d.NewEvent()
	end, _ := d.NewEvent()
	defer func() { a.Destroy(); b.Destroy(); start.Destroy(); end.Destroy() }()
	release := make(chan struct{})
	var order []string
	start.Record(a)
	a.HostFunc(func() error { <-release; time.Sleep(time.Millisecond); order = append(order, "a"); return nil })
	end.Record(a)
	b.WaitEvent(end)
	b.HostFunc(func() error { order = append(order, "b"); return nil })
	if done, _ := end.Done(); done {
		t.Fatal("event reached before the work before it")
	}
	close(release)
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "a" {
		t.Fatalf("order %v: stream b did not wait for the event", order)
	}
	el, err := Elapsed(start, end)
	if err != nil || el <= 0 {
		t.Fatalf("Elapsed = %v, %v", el, err)
	}
}

func TestBadArgumentsChangeNothing(t *testing.T) {
	d, other := NewHostDevice(), NewHostDevice()
	src, _ := d.Alloc(64)
	small, _ := d.Alloc(16)
	foreign, _ := other.Alloc(64)
	freed, _ := d.Alloc(64)
	freed.Free()
	CopyFromHost(src, random(2, 64), nil)
	Memset(small, 7, nil)
	before, _ := small.Bytes()
	before = append([]byte(nil), before...)
	s2, _ := other.NewStream()
	defer s2.Destroy()
	view, _ := src.Slice(8, 8)
	for name, err := range map[string]error{
		"too small":         Copy(small, src, nil),
		"other device":      Copy(foreign, src, nil),
		"freed source":      Copy(small, freed, nil),
		"zero buffer":       Copy(Buffer{}, src, nil),
		"stream of another": CopyN(small, src, 8, s2),
		"free twice":        freed.Free(),
		"free a view":       view.Free(),
		"bad slice":         func() error { _, err := src.Slice(60, 8); return err }(),
		"negative alloc":    func() error { _, err := d.Alloc(-1); return err }(),
		"host too long":     CopyFromHost(small, make([]byte, 17), nil),
		"overlapping copy":  func() error { v, _ := src.Slice(4, 8); return CopyN(src, v, 8, nil) }(),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	after, _ := small.Bytes()
	if !bytes.Equal(before, after) {
		t.Fatal("a refused call changed memory")
	}
}

func TestSliceViews(t *testing.T) {
	d := NewHostDevice()
	x, err := AllocSlice[float64](d, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	in := []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	x.CopyFrom(in, nil)
	sub, _ := x.Sub(3, 6)
	got, _ := sub.ToHost(nil)
	if len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Fatalf("Sub(3,6) = %v", got)
	}
	h, ok := x.Host()
	if !ok || h[9] != 9 {
		t.Fatal("Host view wrong")
	}
	if _, err := x.Sub(5, 11); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal("Sub past the end accepted")
	}
	if err := x.CopyFrom(make([]float64, 11), nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal("CopyFrom of too many elements accepted")
	}
}

func TestOpenDeviceSpecs(t *testing.T) {
	if n, err := CUDADeviceCount(); err == nil && n > 0 {
		t.Skip("a GPU is usable here, so auto picks it; the no-GPU cases run in a clean child in cuda_test.go")
	}
	t.Setenv("GPUCOMM_CUDA_LIB", "/nonexistent/libcuda.so.1")
	for _, spec := range []string{"host", "auto", ""} {
		d, err := Open(spec, 0)
		if err != nil || d.Kind() != Host {
			t.Errorf("Open(%q) = %v, %v; want the host device", spec, d, err)
		}
	}
	if _, err := Open("gpu7", 0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Open(gpu7) = %v", err)
	}
	if _, err := Open("cuda", 0); err == nil {
		t.Error("Open(cuda) without a CUDA library succeeded")
	}
}

// A host call runs where a host function would, in order, and also when the
// work before it failed, given that failure (a host function is skipped
// then); Synchronize reports the failure and the call's own error, and the
// queue goes on. The failing work is a before that fails (the cuda
// driver's wait for what it handed to CUDA), once.
func TestHostCallRunsAfterAFailureAndIsGivenIt(t *testing.T) {
	fault := errors.New("illegal address")
	var failNext atomic.Bool
	var q hostQueue
	q.init(func() error {
		if failNext.Swap(false) {
			return fault
		}
		return nil
	})
	var order []string
	var given []error
	mine := errors.New("the call gave up its turn")
	call := func(before error) error {
		order = append(order, "call")
		given = append(given, before)
		if before != nil {
			return mine
		}
		return nil
	}
	fn := func() error { order = append(order, "fn"); return nil }

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(q.hostFunc(fn))
	must(q.hostCall(call))
	must(q.flush())
	failNext.Store(true)
	must(q.hostFunc(fn)) // skipped: its before fails
	if err := q.flush(); !errors.Is(err, fault) {
		t.Errorf("Synchronize after a skipped host function: %v, want %v", err, fault)
	}
	failNext.Store(true)
	must(q.hostCall(call)) // runs, given the failure
	if err := q.flush(); !errors.Is(err, fault) || !errors.Is(err, mine) {
		t.Errorf("Synchronize after a call that failed on a failure: %v, want both %v and %v", err, fault, mine)
	}
	must(q.hostCall(call))
	must(q.flush())
	if want := []string{"fn", "call", "call", "call"}; !slices.Equal(order, want) {
		t.Errorf("ran %v, want %v", order, want)
	}
	if len(given) != 3 || given[0] != nil || !errors.Is(given[1], fault) || given[2] != nil {
		t.Errorf("the calls were given %v, want nil, %v, nil", given, fault)
	}
	// A call that panics is an error, not a crash.
	must(q.hostCall(func(error) error { panic("boom") }))
	if err := q.flush(); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("Synchronize after a call that panicked: %v, want an error saying so", err)
	}
	// On a stream of the host device nothing before a call fails.
	d := NewHostDevice()
	s, err := d.NewStream()
	must(err)
	defer s.Destroy()
	var got []error
	must(s.hostCall(func(before error) error { got = append(got, before); return nil }))
	must(s.Synchronize())
	var nilStream *Stream
	must(nilStream.hostCall(func(before error) error { got = append(got, before); return nil }))
	if len(got) != 2 || got[0] != nil || got[1] != nil {
		t.Errorf("host device and nil stream: calls given %v, want nil twice", got)
	}
}

// Device.Synchronize waits for the work queued on every live stream of the
// device, host functions and the work queued behind them included, and
// returns that work's errors (once); it does not wait for another device's
// streams.
func TestHostDeviceSynchronizeWaitsForHostWork(t *testing.T) {
	testDeviceSynchronizeWaitsForHostWork(t, NewHostDevice())
}

// testDeviceSynchronizeWaitsForHostWork is the body of the test above and of
// its cuda twin (TestCUDAOnGPUDeviceSynchronizeWaitsForHostWork).
func testDeviceSynchronizeWaitsForHostWork(t *testing.T, d *Device) {
	s1, s2, s3 := mustStream(t, d), mustStream(t, d), mustStream(t, d)
	const n = 4096
	buf := mustAlloc(t, d, n, false) // device memory: a memset of pinned memory on a stream waits for it
	must(t, Memset(buf, 1, nil))
	var ran1, ran2, ran3 atomic.Bool
	sentinel := errors.New("from a slow host function")
	must(t, s1.HostFunc(func() error { time.Sleep(300 * time.Millisecond); ran1.Store(true); return nil }))
	must(t, Memset(buf, 9, s1)) // behind the slow host function
	if ran1.Load() {
		t.Fatal("Memset on s1 waited for the host function queued before it")
	}
	must(t, s2.HostFunc(func() error { time.Sleep(150 * time.Millisecond); ran2.Store(true); return sentinel }))
	must(t, s3.hostFuncDeferred(func() error { time.Sleep(50 * time.Millisecond); ran3.Store(true); return nil }))

	// A stream of another device, held until the end: not waited for.
	other := NewHostDevice()
	so := mustStream(t, other)
	gate := make(chan struct{})
	var openGate sync.Once
	t.Cleanup(func() { openGate.Do(func() { close(gate) }) }) // before so's Destroy, should the test stop early
	var ranOther atomic.Bool
	must(t, so.HostFunc(func() error { <-gate; ranOther.Store(true); return nil }))

	res := make(chan error, 1)
	start := time.Now()
	go func() { res <- d.Synchronize() }()
	var err error
	select {
	case err = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("Device.Synchronize has not returned in 30s: it waits for another device's stream")
	}
	took := time.Since(start)
	if !ran1.Load() || !ran2.Load() || !ran3.Load() {
		t.Errorf("Device.Synchronize returned after %v with host functions not run: s1 %v, s2 %v, s3 (deferred) %v",
			took, ran1.Load(), ran2.Load(), ran3.Load())
	}
	h := make([]byte, n)
	must(t, CopyToHost(h, buf, nil)) // now, waiting for no stream
	if !bytes.Equal(h, bytes.Repeat([]byte{9}, n)) {
		t.Errorf("Device.Synchronize returned before the memset queued behind a host function: buf[0] = %d", h[0])
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("Device.Synchronize = %v; want the error of the host function on s2", err)
	}
	if ranOther.Load() {
		t.Error("the other device's host function ran before its gate opened")
	}
	if err := s2.Synchronize(); err != nil {
		t.Errorf("s2.Synchronize after Device.Synchronize = %v; want nil: the error was reported once", err)
	}
	openGate.Do(func() { close(gate) })
	must(t, other.Synchronize())
	if !ranOther.Load() {
		t.Error("Synchronize of the other device returned before its host function ran")
	}
	// A destroyed stream is not waited for, nor does it fail the device's
	// Synchronize.
	must(t, s3.Destroy())
	must(t, d.Synchronize())
}
