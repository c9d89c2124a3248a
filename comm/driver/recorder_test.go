package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/devmem"
)

// fakeEngine runs nothing: Run returns err. flightEngine is one that is a
// FlightRunner and keeps the last Flight for the test to report on.
type fakeEngine struct {
	err  error
	last Flight
}

func (e *fakeEngine) Usable() error       { return nil }
func (e *fakeEngine) Run(call Call) error { return e.err }

type flightEngine struct{ fakeEngine }

// flightFront turns tracing on for t and gives a Front of rank 0 of 2 on a
// flightEngine, a stream (destroyed when t ends) and two 64-byte host
// buffers: the stage of the tests of flights' starts and ends.
func flightFront(t *testing.T) (Front, *flightEngine, *devmem.Stream, devmem.Buffer, devmem.Buffer) {
	t.Helper()
	traceOn(t)
	dev, a, b := hostBufs(t, 64)
	eng := &flightEngine{}
	f := NewFront(FrontConfig{Backend: "fake", Rank: 0, Size: 2, Device: dev}, eng)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return f, eng, s, a, b
}

func (e *flightEngine) RunFlight(call Call, f Flight) error {
	e.last = f
	return e.err
}

func traceOff(t *testing.T) {
	t.Setenv("GPUCOMM_TRACE_DIR", "")
	t.Setenv("GPUCOMM_TRACE_SIGNAL", "")
}

func traceOn(t *testing.T) string {
	runtime.GC() // earlier tests' recorders go, and WriteTraces writes only this test's
	dir := t.TempDir()
	t.Setenv("GPUCOMM_TRACE_DIR", dir)
	t.Setenv("GPUCOMM_TRACE_SIGNAL", "")
	return dir
}

func hostBufs(t testing.TB, n int) (*devmem.Device, devmem.Buffer, devmem.Buffer) {
	dev := devmem.NewHostDevice()
	a, err := dev.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dev.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return dev, a, b
}

