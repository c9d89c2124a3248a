package nccl

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
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
	w.inCall.Store(&callMark{what: "y", since: t0})
	if err := w.check(t0.Add(1000*time.Hour), healthy); err != nil {
		t.Errorf("no timeout: %v", err)
	}
	if w.interval != 100*time.Millisecond || w.grace() != time.Second {
		t.Errorf("interval %v grace %v; want 100ms and 1s", w.interval, w.grace())
	}
}

func TestWatchdogSeesAStuckNCCLCall(t *testing.T) {
	w := newWatchdog(2*time.Second, nil)
	w.inCall.Store(&callMark{what: "Split", since: t0})
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
