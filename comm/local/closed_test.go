package local_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

// Close stops this rank's calls that wait for another rank (they return
// ErrClosed) and returns without waiting for any other rank; nothing of
// this rank writes after it, and a collective it joined still ends, right,
// for the others.
func TestCloseStopsTheRanksWaitingCalls(t *testing.T) {
	cs := newGroup(t, 2)
	s := newStream(t, cs[0])
	x := float32s(t, cs[0], 1, 2, 3)
	if err := comm.AllReduce(cs[0], x, x, comm.Sum, s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // it waits for rank 1 by now
	closeWithin(t, cs[0], "with an AllReduce waiting for rank 1")
	if err := s.Synchronize(); !errors.Is(err, comm.ErrClosed) || !strings.Contains(fmt.Sprint(err), "closed its communicator while the call waited") {
		t.Errorf("the AllReduce Close stopped: %v; want ErrClosed saying so", err)
	}
	y := float32s(t, cs[1], 10, 20, 30)
	if err := comm.AllReduce(cs[1], y, y, comm.Sum, nil); err != nil {
		t.Fatalf("rank 1's AllReduce, which rank 0 joined before its Close: %v", err)
	}
	if got, err := y.ToHost(nil); err != nil || got[0] != 11 || got[1] != 22 || got[2] != 33 {
		t.Errorf("rank 1's AllReduce: %v (%v); want [11 22 33]", got, err)
	}
	if got, err := x.ToHost(nil); err != nil || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("rank 0's buffer after its Close: %v (%v); want it as it was, [1 2 3]", got, err)
	}
}

// Two ranks each with a receive from the other queued both close: neither
// Close waits for the other (both hung when Close waited for queued calls).
// And a Close from a host function of the rank's own stream, with a call
// of that rank queued behind it, returns; the call then fails ErrClosed.
func TestCloseNeverWaitsForAnotherRank(t *testing.T) {
	cs := newGroup(t, 2)
	streams := make([]*devmem.Stream, 2)
	for r, c := range cs {
		s := newStream(t, c)
		streams[r] = s
		if err := comm.Recv(c, float32s(t, c, 0, 0), 1-r, s); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	errs := each(cs, []int{0, 1}, func(c comm.Communicator) error { closeWithin(t, c, "with a receive queued"); return nil })
	for r, s := range streams {
		if err := s.Synchronize(); !errors.Is(err, comm.ErrClosed) {
			t.Errorf("rank %d's receive after both closed: %v (%v); want ErrClosed", r, err, errs[r])
		}
	}

	cs = newGroup(t, 2)
	s := newStream(t, cs[0])
	closed := make(chan error, 1)
	gate := make(chan struct{})
	if err := s.HostFunc(func() error { <-gate; closed <- cs[0].Close(); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].Barrier(s); err != nil { // queued behind the Close
		t.Fatal(err)
	}
	close(gate)
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close from a host function: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close from a host function of its own stream, a Barrier queued behind it, had not returned after 10 s")
	}
	if err := s.Synchronize(); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("the Barrier queued behind the Close: %v; want ErrClosed", err)
	}
}

// A rank whose Close stopped its own queued receive is gone for the
// others: one waiting for it in a collective fails with ErrPeerClosed.
func TestARankThatClosedWithAQueuedReceiveIsGoneForTheOthers(t *testing.T) {
	cs := newGroup(t, 2)
	s := newStream(t, cs[0])
	if err := comm.Recv(cs[0], float32s(t, cs[0], 0), 1, s); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		y := float32s(t, cs[1], 1)
		waiting <- comm.AllReduce(cs[1], y, y, comm.Sum, nil)
	}()
	time.Sleep(20 * time.Millisecond)
	closeWithin(t, cs[0], "with a receive queued")
	select {
	case err := <-waiting:
		if !errors.Is(err, local.ErrPeerClosed) || !strings.Contains(fmt.Sprint(err), "without joining it: 0") {
			t.Errorf("rank 1's AllReduce: %v; want ErrPeerClosed naming rank 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rank 1 still waits 10 s after rank 0 closed")
	}
}

// closeWithin closes c, failing t if Close takes more than 10 s.
func closeWithin(t *testing.T, c comm.Communicator, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("rank %d: Close %s: %v", c.Rank(), what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("rank %d: Close %s had not returned after 10 s", c.Rank(), what)
	}
}

// A rank waiting, with no timeout, for a rank that closed its communicator
// without joining the collective or sending the message fails with
// ErrClosed naming it, where it waited for ever; a message sent before the
// Close is still received.
func TestWaitingForARankThatClosedFailsNamingIt(t *testing.T) {
	cs := newGroup(t, 3)
	const poison = float32(-3)
	early := float32s(t, cs[2], 5, 6)
	if err := comm.Send(cs[2], early, 0, nil); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 2)
	x := float32s(t, cs[0], 1, 2)
	y := float32s(t, cs[1], 3, 4)
	go func() { waiting <- comm.AllReduce(cs[0], x, x, comm.Sum, nil) }()
	go func() { waiting <- comm.AllReduce(cs[1], y, y, comm.Sum, nil) }()
	time.Sleep(20 * time.Millisecond)
	if err := cs[2].Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-waiting:
			if !errors.Is(err, comm.ErrClosed) || !strings.Contains(fmt.Sprint(err), "ranks that closed their communicators without joining it: 2") {
				t.Errorf("AllReduce rank 2 never joined: %v; want ErrClosed naming rank 2", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a rank still waits 10 s after rank 2 closed")
		}
	}
	got := float32s(t, cs[0], poison, poison)
	if err := comm.Recv(cs[0], got, 2, nil); err != nil {
		t.Errorf("the message rank 2 sent before its Close: %v", err)
	} else if v, _ := got.ToHost(nil); v[0] != 5 || v[1] != 6 {
		t.Errorf("the message rank 2 sent before its Close arrived as %v", v)
	}
	err := comm.Recv(cs[0], got, 2, nil)
	wantError(t, err, comm.ErrClosed, 0, "rank 2 closed its communicator without sending it")
	if v, _ := got.ToHost(nil); v[0] != 5 || v[1] != 6 {
		t.Errorf("the receive that failed wrote %v", v)
	}
}

// newStream makes a stream on c's device, destroyed when t ends.
func newStream(t *testing.T, c comm.Communicator) *devmem.Stream {
	t.Helper()
	s, err := c.Device().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}
