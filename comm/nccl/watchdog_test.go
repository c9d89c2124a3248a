package nccl

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
)

// The watchdog's rules, on a clock and points of progress the test moves.

type point struct {
	reached bool
	err     error
}

func (p *point) Done() (bool, error) { return p.reached, p.err }

func healthy() error { return nil }

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func TestWatchdogTimesAnOperationFromItsStart(t *testing.T) {
	w := newWatchdog(10*time.Second, nil)
	start, end := &point{}, &point{}
	released := 0
	w.track(&pendingOp{what: "AllReduce(count=4)", start: start, end: end, release: func() { released++ }})

	// Behind earlier work on its stream, the operation's clock has not started.
	if err := w.check(t0.Add(time.Hour), healthy); err != nil {
		t.Fatalf("an hour behind earlier work: %v; want no failure", err)
	}
	start.reached = true
	if err := w.check(t0.Add(2*time.Hour), healthy); err != nil {
		t.Fatalf("just started: %v", err)
	}
	if err := w.check(t0.Add(2*time.Hour+10*time.Second), healthy); err != nil {
		t.Fatalf("exactly the timeout after its start: %v; want no failure yet", err)
	}
	err := w.check(t0.Add(2*time.Hour+10*time.Second+time.Nanosecond), healthy)
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "AllReduce(count=4) did not finish within 10s") {
		t.Fatalf("past the timeout: %v; want ErrTimeout naming the operation", err)
	}
	if released != 0 || len(w.pending) != 1 {
		t.Errorf("the late operation was released (%d) or forgotten (%d left)", released, len(w.pending))
	}
}

func TestWatchdogReleasesFinishedOperationsInAnyOrder(t *testing.T) {
	w := newWatchdog(time.Second, nil)
	released := map[string]bool{}
	ends := map[string]*point{}
	for _, name := range []string{"a", "b", "c"} {
		ends[name] = &point{}
		w.track(&pendingOp{what: name, start: &point{reached: true}, end: ends[name], release: func() { released[name] = true }})
	}
	ends["b"].reached = true // on another stream, b may finish first
	if err := w.check(t0, healthy); err != nil {
		t.Fatal(err)
	}
	if !released["b"] || released["a"] || released["c"] || len(w.pending) != 2 || w.pending[0].what != "a" || w.pending[1].what != "c" {
		t.Errorf("released %v, watching %d; want only b released, a and c still watched in order", released, len(w.pending))
	}
	ends["a"].reached, ends["c"].reached = true, true
	if err := w.check(t0.Add(500*time.Millisecond), healthy); err != nil || len(w.pending) != 0 || len(released) != 3 {
		t.Errorf("after all finished: %v, %d watched, %v released", err, len(w.pending), released)
	}
}

func TestWatchdogWithoutTimeoutNeverExpires(t *testing.T) {
	w := newWatchdog(0, nil)
	w.track(&pendingOp{what: "x", start: &point{reached: true}, end: &point{}})
	w.inCall.enter(&callMark{what: nameClose})
	if err := w.check(t0, healthy); err != nil {
		t.Errorf("no timeout: %v", err)
	}
	if err := w.check(t0.Add(1000*time.Hour), healthy); err != nil {
		t.Errorf("no timeout: %v", err)
	}
	if w.interval != 100*time.Millisecond || w.grace() != time.Second {
		t.Errorf("interval %v grace %v; want 100ms and 1s", w.interval, w.grace())
	}
}

func TestWatchdogSeesAStuckNCCLCall(t *testing.T) {
	w := newWatchdog(2*time.Second, nil)
	w.inCall.enter(&callMark{what: nameSplit})
	// The watchdog times a call from the first look that finds it inside.
	if err := w.check(t0, healthy); err != nil {
		t.Fatalf("first seen: %v", err)
	}
	if err := w.check(t0.Add(2*time.Second), healthy); err != nil {
		t.Fatalf("at the timeout: %v", err)
	}
	err := w.check(t0.Add(3*time.Second), healthy)
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "Split: the NCCL call has not returned after 2s") {
		t.Errorf("past it: %v", err)
	}
	if w.grace() != 2*time.Second {
		t.Errorf("grace %v; want the timeout", w.grace())
	}
}

