package mpi_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// TestRankIPCWindow: a GroupP2P of many messages to the next rank and from
// the previous one (the IPC path moves them together on one goroutine,
// ipcWindow), sends and receives interleaved, each of its own size; among
// them one below the path's size (through MPI) and one send from pinned
// memory (the pipeline, announced by its control message). Every message
// arrives whole, element by element, into poisoned buffers; the path's
// counters say which went how, and that the window moved them together; the
// same window again on a stream, held back by a host function, reads its
// sends only once the stream has written them; a peer that receives the
// same messages one by one (rank 0, from rank 1's window) matches them as
// before; and a window's receive of another count is ErrMismatch, its
// neighbour in the window whole.
func TestRankIPCWindow(t *testing.T) {
	mpitest.RankOnly(t)
	const w = 24
	c, mc, next, prev := openIPCRing(t)
	dev, r := c.Device(), c.Rank()
	if !mc.IPCAll() { // agreed by every rank: all skip, or none
		t.Skipf("not every pair of ranks reaches through the IPC path (%v on rank %d)", mc.IPCPeers(), r)
	}
	const small, pinnedAt = 5, 7 // message 5 is below ipcRingNodeMin; message 7 is sent from pinned memory
	size := func(k int) int {
		if k == small {
			return 100 // 800 bytes
		}
		return 130 + 97*k // from 1040 bytes, some a chunk or more
	}
	seed := func(from, k int) int { return from*10000 + k*100 }
	sends := make([]devmem.Slice[float64], w)
	recvs := make([]devmem.Slice[float64], w)
	for k := range w {
		if k == pinnedAt {
			pb, err := dev.AllocPinned(size(k) * 8)
			if err != nil {
				t.Fatal(err)
			}
			sends[k] = devmem.SliceOf[float64](pb)
			if err := sends[k].CopyFrom(mpitest.Values(seed(r, k), size(k)), nil); err != nil {
				t.Fatal(err)
			}
		} else {
			sends[k] = mpitest.Upload(t, dev, mpitest.Values(seed(r, k), size(k)))
		}
		recvs[k] = mpitest.Poisoned(t, dev, size(k))
	}
	window := func() []comm.P2P {
		var ps []comm.P2P
		for k := range w {
			ps = append(ps, comm.SendSlice(next, sends[k]), comm.RecvSlice(prev, recvs[k]))
		}
		return ps
	}
	expect := func(what string) {
		t.Helper()
		for k := range w {
			mpitest.Expect(t, fmt.Sprintf("%s: message %d of %d float64s from rank %d", what, k, size(k), prev), recvs[k], mpitest.Values(seed(prev, k), size(k)))
		}
	}
	poison := func() {
		t.Helper()
		for k := range w {
			if err := recvs[k].CopyFrom(poisons(size(k)), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	sent0, got0, staged0 := mc.IPCMessages()
	windows := mc.IPCWindows()
	moved := func(what string, n int64) {
		t.Helper()
		if got := mc.IPCWindows() - windows; got != n {
			t.Fatalf("%s: %d windows moved together, want %d", what, got, n)
		}
		windows += n
	}
	if err := c.GroupP2P(window(), nil); err != nil {
		t.Fatalf("window: %v", err)
	}
	expect("window")
	moved("window", 1)
	// The path: every message but the small one; the pinned send and its
	// receive fall back to the pipeline (a send so announced still counts
	// as sent through the path, its receive not as received).
	sent, got, staged := mc.IPCMessages()
	if sent-sent0 != w-1 || got-got0 != w-2 || staged-staged0 != 2 {
		t.Fatalf("window: %d sent, %d received, %d staged through the IPC path; want %d, %d, 2", sent-sent0, got-got0, staged-staged0, w-1, w-2)
	}

	// Stream-ordered: the sends hold poison until the stream, held by a
	// host function, writes their values ahead of the window; after the
	// window the same stream poisons them again.
	poison()
	over := mpitest.Poisoned(t, dev, size(w-1))
	goods := make([]devmem.Slice[float64], w)
	for k := range w {
		goods[k] = mpitest.Upload(t, dev, mpitest.Values(seed(r, k), size(k)))
		if err := devmem.CopyN(sends[k].Buffer(), over.Buffer(), size(k)*8, nil); err != nil {
			t.Fatal(err)
		}
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	if err := s.HostFunc(func() error { <-gate; return nil }); err != nil {
		t.Fatal(err)
	}
	for k := range w {
		if err := devmem.CopyN(sends[k].Buffer(), goods[k].Buffer(), size(k)*8, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.GroupP2P(window(), s); err != nil {
		t.Fatal(err)
	}
	for k := range w {
		if err := devmem.CopyN(sends[k].Buffer(), over.Buffer(), size(k)*8, s); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	expect("stream-ordered window")
	moved("stream-ordered window", 1)
	for k := range w {
		if err := devmem.CopyN(sends[k].Buffer(), goods[k].Buffer(), size(k)*8, nil); err != nil {
			t.Fatal(err)
		}
	}

	// Rank 1 sends a window to rank 0, which receives the messages one by
	// one, each its own call.
	poison()
	switch r {
	case 0:
		for k := range w {
			if err := c.Recv(recvs[k].Buffer(), size(k), comm.Float64, 1, nil); err != nil {
				t.Fatalf("one by one: message %d: %v", k, err)
			}
		}
		for k := range w {
			mpitest.Expect(t, fmt.Sprintf("one by one: message %d from rank 1", k), recvs[k], mpitest.Values(seed(1, k), size(k)))
		}
	case 1:
		var ps []comm.P2P
		for k := range w {
			ps = append(ps, comm.SendSlice(0, sends[k]))
		}
		if err := c.GroupP2P(ps, nil); err != nil {
			t.Fatalf("window to rank 0: %v", err)
		}
		moved("window to rank 0", 1)
	}
	// Counts that differ inside a window: rank 0 sends 3000 and 2500
	// float64s in one GroupP2P, rank 1 expects 3500 and 2500 in one. The
	// first receive is ErrMismatch with its buffer untouched (its message
	// answered aside, ackMismatch), the second arrives whole, rank 0's
	// window completes, and the communicator goes on.
	if r < 2 {
		a, b := mpitest.Upload(t, dev, mpitest.Values(21, 3000)), mpitest.Upload(t, dev, mpitest.Values(22, 2500))
		ra, rb := mpitest.Poisoned(t, dev, 3500), mpitest.Poisoned(t, dev, 2500)
		if r == 0 {
			if err := c.GroupP2P([]comm.P2P{comm.SendSlice(1, a), comm.SendSlice(1, b)}, nil); err != nil {
				t.Errorf("window whose first send the receiver expects with another count: %v", err)
			}
		} else {
			err := c.GroupP2P([]comm.P2P{comm.RecvSlice(0, ra), comm.RecvSlice(0, rb)}, nil)
			if !errors.Is(err, comm.ErrMismatch) {
				t.Errorf("window receiving 3500 float64s where 3000 were sent: %v, want ErrMismatch", err)
			}
			mpitest.Expect(t, "the refused receive of a window", ra, poisons(3500))
			mpitest.Expect(t, "the receive beside a refused one in a window", rb, mpitest.Values(22, 2500))
		}
		moved("window with counts that differ", 1)
		if err := errors.Join(a.Free(), b.Free(), ra.Free(), rb.Free()); err != nil {
			t.Error(err)
		}
	}
	if err := c.Barrier(nil); err != nil {
		t.Fatalf("barrier after a window with counts that differ: %v", err)
	}

	for k := range w {
		if err := errors.Join(sends[k].Free(), recvs[k].Free(), goods[k].Free()); err != nil {
			t.Error(err)
		}
	}
	if err := over.Free(); err != nil {
		t.Error(err)
	}
	if st := mc.IPCCache(); st.InUse != 0 {
		t.Errorf("cache entries still in use: %+v", st)
	}
	if err := errors.Join(s.Destroy(), c.Close()); err != nil {
		t.Fatal(err)
	}
	if st := dev.Stats(); st.Opened != 0 || st.Buffers != 0 || st.Pinned != 0 {
		t.Errorf("left after Close: %+v", st)
	}
}

func poisons(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = mpitest.Poison
	}
	return v
}
