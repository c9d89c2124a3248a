package local_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
)

// Close waits for this rank's operations queued on a stream: the AllReduce
// the others join later has written its result before Close returns.
func TestCloseWaitsForTheRanksQueuedOperations(t *testing.T) {
	cs := newGroup(t, 2)
	s, err := cs[0].Device().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	x := float32s(t, cs[0], 1, 2, 3)
	if err := comm.AllReduce(cs[0], x, x, comm.Sum, s); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- cs[0].Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while its AllReduce still waited for rank 1", err)
	case <-time.After(50 * time.Millisecond):
	}
	y := float32s(t, cs[1], 10, 20, 30)
	if err := comm.AllReduce(cs[1], y, y, comm.Sum, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close had not returned 10 s after its AllReduce could end")
	}
	got, err := x.ToHost(nil) // the stream's work is done: Close waited for it
	if err != nil || got[0] != 11 || got[1] != 22 || got[2] != 33 {
		t.Errorf("rank 0's AllReduce after Close: %v (%v); want [11 22 33]", got, err)
	}
	if err := s.Synchronize(); err != nil {
		t.Errorf("the stream after Close: %v", err)
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