func TestRecorderOffRecordsNothingAndAllocatesNothing(t *testing.T) {
	traceOff(t)
	dev, a, b := hostBufs(t, 64)
	f := NewFront(FrontConfig{Backend: "fake", Rank: 0, Size: 2, Device: dev}, &fakeEngine{})
	if f.Recorder() != nil {
		t.Fatal("recording is off but the Front has a recorder")
	}
	if n := testing.AllocsPerRun(200, func() {
		if err := f.AllReduce(a, b, 16, Float32, Sum, nil); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AllReduce through Front allocates %v times an operation with recording off, want 0", n)
	}
}

func TestRecorderOnAllocatesNothingPerOperation(t *testing.T) {
	traceOn(t)
	dev, a, b := hostBufs(t, 64)
	f := NewFront(FrontConfig{Backend: "fake", Rank: 0, Size: 2, Device: dev}, &fakeEngine{})
	if f.Recorder() == nil {
		t.Fatal("GPUCOMM_TRACE_DIR is set but the Front has no recorder")
	}
	if n := testing.AllocsPerRun(200, func() {
		if err := f.AllReduce(a, b, 16, Float32, Sum, nil); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AllReduce through Front allocates %v times an operation with recording on, want 0", n)
	}
}

func intp(i int) *int { return &i }

// Every operation is in the record with what it was called with, in order,
// with its own sequence number and, for collectives, the collective's.
func TestRecorderKeepsEachOperationWithItsArguments(t *testing.T) {
	traceOn(t)
	dev, a, b := hostBufs(t, 256)
	eng := &fakeEngine{}
	f := NewFront(FrontConfig{Backend: "fake", Rank: 1, Size: 4, Device: dev, SkipEmpty: true}, eng)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	before := time.Now().UnixNano()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.AllReduce(a, b, 16, Float32, Max, nil))
	must(f.Broadcast(a, b, 5, Int64, 3, s))
	must(f.Send(a, 7, Uint8, 2, nil))
	must(f.AllReduce(a, b, 0, Float64, Sum, nil)) // skipped: moves nothing
	if err := f.AllReduce(a, b, 1000, Float32, Sum, nil); err == nil {
		t.Fatal("an AllReduce larger than its buffers was accepted")
	} // refused: not in the record
	eng.err = fmt.Errorf("link down: %w", ErrUnsupported)
	if err := f.Barrier(nil); err == nil {
		t.Fatal("the engine's error was lost")
	}
	after := time.Now().UnixNano()
	rec := f.Recorder().Snapshot("test")
	if rec.Backend != "fake" || rec.Rank != 1 || rec.Size != 4 || rec.Operations != 5 || rec.Collectives != 4 ||
		!strings.HasPrefix(rec.ID, "fake-n4-c") || rec.Reason != "test" || rec.PID != os.Getpid() || rec.StreamEvents {
		t.Errorf("header %+v", rec)
	}
	want := []TraceEntry{
		{Seq: 1, Coll: 1, Op: "AllReduce", DType: "float32", Count: 16, Reduce: "max", State: StateDone},
		{Seq: 2, Coll: 2, Op: "Broadcast", DType: "int64", Count: 5, Root: intp(3), Stream: 1, State: StateQueued},
		{Seq: 3, Op: "Send", DType: "uint8", Count: 7, Root: intp(2), Transfers: 1, State: StateDone},
		{Seq: 4, Coll: 3, Op: "AllReduce", DType: "float64", Count: 0, Reduce: "sum", State: StateSkipped},
		{Seq: 5, Coll: 4, Op: "Barrier", State: StateFailed, Error: "link down"},
	}
	if len(rec.Entries) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(rec.Entries), len(want), rec.Entries)
	}
	for i, w := range want {
		g := rec.Entries[i]
		if g.Queued < before || g.Queued > after {
			t.Errorf("entry %d queued at %d, outside the test's %d..%d", i, g.Queued, before, after)
		}
		if w.State != StateQueued && (g.Started < g.Queued || g.Ended < g.Started) {
			t.Errorf("entry %d: queued %d started %d ended %d, want them in order", i, g.Queued, g.Started, g.Ended)
		}
		if w.State == StateQueued && (g.Started != 0 || g.Ended != 0) {
			t.Errorf("entry %d: a stream-ordered call of an engine that reports nothing has times %d %d", i, g.Started, g.Ended)
		}
		g.Queued, g.Started, g.Ended = 0, 0, 0
		if !strings.Contains(g.Error, w.Error) || (w.Error == "") != (g.Error == "") {
			t.Errorf("entry %d error %q, want it to hold %q", i, g.Error, w.Error)
		}
		g.Error, w.Error = "", ""
		gj, _ := json.Marshal(g)
		wj, _ := json.Marshal(w)
		if string(gj) != string(wj) {
			t.Errorf("entry %d:\n got %s\nwant %s", i, gj, wj)
		}
	}
	if sig := rec.Entries[1].Signature(); sig != (Call{Operation: OpBroadcast, Count: 5, DType: Int64, Root: 3}).Signature() {
		t.Errorf("an entry's signature %q is not its call's", sig)
	}
}

// A FlightRunner reports the start and end of a stream-ordered call.
func TestFlightRunnerReportsStartAndEnd(t *testing.T) {
	f, eng, s, a, b := flightFront(t)
	if err := f.AllGather(a, b, 4, Int32, s); err != nil {
		t.Fatal(err)
	}
	st := func() string { return f.Recorder().Snapshot("").Entries[0].State }
	if got := st(); got != StateQueued || eng.last.Seq() != 1 {
		t.Fatalf("state %s seq %d after enqueue, want queued and 1", got, eng.last.Seq())
	}
	eng.last.Started()
	if got := st(); got != StateStarted {
		t.Errorf("state %s after Started, want started", got)
	}
	eng.last.Ended(nil)
	eng.last.Ended(errors.New("late")) // the first end stays
	if got := st(); got != StateDone {
		t.Errorf("state %s after Ended, want done", got)
	}
	if !f.Recorder().Snapshot("").StreamEvents {
		t.Error("a FlightRunner's record does not say it reports stream events")
	}
	Flight{}.Started() // the zero Flight does nothing
	Flight{}.Ended(ErrTimeout)
}