func TestWatchdogReportsAsyncErrorsFirst(t *testing.T) {
	w := newWatchdog(time.Second, nil)
	w.track(&pendingOp{what: "x", end: &point{err: errors.New("event query failed")}})
	peer := errors.New("remote process exited")
	err := w.check(t0, func() error { return peer })
	if !errors.Is(err, peer) || !strings.Contains(err.Error(), "NCCL reported an asynchronous error") {
		t.Errorf("%v; want the asynchronous error", err)
	}
	if err := w.check(t0, healthy); err == nil || !strings.Contains(err.Error(), "x: event query failed") {
		t.Errorf("%v; want the failing operation's error", err)
	}
}

func TestWatchdogPollsAnEighthOfTheTimeout(t *testing.T) {
	for timeout, want := range map[time.Duration]time.Duration{
		time.Second:            100 * time.Millisecond, // an eighth is 125ms: capped
		400 * time.Millisecond: 50 * time.Millisecond,
		time.Millisecond:       time.Millisecond, // never below 1ms
		time.Hour:              100 * time.Millisecond,
	} {
		if got := newWatchdog(timeout, nil).interval; got != want {
			t.Errorf("timeout %v: interval %v, want %v", timeout, got, want)
		}
	}
}

// pendingOp.poll is also what a nil-stream call waits with.
func TestPollStartsTheClockWithoutAStartPoint(t *testing.T) {
	p := &pendingOp{what: "x", end: &point{}}
	if done, err := p.poll(t0, time.Second); done || err != nil {
		t.Fatalf("first poll: %v %v", done, err)
	}
	if _, err := p.poll(t0.Add(2*time.Second), time.Second); !errors.Is(err, errExpired) {
		t.Errorf("two seconds on: %v; want errExpired", err)
	}
	if done, err := (&pendingOp{end: &point{reached: true}}).poll(t0, time.Nanosecond); !done || err != nil {
		t.Errorf("finished: %v %v", done, err)
	}
}

// A call that returned, and the next that entered NCCL, each get their own
// clock: two calls shorter than the timeout are never one stuck call.
func TestWatchdogTimesEachNCCLCallAlone(t *testing.T) {
	w := newWatchdog(2*time.Second, nil)
	first := callMark{sig: signature{op: driver.OpAllReduce, count: 16, dt: driver.Float32, rop: driver.Sum}}
	w.inCall.enter(&first)
	if err := w.check(t0, healthy); err != nil {
		t.Fatalf("first call, first seen: %v", err)
	}
	w.inCall.leave()
	if err := w.check(t0.Add(time.Second), healthy); err != nil {
		t.Fatalf("between calls: %v", err)
	}
	second := callMark{sig: signature{op: driver.OpBroadcast, count: 3, dt: driver.Int64, root: 1}}
	w.inCall.enter(&second)
	// Three seconds after the first call was seen: the second was first seen now.
	if err := w.check(t0.Add(3*time.Second), healthy); err != nil {
		t.Fatalf("second call, first seen: %v; want its own clock", err)
	}
	if err := w.check(t0.Add(5*time.Second), healthy); err != nil {
		t.Fatalf("second call at the timeout: %v", err)
	}
	err := w.check(t0.Add(5*time.Second+time.Nanosecond), healthy)
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "Broadcast(count=3 dtype=int64 root=1): the NCCL call has not returned after 2s") {
		t.Errorf("second call past the timeout: %v; want ErrTimeout naming it", err)
	}
	w.inCall.leave()
	if err := w.check(t0.Add(time.Hour), healthy); err != nil {
		t.Errorf("after it returned: %v", err)
	}
}

