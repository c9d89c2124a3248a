package local_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
)

// A rank that aborts the job releases the ranks waiting for it, with no
// timeout: a collective on no stream, one on a stream (at Synchronize), a
// receive; every later call of every rank fails the same way, in a group
// Split off before the abort too; the first reason stays; Close works.
func TestAbortReleasesTheRanksWaitingForTheAbortingOne(t *testing.T) {
	cs := newGroup(t, 4) // no timeout: only the abort can end the waits
	sub, err := splitAll(cs)
	if err != nil {
		t.Fatal(err)
	}
	why := errors.New("rank 1 cannot go on: its input file is gone")
	const poison = float32(-7.5)
	recvBuf := float32s(t, cs[3], poison, poison)
	s := newStream(t, cs[2])
	y := float32s(t, cs[2], 3, 4)
	if err := comm.AllReduce(cs[2], y, y, comm.Sum, s); err != nil {
		t.Fatalf("queuing an AllReduce on a stream: %v", err)
	}
	waiting := make(chan error, 3)
	go func() {
		x := float32s(t, cs[0], 1, 2)
		waiting <- comm.AllReduce(cs[0], x, x, comm.Sum, nil)
	}()
	go func() { waiting <- comm.Recv(cs[3], recvBuf, 1, nil) }()
	go func() { waiting <- s.Synchronize() }()
	time.Sleep(20 * time.Millisecond) // let them wait (an abort before works as well)

	if !comm.Abort(cs[1], why) {
		t.Fatal("comm.Abort: the local backend's communicator has no Abort")
	}
	cs[1].(comm.Aborter).Abort(errors.New("a second reason, never seen"))
	deadline := time.After(10 * time.Second)
	for range 3 {
		select {
		case err := <-waiting:
			wantAborted(t, err, why)
		case <-deadline:
			t.Fatal("a rank still waits 10 s after rank 1 aborted the job")
		}
	}
	got, err := recvBuf.ToHost(nil)
	if err != nil || got[0] != poison || got[1] != poison {
		t.Errorf("the receive that the abort ended wrote %v (%v); want it untouched", got, err)
	}
	// Every later call fails alike, on each rank and in the group split off.
	for r, c := range cs {
		x := float32s(t, c, 1)
		wantError(t, comm.AllReduce(c, x, x, comm.Sum, nil), comm.ErrAborted, r, "rank 1 of 4 aborted the job")
		wantError(t, c.Barrier(nil), comm.ErrAborted, r)
		if _, err := c.Split(0, 0); !errors.Is(err, comm.ErrAborted) {
			t.Errorf("rank %d: Split after the abort: %v; want ErrAborted", r, err)
		}
	}
	for r, c := range sub {
		wantAborted(t, c.Barrier(nil), why)
		if err := c.Close(); err != nil {
			t.Errorf("sub-group rank %d: Close after the abort: %v", r, err)
		}
	}
	for r, c := range cs {
		if err := c.Close(); err != nil {
			t.Errorf("rank %d: Close after the abort: %v", r, err)
		}
	}
}

// An abort from a group Split off reaches the group it came from.
func TestAbortInASplitGroupReachesTheParent(t *testing.T) {
	cs := newGroup(t, 2)
	sub, err := splitAll(cs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range sub {
			c.Close()
		}
	}()
	sub[0].(comm.Aborter).Abort(nil)
	x := float32s(t, cs[1], 1)
	err = comm.AllReduce(cs[1], x, x, comm.Max, nil)
	wantError(t, err, comm.ErrAborted, 1, "rank 0 of 2 aborted the job: no reason given")
}

// wantAborted checks an error of a rank the abort released.
func wantAborted(t *testing.T, err error, why error) {
	t.Helper()
	var ce *comm.Error
	if !errors.Is(err, comm.ErrAborted) || !errors.Is(err, why) || !errors.As(err, &ce) || ce.Backend != local.Name {
		t.Errorf("got %v; want a local *comm.Error wrapping ErrAborted and the reason", err)
		return
	}
	if want := "rank 1 of 4 aborted the job: " + why.Error(); !strings.Contains(err.Error(), want) {
		t.Errorf("%q does not say %q", err, want)
	}
}

// splitAll splits every rank of cs into one group of the same ranks.
func splitAll(cs []comm.Communicator) ([]comm.Communicator, error) {
	sub := make([]comm.Communicator, len(cs))
	errs := each(cs, seq(len(cs)), func(c comm.Communicator) (err error) {
		sub[c.Rank()], err = c.Split(0, c.Rank())
		return err
	})
	return sub, errors.Join(errs...)
}

func seq(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}
