package nodepath

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// A pair of links in one process, on host devices (whose pinned memory is
// shared memory), moves messages through the ring: the header written by
// the sender is accepted by the receiver, and the chunks arrive byte for
// byte, message after message, with the counters in step.
func TestRingMovesMessagesInTurn(t *testing.T) {
	const slotBytes = 1000
	dev := devmem.NewHostDevice()
	st, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	var sendT, recvT Table
	rng := rand.New(rand.NewPCG(3, 9))
	for i, n := range []int{1, slotBytes, 4*slotBytes + 1, 37*slotBytes + 5} {
		s, r := sendT.Take(Key{Peer: 1, Send: true}), recvT.Take(Key{Peer: 0})
		if s.Ticket != uint64(i) || r.Ticket != uint64(i) {
			t.Fatalf("message %d: tickets %d and %d", i, s.Ticket, r.Ticket)
		}
		src := make([]byte, n)
		for j := range src {
			src[j] = byte(rng.Uint32())
		}
		in, _ := dev.Alloc(n)
		out, _ := dev.Alloc(n + 8)
		poison := bytes.Repeat([]byte{0x3c}, n+8)
		if err := errors.Join(devmem.CopyFromHost(in, src, nil), devmem.CopyFromHost(out, poison, nil)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute) // a safety net, not a timing assertion
		if err := errors.Join(s.Link.AwaitTurn(deadline, s.Ticket), r.Link.AwaitTurn(deadline, r.Ticket)); err != nil {
			t.Fatal(err)
		}
		h, err := s.Link.Header(dev, slotBytes, n)
		if err != nil {
			t.Fatal(err)
		}
		room, err := r.Link.HeaderRoom(dev, HdrRoom(64<<10, slotBytes))
		if err != nil {
			t.Fatal(err)
		}
		if err := devmem.CopyN(room, h, HdrLen, nil); err != nil {
			t.Fatal(err)
		}
		got, inStep, err := r.Link.Accept(dev, HdrLen, slotBytes)
		if err != nil || !inStep || got != n {
			t.Fatalf("Accept = %d, %v, %v; want %d", got, inStep, err, n)
		}
		var sendErr error
		var wg sync.WaitGroup
		wg.Go(func() { sendErr = s.Link.SendChunks(deadline, in, n, st, nil) })
		recvErr := r.Link.RecvChunks(deadline, out, false, n, st)
		wg.Wait()
		if err := errors.Join(sendErr, recvErr); err != nil {
			t.Fatal(err)
		}
		s.Link.SendDone()
		back := make([]byte, n+8)
		if err := devmem.CopyToHost(back, out, nil); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back[:n], src) || !bytes.Equal(back[n:], poison[:8]) {
			t.Fatalf("message %d of %d bytes arrived changed, or wrote past its end", i, n)
		}
		owed := sendT.Owed()
		if len(owed) != 1 || owed[0].Peer != 1 || owed[0].Sent != owed[0].Taken.Load() || owed[0].Sent != s.Link.chunks {
			t.Errorf("after message %d: owed %+v, %d chunks", i, owed, s.Link.chunks)
		}
		s.Link.Done(nil)
		r.Link.Done(nil)
		if err := errors.Join(in.Free(), out.Free()); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(recvT.Close(), sendT.Close(), st.Destroy()); err != nil {
		t.Fatal(err)
	}
	if s := dev.Stats(); s != (devmem.Stats{}) {
		t.Errorf("after closing: %+v", s)
	}
}

// What is not a header of this ring is refused as a mismatch, and says
// whether the counters stayed in step.
func TestAcceptRefusesWhatIsNotThisRingsHeader(t *testing.T) {
	dev := devmem.NewHostDevice()
	var tb Table
	l := tb.Link(Key{Peer: 2})
	room, err := l.HeaderRoom(dev, 4096)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := room.Bytes()
	for i := range b {
		b[i] = byte(i)
	}
	if _, inStep, err := l.Accept(dev, 100, 1000); !errors.Is(err, errs.ErrMismatch) || !inStep {
		t.Errorf("a short message: %v, in step %v; want a mismatch in step", err, inStep)
	}
	if _, inStep, err := l.Accept(dev, 4096, 1000); !errors.Is(err, errs.ErrMismatch) || inStep {
		t.Errorf("the first chunk of a long message: %v, in step %v; want a mismatch out of step", err, inStep)
	}
	var sender Table
	s := sender.Link(Key{Peer: 0, Send: true})
	s.chunks = 5 // the sender thinks 5 chunks went before
	h, err := s.Header(dev, 1000, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := devmem.CopyN(room, h, HdrLen, nil); err != nil {
		t.Fatal(err)
	}
	if _, inStep, err := l.Accept(dev, HdrLen, 1000); !errors.Is(err, errs.ErrMismatch) || inStep {
		t.Errorf("a header out of step: %v, in step %v; want a mismatch out of step", err, inStep)
	}
	if _, _, err := l.Accept(dev, HdrLen, 2000); !errors.Is(err, errs.ErrMismatch) {
		t.Errorf("slots of another size: %v; want a mismatch", err)
	}
	if err := errors.Join(tb.Close(), sender.Close()); err != nil {
		t.Fatal(err)
	}
}

// Turns run in ticket order; an abandoned turn breaks the link for later
// ones; a deadline bounds the wait.
func TestTurnsAbandonAndDeadline(t *testing.T) {
	var tb Table
	a, b := tb.Take(Key{Peer: 1, Send: true}), tb.Take(Key{Peer: 1, Send: true})
	if err := b.Link.AwaitTurn(time.Now().Add(20*time.Millisecond), b.Ticket); !errors.Is(err, errs.ErrTimeout) {
		t.Errorf("turn 1 before turn 0 is done: %v, want ErrTimeout", err)
	}
	Abandon([]Turn{a, {}}, errors.New("never queued"))
	if err := b.Link.AwaitTurn(time.Time{}, b.Ticket); err == nil {
		t.Errorf("after an abandoned turn the link still serves")
	}
}