func TestRecorderKeepsTheLastTraceDepthOperations(t *testing.T) {
	traceOn(t)
	dev, a, b := hostBufs(t, 64)
	f := NewFront(FrontConfig{Backend: "fake", Rank: 0, Size: 2, Device: dev}, &fakeEngine{})
	const extra = 37
	for i := range TraceDepth + extra {
		if err := f.AllReduce(a, b, i%16, Int32, Sum, nil); err != nil {
			t.Fatal(err)
		}
	}
	rec := f.Recorder().Snapshot("")
	if len(rec.Entries) != TraceDepth || rec.Operations != TraceDepth+extra {
		t.Fatalf("%d entries of %d operations, want %d of %d", len(rec.Entries), rec.Operations, TraceDepth, TraceDepth+extra)
	}
	for i, e := range rec.Entries {
		seq := uint64(extra + 1 + i)
		if e.Seq != seq || e.Coll != seq || e.Count != int(seq-1)%16 {
			t.Fatalf("entry %d: seq %d coll %d count %d, want %d %d %d", i, e.Seq, e.Coll, e.Count, seq, seq, int(seq-1)%16)
		}
	}
}

func readTrace(t *testing.T, path string) TraceFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f TraceFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// A timeout makes the process write every record; WriteTraces does on
// request.
func TestTimeoutAndRequestWriteTheRecord(t *testing.T) {
	dir := traceOn(t)
	dev, a, b := hostBufs(t, 64)
	eng := &fakeEngine{}
	f := NewFront(FrontConfig{Backend: "fake", Rank: 3, Size: 4, Device: dev}, eng)
	path := filepath.Join(dir, FileName(f.Recorder().ID(), 3))
	if err := f.AllReduce(a, b, 2, Float32, Sum, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a record was written before any timeout or request: %v", err)
	}
	eng.err = fmt.Errorf("no progress after 1s: %w", ErrTimeout)
	if err := f.Broadcast(a, b, 3, Uint8, 0, nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("err %v, want a timeout", err)
	}
	rec := readTrace(t, path)
	if !strings.HasPrefix(rec.Reason, "timeout") || rec.Rank != 3 || len(rec.Entries) != 2 || rec.Entries[1].State != StateFailed {
		t.Errorf("record after a timeout: %+v", rec)
	}
	eng.err = nil
	if err := f.Barrier(nil); err != nil {
		t.Fatal(err)
	}
	paths, err := WriteTraces("asked")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range paths {
		found = found || p == path
	}
	if rec := readTrace(t, path); !found || rec.Reason != "asked" || len(rec.Entries) != 3 {
		t.Errorf("WriteTraces wrote %v; the record holds %+v", paths, rec)
	}
}

func TestTraceSignalWritesTheRecord(t *testing.T) {
	dir := traceOn(t)
	t.Setenv("GPUCOMM_TRACE_SIGNAL", "usr1")
	dev, a, b := hostBufs(t, 64)
	f := NewFront(FrontConfig{Backend: "fake", Rank: 0, Size: 2, Device: dev}, &fakeEngine{})
	if err := f.AllReduce(a, b, 2, Float32, Sum, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName(f.Recorder().ID(), 0))
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("SIGUSR1 wrote no record in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rec := readTrace(t, path); rec.Reason != "signal user defined signal 1" || len(rec.Entries) != 1 {
		t.Errorf("record %+v", rec)
	}
}

