package mpicomm_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// TestIPCOrderedP2PUnderLauncher runs the point-to-point tests of the IPC
// path on streams: on the host device (host-ordered there), and on a GPU
// with the IPC events at their default (off), on and off, 2 and 4 ranks.
func TestIPCOrderedP2PUnderLauncher(t *testing.T) {
	if !mpi.Built() {
		t.Skip("MPI is not built in: -tags mpi or mpich")
	}
	const pattern = "^TestRankIPC(OrderedP2P(Chain|Mixed|Group)|UnknownControlFlags)$"
	mpitest.ExpectPass(t, 2, mpitest.RunRanks(t, 2, pattern, 2*time.Minute, "GPUCOMM_DEVICE=host"))
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		return
	}
	for _, np := range []int{2, 4} {
		for _, v := range []string{"", "on", "off"} {
			mpitest.ExpectPass(t, np, mpitest.RunRanks(t, np, pattern, 3*time.Minute, "GPUCOMM_DEVICE=cuda", mpicomm.IPCEventsEnv+"="+v))
		}
	}
}

// TestRankIPCOrderedP2PChain: ranks in pairs (r, r^1; an odd last rank sits
// out), each on a stream of its own, rounds issued back to back and waited
// for once. The even rank writes its send buffer x on its stream and sends
// it; the odd rank poisons outs[k] on its stream and receives into it. In
// even rounds the odd rank sends it back (the echo), received into the even
// rank's outs[k], and the even rank's stream is held back by large copies
// before it writes x: a receiver's copy that did not wait for the sender's
// stream reads the round before's x. Odd rounds go one way, and the odd
// rank's stream is held back longer (before it poisons outs[k]) than the
// even rank's is before it rewrites x in the next round: a copy that did
// not come after the receiver's earlier work is overwritten by the poison,
// and a sender whose stream did not wait for the receiver's copy rewrites
// x under it. Every output is checked element by element after the one
// Synchronize; with the events on every message counts as ordered on the
// GPU, and no opened buffer is left in use.
func TestRankIPCOrderedP2PChain(t *testing.T) {
	c, peer, ok := pairUp(t)
	if !ok {
		return
	}
	r, dev := c.Rank(), c.Device()
	s := newStream(t, dev)
	const rounds = 10
	pp := newPingPong(t, dev, rounds, peer)
	on, sends0, receives0 := c.IPCOrderedP2P()
	for k := range rounds {
		echo := k%2 == 0
		if r%2 == 0 {
			pp.hold(t, s, 6*b2i(echo))
			if err := devmem.Copy(pp.x.Buffer(), pp.srcs[k].Buffer(), s); err != nil {
				t.Fatal(err)
			}
			if err := comm.Send(c, pp.x, peer, s); err != nil {
				t.Fatalf("round %d: Send: %v", k, err)
			}
			if echo {
				if err := comm.Recv(c, pp.outs[k], peer, s); err != nil {
					t.Fatalf("round %d: Recv: %v", k, err)
				}
			}
		} else {
			pp.hold(t, s, 12*b2i(!echo))
			if err := devmem.Copy(pp.outs[k].Buffer(), pp.poison.Buffer(), s); err != nil {
				t.Fatal(err)
			}
			if err := comm.Recv(c, pp.outs[k], peer, s); err != nil {
				t.Fatalf("round %d: Recv: %v", k, err)
			}
			if echo {
				if err := comm.Send(c, pp.outs[k], peer, s); err != nil {
					t.Fatalf("round %d: Send: %v", k, err)
				}
			}
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for k := range rounds {
		switch {
		case r%2 == 1:
			mpitest.Expect(t, fmt.Sprintf("round %d's message", k), pp.outs[k], pp.want(k))
		case k%2 == 0:
			mpitest.Expect(t, fmt.Sprintf("round %d's echo", k), pp.outs[k], pp.want(k))
		}
	}
	_, sends, receives := c.IPCOrderedP2P()
	wantSends, wantReceives := int64(0), int64(0)
	if on {
		// The even rank sends every round and receives the echoes; the odd
		// rank the other way round.
		wantSends, wantReceives = rounds, rounds/2
		if r%2 == 1 {
			wantSends, wantReceives = rounds/2, rounds
		}
	}
	expectOrdered(t, c, fmt.Sprintf("events on: %v", on), sends-sends0, receives-receives0, wantSends, wantReceives)
}

// TestRankIPCOrderedP2PGroup: ranks in pairs, each round one GroupP2P on
// each rank's stream that sends x to the peer and receives the peer's x
// into outs[k] (a halo exchange's shape, ordered on the GPU as a whole
// with the events on). In even rounds one rank of the pair, in turn, holds
// its stream back before it rewrites x and the other does not, whose
// receive must wait for it; in odd rounds the odd rank's stream is held
// back before it poisons outs[k], longer than the even rank's before it
// rewrites x in the next round. Every output is checked after the one Synchronize; with the
// events on every message counts as ordered on the GPU, unless the group's
// two messages are more than this process's CPUs hold waiting (a launcher
// that binds each rank to one CPU), where the group goes on the host.
func TestRankIPCOrderedP2PGroup(t *testing.T) {
	c, peer, ok := pairUp(t)
	if !ok {
		return
	}
	r, dev := c.Rank(), c.Device()
	s := newStream(t, dev)
	const rounds = 10
	pp := newPingPong(t, dev, rounds, peer)
	// This rank's messages are its own: the pair's seed, offset by rank.
	mine := func(q, k int) []float64 { return mpitest.Values(pp.seed+50*(q%2)+k, pp.n) }
	var srcs []devmem.Slice[float64]
	for k := range rounds {
		srcs = append(srcs, mpitest.Upload(t, dev, mine(r, k)))
	}
	defer func() {
		for _, b := range srcs {
			b.Free()
		}
	}()
	on, sends0, receives0 := c.IPCOrderedP2P()
	for k := range rounds {
		pp.hold(t, s, 6*b2i(k%2 == 0 && (k/2)%2 == r%2))
		if err := devmem.Copy(pp.x.Buffer(), srcs[k].Buffer(), s); err != nil {
			t.Fatal(err)
		}
		pp.hold(t, s, 12*b2i(k%2 == 1 && r%2 == 1))
		if err := devmem.Copy(pp.outs[k].Buffer(), pp.poison.Buffer(), s); err != nil {
			t.Fatal(err)
		}
		ops := []comm.P2P{comm.SendSlice(peer, pp.x), comm.RecvSlice(peer, pp.outs[k])}
		if err := c.GroupP2P(ops, s); err != nil {
			t.Fatalf("round %d: GroupP2P: %v", k, err)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for k := range rounds {
		mpitest.Expect(t, fmt.Sprintf("round %d's message from rank %d", k, peer), pp.outs[k], mine(peer, k))
	}
	_, sends, receives := c.IPCOrderedP2P()
	want := int64(0)
	crowded := c.Crowded(2) // the group's two messages
	if on && !crowded {
		want = rounds
	}
	expectOrdered(t, c, fmt.Sprintf("events on: %v, crowded: %v", on, crowded), sends-sends0, receives-receives0, want, want)
}

// TestRankIPCOrderedP2PMixed: the even rank of each pair on a stream (held
// back by large copies before it writes its send buffer: on a GPU a few
// milliseconds of them, longer than the time slice in which the GPU runs
// one process's queued work before another's), the odd rank on
// no stream: the odd rank's receive, on the host, must still wait for the
// sender's stream, and its echo, sent on no stream, is received on the
// even rank's stream. The odd rank checks each message as soon as its
// receive returns; the even rank after its stream is done. No message
// counts as ordered on the GPU at both ends: the even rank's sends are
// answered by a receiver on the host, which with the events on copies each
// after the sender's event (counted).
func TestRankIPCOrderedP2PMixed(t *testing.T) {
	c, peer, ok := pairUp(t)
	if !ok {
		return
	}
	r, dev := c.Rank(), c.Device()
	var s *devmem.Stream
	if r%2 == 0 {
		s = newStream(t, dev)
	}
	const rounds = 6
	pp := newPingPong(t, dev, rounds, peer)
	on, sends0, receives0 := c.IPCOrderedP2P()
	after0 := c.IPCCopiesAfterReady()
	for k := range rounds {
		if r%2 == 0 {
			pp.hold(t, s, pp.long)
			if err := devmem.Copy(pp.x.Buffer(), pp.srcs[k].Buffer(), s); err != nil {
				t.Fatal(err)
			}
			if err := comm.Send(c, pp.x, peer, s); err != nil {
				t.Fatalf("round %d: Send: %v", k, err)
			}
			if err := comm.Recv(c, pp.outs[k], peer, s); err != nil {
				t.Fatalf("round %d: Recv: %v", k, err)
			}
			continue
		}
		if err := comm.Recv(c, pp.outs[k], peer, nil); err != nil {
			t.Fatalf("round %d: Recv: %v", k, err)
		}
		mpitest.Expect(t, fmt.Sprintf("round %d's message, received on no stream", k), pp.outs[k], pp.want(k))
		if err := comm.Send(c, pp.outs[k], peer, nil); err != nil {
			t.Fatalf("round %d: Send: %v", k, err)
		}
	}
	if s != nil {
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for k := range rounds {
			mpitest.Expect(t, fmt.Sprintf("round %d's echo, received on a stream", k), pp.outs[k], pp.want(k))
		}
	}
	_, sends, receives := c.IPCOrderedP2P()
	expectOrdered(t, c, "a peer on no stream", sends-sends0, receives-receives0, 0, 0)
	want := int64(0)
	if on && r%2 == 1 {
		want = rounds
	}
	if d := c.IPCCopiesAfterReady() - after0; d != want {
		t.Errorf("%d receives on the host after the sender's event (events on: %v), want %d", d, on, want)
	}
}

// TestRankIPCUnknownControlFlags: a control message whose flags word this
// build never sends (a rank of another build, say) is refused: the receive
// fails with ErrMismatch and the sender is answered, so that neither waits,
// and the communicator goes on: the message after it arrives whole.
func TestRankIPCUnknownControlFlags(t *testing.T) {
	c, peer, ok := pairUp(t)
	if !ok {
		return
	}
	dev := c.Device()
	const n = 1 << 14 // float64s: through the IPC path (NodeBytes 1)
	if c.Rank()%2 == 0 {
		if a, err := c.SendControl(peer, 8*n, 0x40); err != nil || a != mpicomm.AckMismatch {
			t.Fatalf("a control message with unknown flags: answer %d, %v; want %d", a, err, mpicomm.AckMismatch)
		}
		x := mpitest.Upload(t, dev, mpitest.Values(7, n))
		defer x.Free()
		if err := comm.Send(c, x, peer, nil); err != nil {
			t.Fatal(err)
		}
		return
	}
	y := mpitest.Poisoned(t, dev, n)
	defer y.Free()
	if err := comm.Recv(c, y, peer, nil); !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), "flags") {
		t.Fatalf("Recv of a control message with unknown flags: %v, want ErrMismatch naming the flags", err)
	}
	if err := comm.Recv(c, y, peer, nil); err != nil {
		t.Fatal(err)
	}
	mpitest.Expect(t, "the message after the refused one", y, mpitest.Values(7, n))
}

// pairUp opens the IPC path's communicator and pairs the ranks (r, r^1):
// this rank's peer, or ok false for an odd last rank, which sits out.
func pairUp(t *testing.T) (c *mpicomm.Comm, peer int, ok bool) {
	t.Helper()
	mpitest.RankOnly(t)
	c = openIPC(t)
	peer = c.Rank() ^ 1
	return c, peer, peer < c.Size()
}

// newStream is a stream of dev, destroyed when the test ends.
func newStream(t *testing.T, dev *devmem.Device) *devmem.Stream {
	t.Helper()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

// expectOrdered checks the sends and receives ordered on the GPU during a
// test against what it wants (why: the test's case), and that no opened
// buffer is left in use once every call is done.
func expectOrdered(t *testing.T, c *mpicomm.Comm, why string, sends, receives, wantSends, wantReceives int64) {
	t.Helper()
	if sends != wantSends || receives != wantReceives {
		t.Errorf("%d sends and %d receives ordered on the GPU (%s), want %d and %d", sends, receives, why, wantSends, wantReceives)
	}
	if st := c.IPCCache(); st.InUse != 0 {
		t.Errorf("%d opened buffers still in use after every call is done", st.InUse)
	}
}

// pingPong is a ping-pong's buffers: the even rank's inputs srcs[k]
// (mpitest.Values(pair's seed+k)), copied into x before each send, and on
// both ranks outs[k], round k's receive (poisoned); slowA and slowB a large
// pair whose copies hold a stream back. n float64s a message: 8 MiB on a GPU,
// 1 MiB on the host device.
type pingPong struct {
	x, poison, slowA, slowB devmem.Slice[float64]
	srcs, outs              []devmem.Slice[float64]
	seed, n                 int
	long                    int // copies that hold a stream back a few milliseconds on a GPU
}

func newPingPong(t *testing.T, dev *devmem.Device, rounds, peer int) *pingPong {
	t.Helper()
	n, long := 1<<17, 6
	if dev.Kind() == devmem.CUDA {
		n, long = 1<<20, 96
	}
	pp := &pingPong{long: long, x: mpitest.Poisoned(t, dev, n), poison: mpitest.Poisoned(t, dev, n), slowA: mpitest.Poisoned(t, dev, 4*n),
		slowB: mpitest.Poisoned(t, dev, 4*n), seed: 100 * (min(peer, peer^1) + 1), n: n}
	for k := range rounds {
		pp.srcs = append(pp.srcs, mpitest.Upload(t, dev, pp.want(k)))
		pp.outs = append(pp.outs, mpitest.Poisoned(t, dev, n))
	}
	t.Cleanup(func() {
		for _, b := range append(append(pp.srcs, pp.outs...), pp.x, pp.poison, pp.slowA, pp.slowB) {
			b.Free()
		}
	})
	return pp
}

// want is round k's message.
func (pp *pingPong) want(k int) []float64 { return mpitest.Values(pp.seed+k, pp.n) }

// hold queues that many large copies on s.
func (pp *pingPong) hold(t *testing.T, s *devmem.Stream, copies int) {
	t.Helper()
	for range copies {
		if err := devmem.Copy(pp.slowB.Buffer(), pp.slowA.Buffer(), s); err != nil {
			t.Fatal(err)
		}
	}
}