// The mark the watchdog reads back is the call's, whichever of its fields
// changed since the last call, and a mark read across a return is refused.
func TestWatchdogReadsTheMarkOfTheCallInside(t *testing.T) {
	w := newWatchdog(time.Second, nil)
	marks := []callMark{
		{sig: signature{op: driver.OpAllReduce, count: 16, dt: driver.Float32, rop: driver.Sum}},
		{sig: signature{op: driver.OpAllReduce, count: 16, dt: driver.Float32, rop: driver.Sum}}, // the same again
		{sig: signature{op: driver.OpAllReduce, count: 1 << 40, dt: driver.Float32, rop: driver.Sum}},
		{sig: signature{op: driver.OpReduce, count: 1 << 40, dt: driver.Float64, rop: driver.Max, root: 7}},
		{what: nameSplit},
		{sig: signature{op: driver.OpGather, count: 5, dt: driver.Uint8, root: 3}},
		{what: nameClose},
		{sig: signature{op: driver.OpAllGather}},
	}
	for i, m := range marks {
		w.inCall.enter(&m)
		st, _, ok := w.inCall.inside(t0)
		if !ok {
			t.Fatalf("mark %d: no call inside", i)
		}
		got, ok := w.inCall.mark(st)
		if !ok || got != m {
			t.Errorf("mark %d: read %+v (%v); want %+v", i, got, ok, m)
		}
		w.inCall.leave()
		if _, _, ok := w.inCall.inside(t0); ok {
			t.Errorf("mark %d: a call is inside after it returned", i)
		}
		if _, ok := w.inCall.mark(st); ok {
			t.Errorf("mark %d: read back after the call returned", i)
		}
	}
	if got := marks[3].name(); got != "Reduce(count=1099511627776 dtype=float64 op=max root=7)" {
		t.Errorf("name %q", got)
	}
	if got := marks[4].name(); got != "Split" {
		t.Errorf("name %q", got)
	}
	// A GroupP2P's mark carries its number of transfers, as its signature
	// does, through the watchdog's read.
	call := driver.Call{Operation: driver.OpGroupP2P, P2P: make([]driver.P2P, 3)}
	m := markOf(&call)
	w.inCall.enter(&m)
	st, _, _ := w.inCall.inside(t0)
	got, ok := w.inCall.mark(st)
	w.inCall.leave()
	if !ok || got.name() != "GroupP2P(transfers=3)" || got.name() != call.Signature() {
		t.Errorf("GroupP2P's mark read back as %q (%v); want %q", got.name(), ok, call.Signature())
	}
}

// The watchdog reads marks while the caller enters and returns: every mark
// it accepts is one call's, whole (under -race, also that the reads race
// with nothing).
func TestWatchdogReadsMarksWhileCallsComeAndGo(t *testing.T) {
	w := newWatchdog(time.Second, nil)
	const calls = 200000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range calls {
			// Every field says i, so a mark made of two calls' words shows.
			m := callMark{sig: signature{op: driver.Operation(1 + i%12), count: i, dt: driver.DType(1 + i%10), rop: driver.Op(i % 6), root: -i}}
			if i%7 == 0 {
				m = callMark{what: callName(1 + i%2), sig: signature{count: i, root: -i}}
			}
			w.inCall.enter(&m)
			w.inCall.leave()
		}
	}()
	read := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		st, _, ok := w.inCall.inside(t0)
		if !ok {
			continue
		}
		m, ok := w.inCall.mark(st)
		if !ok {
			continue
		}
		read++
		i := m.sig.count
		want := callMark{sig: signature{op: driver.Operation(1 + i%12), count: i, dt: driver.DType(1 + i%10), rop: driver.Op(i % 6), root: -i}}
		if i%7 == 0 {
			want = callMark{what: callName(1 + i%2), sig: signature{count: i, root: -i}}
		}
		if m != want {
			t.Fatalf("read %+v; no call made that mark (call %d's is %+v)", m, i, want)
		}
	}
	t.Logf("%d marks read whole", read)
}

// Once the communicator has failed, the watchdog aborts at once a holder
// of its lock that waits for its stream (no NCCL call under way: the abort
// ends the kernels it waits for), and leaves a holder inside an NCCL call
// its grace (the call may yet return on its own).
func TestWatchdogAbortsAFailedCommunicatorsWaitAtOnce(t *testing.T) {
	for _, tc := range []struct {
		what    callName
		aborted bool
	}{{nameOperation, false}, {nameWaiting, true}} {
		net := newFakeNet()
		cs := mustOpenFake(t, net, 1, comm.Options{}, nil)
		c := cs[0]
		c.dog.stop() // this test plays the watchdog
		<-c.watchdogEnd
		c.mu.Lock() // the holder of the lock, in the call or the wait
		m := callMark{what: tc.what, sig: signature{op: driver.OpAllReduce, count: 4, dt: driver.Float32, rop: driver.Sum}}
		c.dog.inCall.enter(&m)
		c.fail(errors.New("a peer went away in this test"))
		c.watchOnce(t0)
		select {
		case <-c.abortDone:
			if !tc.aborted {
				t.Errorf("%v: aborted at once, within the grace of a call inside NCCL", tc.what)
			}
		default:
			if tc.aborted {
				t.Errorf("%v: not aborted at once", tc.what)
			}
		}
		c.dog.inCall.leave()
		c.mu.Unlock()
		c.Close() // the failure's abort, where the watchdog made none
		net.checkClean(t)
	}
}