func TestParseTraceSignal(t *testing.T) {
	for v, want := range map[string]syscall.Signal{"USR1": syscall.SIGUSR1, "sigusr2": syscall.SIGUSR2, " TERM ": syscall.SIGTERM, "10": syscall.SIGUSR1} {
		if got, err := ParseTraceSignal(v); err != nil || got != want {
			t.Errorf("ParseTraceSignal(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "KILL", "9", "usr3"} {
		if _, err := ParseTraceSignal(v); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParseTraceSignal(%q): %v, want an invalid-argument error", v, err)
		}
	}
}

func TestWriteWithoutADirectoryIsAnError(t *testing.T) {
	traceOn(t)
	f := NewFront(FrontConfig{Backend: "fake", Size: 1, Device: devmem.NewHostDevice()}, &fakeEngine{})
	if _, err := f.Recorder().Write("", "x"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Write to no directory: %v", err)
	}
}

// BenchmarkFrontDo is the recorder's cost: compare off and on.
func BenchmarkFrontDo(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			f, a, c := benchFront(b, on)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := f.AllReduce(a, c, 16, Float32, Sum, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchFront(b testing.TB, on bool) (*Front, devmem.Buffer, devmem.Buffer) {
	if on {
		os.Setenv("GPUCOMM_TRACE_DIR", os.TempDir())
	} else {
		os.Setenv("GPUCOMM_TRACE_DIR", "")
	}
	defer os.Setenv("GPUCOMM_TRACE_DIR", "")
	dev, a, c := hostBufs(b, 64)
	f := NewFront(FrontConfig{Backend: "fake", Rank: 0, Size: 2, Device: dev}, &fakeEngine{})
	return &f, a, c
}

// BenchmarkRecorderCost reports what the recorder adds to an operation (the
// issue's bound: 0.1 µs): the least time an operation took with it on, less
// the least with it off, over interleaved batches, so that a busy machine's
// noise does not count, and what one clock read costs (two a call are the
// floor: a virtual machine's kvm-clock costs 27-70 ns a read on the 2-core
// CPU machine; the recorder reads the time-stamp counter instead where it
// is stable, clock.go). A benchmark, not a test: speed is reported, never asserted.
func BenchmarkRecorderCost(b *testing.B) {
	const batch, rounds = 20000, 25
	clock := time.Duration(1 << 62)
	off, a, c := benchFront(b, false)
	on, a2, c2 := benchFront(b, true)
	least := func(f *Front) time.Duration {
		a, c := a, c
		if f == on {
			a, c = a2, c2
		}
		start := time.Now()
		for range batch {
			if err := f.AllReduce(a, c, 16, Float32, Sum, nil); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start) / batch
	}
	var bestOff, bestOn time.Duration
	for b.Loop() {
		for range rounds {
			start := time.Now()
			var sink time.Duration
			for range batch {
				sink += time.Duration(now())
			}
			_ = sink
			clock = min(clock, time.Since(start)/batch)
		}
		bestOff, bestOn = time.Duration(1<<62), time.Duration(1<<62)
		for range rounds {
			bestOff = min(bestOff, least(off))
			bestOn = min(bestOn, least(on))
		}
	}
	b.ReportMetric(float64(bestOn-bestOff), "recorder-ns/op")
	b.ReportMetric(float64(bestOff), "off-ns/op")
	b.ReportMetric(float64(clock), "clock-read-ns")
}

// An operation's end is one lock-free word in its ring slot: a late end of
// an operation whose slot the ring has since given to a later one must
// neither end the later one nor undo its end; an end too far from the
// queueing for the word, or with an error, goes through the lock with the
// same result.
func TestLateEndsDoNotTouchTheSlotsNextOperation(t *testing.T) {
	f, eng, s, a, b := flightFront(t)
	state := func(seq uint64) string {
		for _, e := range f.Recorder().Snapshot("").Entries {
			if e.Seq == seq {
				return e.State
			}
		}
		return "gone"
	}
	if err := f.AllGather(a, b, 4, Int32, s); err != nil {
		t.Fatal(err)
	}
	first := eng.last // seq 1, never ended yet
	for range TraceDepth - 1 {
		if err := f.AllReduce(a, b, 4, Int32, Sum, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.AllGather(a, b, 4, Int32, s); err != nil { // seq 1+TraceDepth takes seq 1's slot
		t.Fatal(err)
	}
	next := eng.last
	if next.Seq() != 1+TraceDepth {
		t.Fatalf("seq %d, want %d", next.Seq(), 1+TraceDepth)
	}
	first.Ended(nil) // late: its slot is next's now
	if got := state(next.Seq()); got != StateQueued {
		t.Fatalf("a late end of seq 1 made seq %d %s, want queued", next.Seq(), got)
	}
	next.Ended(nil)
	if got := state(next.Seq()); got != StateDone {
		t.Fatalf("seq %d %s after its end, want done", next.Seq(), got)
	}
	first.Ended(nil) // lock-free, after next's end
	first.Ended(errors.New("later still"))
	if got := state(next.Seq()); got != StateDone {
		t.Fatalf("a late failure of seq 1 made seq %d %s, want done", next.Seq(), got)
	}

	// An end later than the word holds: kept exactly, under the lock.
	if err := f.AllGather(a, b, 4, Int32, s); err != nil {
		t.Fatal(err)
	}
	long := eng.last
	r := f.Recorder()
	r.mu.Lock()
	e := r.slot(long.Seq())
	e.queued -= endLong + 5 // queued long ago
	queued := e.queued
	r.mu.Unlock()
	long.queued = queued
	long.Ended(nil)
	r.mu.Lock()
	w := e.end.Load()
	end := e.endOf(long.Seq(), w)
	r.mu.Unlock()
	if w&endTimeMask != endLong || end-queued < endLong {
		t.Errorf("an end %d units after queueing: word %#x, end at +%d", endLong+5, w, end-queued)
	}
	if got := state(long.Seq()); got != StateDone {
		t.Errorf("the long operation is %s, want done", got)
	}

	// A failure's error is kept with its end; the first end stays.
	if err := f.AllGather(a, b, 4, Int32, s); err != nil {
		t.Fatal(err)
	}
	failed := eng.last
	failed.Ended(errors.New("boom"))
	failed.Ended(nil)
	entries := r.Snapshot("").Entries
	if e := entries[len(entries)-1]; e.State != StateFailed || e.Error != "boom" || e.Ended < e.Started || e.Started < e.Queued {
		t.Errorf("failed operation recorded as %+v", e)
	}
}

// Ends from many goroutines at once, some lock-free and some through the
// lock: each operation ends once, with the first end's outcome.
func TestConcurrentEndsEndEachOperationOnce(t *testing.T) {
	f, eng, s, a, b := flightFront(t)
	const n = 200
	flights := make([]Flight, n)
	for i := range flights {
		if err := f.AllGather(a, b, 4, Int32, s); err != nil {
			t.Fatal(err)
		}
		flights[i] = eng.last
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i, fl := range flights {
				if (i+g)%2 == 0 {
					fl.Ended(nil)
				} else {
					fl.Ended(fmt.Errorf("op %d", i))
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	for _, e := range f.Recorder().Snapshot("").Entries {
		if e.State != StateDone && e.State != StateFailed {
			t.Fatalf("seq %d: %s after every goroutine ended it", e.Seq, e.State)
		}
		if e.State == StateFailed && e.Error != fmt.Sprintf("op %d", e.Seq-1) {
			t.Fatalf("seq %d failed with %q", e.Seq, e.Error)
		}
		if e.Ended < e.Started || e.Started < e.Queued {
			t.Fatalf("seq %d: queued %d started %d ended %d", e.Seq, e.Queued, e.Started, e.Ended)
		}
	}
}

// A record rewritten at once is said once: a local group's ranks that time
// out each write every rank's records a moment apart, and the drill printed
// every path twice. Rewritten later (a second signal), it is said again; an
// error is said each time.
func TestARecordRewrittenAtOnceIsSaidOnce(t *testing.T) {
	r := reportedPaths{said: map[string]time.Time{}}
	var out strings.Builder
	t0 := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)
	r.say(&out, t0, []string{"d/a.rank0.json", "d/a.rank1.json"}, nil)
	r.say(&out, t0.Add(10*time.Millisecond), []string{"d/a.rank0.json", "d/a.rank1.json", "d/b.rank0.json"}, errors.New("d/c: disk full"))
	r.say(&out, t0.Add(20*time.Millisecond), nil, errors.New("d/c: disk full"))
	r.say(&out, t0.Add(sayAgainAfter), []string{"d/a.rank0.json", "d/b.rank0.json"}, nil)
	want := "gpucomm: flight record written to d/a.rank0.json\n" +
		"gpucomm: flight record written to d/a.rank1.json\n" +
		"gpucomm: flight record written to d/b.rank0.json\n" +
		"gpucomm: d/c: disk full\n" +
		"gpucomm: d/c: disk full\n" +
		"gpucomm: flight record written to d/a.rank0.json\n"
	if out.String() != want {
		t.Errorf("said\n%s\nwant\n%s", out.String(), want)
	}
}
