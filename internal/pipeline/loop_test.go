package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// loop is an in-memory transport from one pipe to another: a send request
// hands a copy of its slot's bytes over a channel and is done at once; a
// receive request is done when Wait has taken the next message into its
// slot. It is a second transport beside MPI, so that the pipeline is
// tested moving data between two of its own, in both roles.
type loop struct {
	msgs chan []byte

	mu        sync.Mutex
	cancelled int // receives a failure cancelled
	posted    int // receives started
}

type loopReq struct {
	recv bool
	into []byte // a receive's room
	got  int    // bytes a receive got
	done bool
}

func (l *loop) send(s *Slot, _, n int) ([]*loopReq, error) {
	l.msgs <- bytes.Clone(s.Bytes(n))
	return []*loopReq{{done: true}}, nil
}

func (l *loop) recv(s *Slot, _, n int) ([]*loopReq, error) {
	l.mu.Lock()
	l.posted++
	l.mu.Unlock()
	return []*loopReq{{recv: true, into: s.Bytes(s.Buf.Len())}}, nil
}

func (l *loop) Wait(reqs []*loopReq) error {
	for _, r := range reqs {
		if r.recv && !r.done {
			m := <-l.msgs
			r.got = copy(r.into, m)
			r.done = true
		}
	}
	return nil
}

func (l *loop) Abandon(reqs [][]*loopReq, cancel bool, _ error) bool {
	clear := true
	for _, rs := range reqs {
		for _, r := range rs {
			switch {
			case r.done:
			case cancel:
				l.mu.Lock()
				l.cancelled++
				l.mu.Unlock()
				r.done = true
			default:
				clear = false
			}
		}
	}
	return clear
}

func (l *loop) Label() string { return "loop" }

// transfer runs a sender pipe of sent bytes and a receiver pipe of want
// bytes over one loop, at once, each with its own engine, and returns the sender's
// bytes, what the receiver's device buffer holds, the loop, and the receiver's error.
func transfer(t *testing.T, chunk, sent, want int) ([]byte, []byte, *loop, error) {
	t.Helper()
	es, er := bare(t, chunk), bare(t, chunk)
	src := randomBytes(uint64(sent)+1, sent)
	in, err := es.Pool.dev.Alloc(max(sent, 1))
	if err != nil {
		t.Fatal(err)
	}
	out, err := er.Pool.dev.Alloc(max(want, 1))
	if err != nil {
		t.Fatal(err)
	}
	poison := bytes.Repeat([]byte{0xc3}, max(want, 1))
	if err := errors.Join(devmem.CopyFromHost(in, src, nil), devmem.CopyFromHost(out, poison, nil)); err != nil {
		t.Fatal(err)
	}
	l := &loop{msgs: make(chan []byte, 64)}
	cut := Policy{Chunk: chunk}.Cut(1)
	var sendErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		sendErr = Run(es, l, Pipe[*loopReq]{Bytes: sent, Cut: cut, AtLeastOne: true, In: CopyIn(in), Start: l.send})
	})
	recvErr := Run(er, l, Pipe[*loopReq]{Bytes: want, Cut: cut, AtLeastOne: true, Receives: true, Start: l.recv,
		Check: func(s *Slot, off, n int, reqs []*loopReq) error {
			if got := reqs[0].got; got != n {
				// Stage 1 posts up to Slots receives ahead: let it, so
				// that a receive is surely pending when this fails.
				// (Every test's short chunk is one of its first Slots.)
				for posted := 0; posted < min(Slots, len(cut.Spans(want, true))); runtime.Gosched() {
					l.mu.Lock()
					posted = l.posted
					l.mu.Unlock()
				}
				return fmt.Errorf("bytes [%d, %d) came as %d: %w", off, off+n, got, errs.ErrMismatch)
			}
			return nil
		},
		Out: CopyOut(out, 0)})
	wg.Wait()
	if sendErr != nil {
		t.Fatalf("sender: %v", sendErr)
	}
	got := make([]byte, max(want, 1))
	if err := devmem.CopyToHost(got, out, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*Engine{es, er} {
		if e.Pool.Lent() != 0 {
			t.Errorf("%d slots lent after the transfer", e.Pool.Lent())
		}
	}
	if err := errors.Join(in.Free(), out.Free()); err != nil {
		t.Fatal(err)
	}
	es.closeBare(t)
	er.closeBare(t)
	return src, got, l, recvErr
}

// Two pipes over the loopback move every byte, in growing chunks, from one
// device buffer to another, for messages of no chunk, one, and many.
func TestLoopbackMovesEveryByteBetweenTwoPipes(t *testing.T) {
	const chunk = 256 // chunks of 256, 512, ... up to the policy's cap
	for _, n := range []int{0, 1, chunk, chunk + 1, 3*chunk + 7, 100*chunk + 13} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src, got, l, err := transfer(t, chunk, n, n)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:n], src) {
				t.Errorf("the receiver's buffer differs from the sender's")
			}
			if n == 0 && got[0] != 0xc3 {
				t.Errorf("an empty message wrote the receiver's buffer")
			}
			if l.cancelled != 0 || len(l.msgs) != 0 {
				t.Errorf("%d receives cancelled, %d messages left over", l.cancelled, len(l.msgs))
			}
		})
	}
}

// A sender shorter than the receiver expects stops the receiver's pipeline
// at the short chunk with the Check's error; the receives it had posted
// ahead are cancelled (the transport is told they are receives) and every
// slot comes back.
func TestLoopbackShortSenderCancelsTheReceivesPostedAhead(t *testing.T) {
	const chunk = 256
	sent, want := 3*chunk+5, 40*chunk
	_, _, l, err := transfer(t, chunk, sent, want)
	if !errors.Is(err, errs.ErrMismatch) {
		t.Fatalf("receive = %v, want ErrMismatch", err)
	}
	if l.cancelled == 0 {
		t.Errorf("no receive posted ahead was cancelled")
	}
}
