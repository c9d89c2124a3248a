package mpicomm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// These tests need no MPI: they drive the parts of the engine that run
// without it. The backends' tests run the rest under mpirun.

// bare is a Comm with what the staging pipeline needs, on a host device.
func bare(t *testing.T, chunk int) *Comm {
	t.Helper()
	dev := devmem.NewHostDevice()
	c := &Comm{backend: "test", rank: 0, size: 1, dev: dev, chunk: chunk, pool: &pool{dev: dev, base: chunk}}
	c.cond = sync.NewCond(&c.mu)
	var err error
	if c.d2h, err = dev.NewStream(); err != nil {
		t.Fatal(err)
	}
	if c.h2d, err = dev.NewStream(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *Comm) closeBare(t *testing.T) {
	t.Helper()
	if err := errors.Join(c.pool.close(), c.d2h.Destroy(), c.h2d.Destroy()); err != nil {
		t.Fatal(err)
	}
	if st := c.dev.Stats(); st != (devmem.Stats{}) {
		t.Errorf("after closing the pool and streams: %+v", st)
	}
}

func randomBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// Every byte goes device → slot → host work → slot → device, whatever the
// number of chunks against the four slots, and nothing past the range moves.
func TestPipelineCarriesEveryChunkThroughTheSlots(t *testing.T) {
	const chunk, guard = 1000, 64
	for _, n := range []int{0, 1, 999, 1000, 1001, 2000, 3999, 4000, 4001, 17*chunk + 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			c := bare(t, chunk)
			src := randomBytes(uint64(n), n)
			in, err := c.dev.Alloc(n + guard)
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.dev.Alloc(n + guard)
			if err != nil {
				t.Fatal(err)
			}
			poison := bytes.Repeat([]byte{0xa5}, n+guard)
			if err := errors.Join(devmem.CopyFromHost(in, append(append([]byte{}, src...), poison[:guard]...), nil),
				devmem.CopyFromHost(out, poison, nil)); err != nil {
				t.Fatal(err)
			}
			var seen []int
			err = c.run(&op{}, pipeline{
				bytes: n, chunk: chunk,
				in: copyIn(in),
				post: func(s *slot, off, m int, _ []*mpi.Request) error {
					seen = append(seen, off)
					for i, b := range slotBytes(s, m) {
						slotBytes(s, m)[i] = b ^ 0x5a
					}
					return nil
				},
				out: copyOut(out, 0),
			})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n+guard)
			if err := devmem.CopyToHost(got, out, nil); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if got[i] != src[i]^0x5a {
					t.Fatalf("byte %d: got %#x, want %#x", i, got[i], src[i]^0x5a)
				}
			}
			if !bytes.Equal(got[n:], poison[:guard]) {
				t.Errorf("bytes past the %d moved were written", n)
			}
			for k, off := range seen {
				if off != k*chunk {
					t.Fatalf("chunks reached the host in the order %v", seen)
				}
			}
			if want := (n + chunk - 1) / chunk; len(seen) != want {
				t.Errorf("%d chunks, want %d", len(seen), want)
			}
			if free := len(c.pool.free[c.pool.class(chunk)]); c.pool.lent != 0 || free != min(pipeSlots, len(seen)) {
				t.Errorf("pool after the transfer: %d lent, %d free", c.pool.lent, free)
			}
			if err := errors.Join(in.Free(), out.Free()); err != nil {
				t.Fatal(err)
			}
			c.closeBare(t)
		})
	}
}

// A point-to-point message of 0 bytes is still one message.
func TestPipelineSendsOneMessageForZeroBytes(t *testing.T) {
	c := bare(t, 64)
	calls := 0
	err := c.run(&op{}, pipeline{bytes: 0, chunk: 64, atLeastOne: true,
		mpi: func(s *slot, off, n int) ([]*mpi.Request, error) { calls++; return nil, nil }})
	if err != nil || calls != 1 {
		t.Errorf("run = %v after %d MPI calls; want one call", err, calls)
	}
	c.closeBare(t)
}

// A failing stage stops the pipeline, returns its error, and gives the
// slots back once their copies are done.
func TestPipelineFailureReturnsTheSlots(t *testing.T) {
	c := bare(t, 100)
	buf, err := c.dev.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = c.run(&op{}, pipeline{bytes: 1000, chunk: 100, in: copyIn(buf),
		post: func(s *slot, off, n int, _ []*mpi.Request) error {
			if off == 300 {
				return boom
			}
			return nil
		},
		out: copyOut(buf, 0)})
	if !errors.Is(err, boom) {
		t.Fatalf("run = %v, want boom", err)
	}
	if c.pool.lent != 0 || c.brokenErr() != nil {
		t.Errorf("after the failure: %d slots lent, broken %v", c.pool.lent, c.brokenErr())
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	c.closeBare(t)
}

// A failure in the copy-in stage or in starting MPI stops the other stages
// too, and nothing stays lent.
func TestPipelineFailureInAnyStageStopsEveryStage(t *testing.T) {
	boom := errors.New("boom")
	for _, where := range []string{"in", "mpi"} {
		t.Run(where, func(t *testing.T) {
			c := bare(t, 100)
			buf, err := c.dev.Alloc(5000)
			if err != nil {
				t.Fatal(err)
			}
			var outs atomic.Int64
			in := copyIn(buf)
			p := pipeline{bytes: 5000, chunk: 100,
				in: func(s *slot, off, n int, st *devmem.Stream) error {
					if where == "in" && off == 700 {
						return boom
					}
					return in(s, off, n, st)
				},
				mpi: func(s *slot, off, n int) ([]*mpi.Request, error) {
					if where == "mpi" && off == 1200 {
						return nil, boom
					}
					return nil, nil
				},
				out: func(s *slot, off, n int, st *devmem.Stream) error { outs.Add(1); return nil },
			}
			if err := c.run(&op{}, p); !errors.Is(err, boom) {
				t.Fatalf("run = %v, want boom", err)
			}
			if n := outs.Load(); n >= 50 {
				t.Errorf("%d chunks finished after the failure; want the pipeline stopped", n)
			}
			if c.pool.lent != 0 {
				t.Errorf("%d slots lent after the failure", c.pool.lent)
			}
			if err := buf.Free(); err != nil {
				t.Fatal(err)
			}
			c.closeBare(t)
		})
	}
}

// Chunks double from the first up to the cap, cut by index alone (a longer
// message's cuts extend a shorter one's), never below one chunk or past the
// cap, and slots come in sizes that hold them.
func TestChunksGrowAlongTheMessage(t *testing.T) {
	p := pipeline{bytes: 20 << 20, chunk: 1 << 20, maxChunk: 4 << 20}
	want := [][2]int{{0, 1 << 20}, {1 << 20, 2 << 20}, {3 << 20, 4 << 20}, {7 << 20, 4 << 20}, {11 << 20, 4 << 20}, {15 << 20, 4 << 20}, {19 << 20, 1 << 20}}
	if got := p.spans(); !slices.Equal(got, want) {
		t.Errorf("spans of 20 MiB = %v, want %v", got, want)
	}
	short := p
	short.bytes = 5<<20 + 3
	for i, sp := range short.spans() {
		if full := p.spans()[i]; sp[0] != full[0] || (sp[1] != full[1] && sp[0]+sp[1] != short.bytes) {
			t.Errorf("chunk %d of the shorter message %v does not line up with %v", i, sp, full)
		}
	}
	fixed := pipeline{bytes: 2500, chunk: 1000}
	if got := fixed.spans(); !slices.Equal(got, [][2]int{{0, 1000}, {1000, 1000}, {2000, 500}}) {
		t.Errorf("without growth: %v", got)
	}
	if got := (pipeline{chunk: 8, atLeastOne: true}).spans(); !slices.Equal(got, [][2]int{{0, 0}}) {
		t.Errorf("an empty point-to-point message: %v, want one empty chunk", got)
	}
	c := &Comm{chunk: 1 << 20}
	if p3, p8 := c.pipe(10, 3), c.pipe(10, 8); p3.chunk != (1<<20)/3*3 || p3.maxChunk != (4<<20)/3*3 || p8.maxChunk != 4<<20 || p3.bytes != 10 {
		t.Errorf("pipe(10, 3) = %+v, pipe(10, 8) = %+v", p3, p8)
	}
	if big := (&Comm{chunk: 16 << 20}).pipe(1, 4); big.maxChunk != 16<<20 {
		t.Errorf("an agreed chunk above the cap: maxChunk = %d, want it kept", big.maxChunk)
	}
	pl := &pool{base: 1 << 20}
	for n, want := range map[int]int{1: 1 << 20, 1 << 20: 1 << 20, 1<<20 + 1: 2 << 20, 3 << 20: 4 << 20} {
		if got := pl.class(n); got != want {
			t.Errorf("slot class for %d bytes = %d, want %d", n, got, want)
		}
	}
}

func TestWidenThenNarrowWrapsLike8BitArithmetic(t *testing.T) {
	const n = 1001
	for _, signed := range []bool{true, false} {
		ins := [4][]byte{}
		for r := range ins {
			ins[r] = randomBytes(uint64(r)+10, n)
		}
		acc := make([]int32, n)
		for r := range ins {
			b := make([]byte, 4*n)
			copy(b[3*n:], ins[r])
			widen(b, n, signed)
			w := devmem.FromBytes[int32](b)
			for i, v := range ins[r] {
				want := int32(v)
				if signed {
					want = int32(int8(v))
				}
				if w[i] != want {
					t.Fatalf("signed %v: widened element %d is %d, want %d", signed, i, w[i], want)
				}
				acc[i] += w[i]
			}
		}
		b := devmem.AsBytes(acc)
		narrow(b, n)
		for i := range n {
			var want byte
			for r := range ins {
				want += ins[r][i]
			}
			if b[i] != want {
				t.Fatalf("signed %v: narrowed sum %d is %d, want the wrapping sum %d", signed, i, b[i], want)
			}
		}
	}
}

func TestMismatchNamesEveryRankThatDiffers(t *testing.T) {
	sigs := [][]byte{[]byte("AllReduce(count=4)"), []byte("Broadcast(count=4 root=0)"), []byte("AllReduce(count=4)"),
		[]byte("AllReduce(count=3)"), []byte("Broadcast(count=4 root=0)")}
	err := mismatch(9, sigs)
	want := "collective #9: rank 0 called AllReduce(count=4) but rank 3 called AllReduce(count=3); ranks 1, 4 called Broadcast(count=4 root=0)"
	if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), want) {
		t.Errorf("mismatch = %v; want %q wrapping ErrMismatch", err, want)
	}
}

func TestTagsNumberMessagesPerPeerAndDirection(t *testing.T) {
	c := &Comm{size: 3, sendSeq: make([]uint64, 3), recvSeq: make([]uint64, 3)}
	got, _ := c.takeTags([]comm.P2P{{Kind: comm.SendKind, Peer: 1}, {Kind: comm.SendKind, Peer: 1}, {Kind: comm.RecvKind, Peer: 1},
		{Kind: comm.SendKind, Peer: 2}}, nil, nil)
	more, _ := c.takeTags([]comm.P2P{{Kind: comm.SendKind, Peer: 1}, {Kind: comm.RecvKind, Peer: 1}}, nil, nil)
	got = append(got, more...)
	if want := []int{0, 1, 0, 0, 2, 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tags %v, want %v", got, want)
	}
	c.sendSeq[0] = tagSpace - 1
	if got, _ := c.takeTags([]comm.P2P{{Kind: comm.SendKind, Peer: 0}, {Kind: comm.SendKind, Peer: 0}}, nil, nil); got[0] != tagSpace-1 || got[1] != 0 {
		t.Errorf("tags past MPI's guaranteed bound: %v", got)
	}
}

// Messages of at least nodeMin bytes to or from a rank of the node get
// tickets on that pair's link, one count per direction; others, and every
// message when the node path is off, get none.
func TestNodeTicketsPerPeerDirectionAndSize(t *testing.T) {
	c := &Comm{mode: Staged, size: 3, rank: 0, nodeMin: 100, onNode: []bool{true, true, false},
		sendSeq: make([]uint64, 3), recvSeq: make([]uint64, 3)}
	big := func(k comm.P2PKind, peer int) comm.P2P {
		return comm.P2P{Kind: k, Peer: peer, Count: 25, DType: comm.Float32}
	}
	small := comm.P2P{Kind: comm.SendKind, Peer: 1, Count: 24, DType: comm.Int32}
	_, turns := c.takeTags([]comm.P2P{big(comm.SendKind, 1), small, big(comm.SendKind, 1), big(comm.RecvKind, 1), big(comm.SendKind, 2)}, nil, nil)
	type got struct {
		on     bool
		send   bool
		ticket uint64
	}
	var g []got
	for _, tr := range turns {
		if tr.link == nil {
			g = append(g, got{})
			continue
		}
		g = append(g, got{true, tr.link.send, tr.ticket})
	}
	want := []got{{true, true, 0}, {}, {true, true, 1}, {true, false, 0}, {}}
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Errorf("turns %v, want %v", g, want)
	}
	if turns[0].link != turns[2].link || turns[0].link == turns[3].link {
		t.Errorf("sends to rank 1 share a link, its receives have their own")
	}
	c.nodeMin = 0
	if _, turns := c.takeTags([]comm.P2P{big(comm.SendKind, 1)}, nil, nil); turns[0].link != nil {
		t.Errorf("node path off, still a ticket")
	}
}

// Tickets taken in one order run in that order, whichever goroutine gets
// there first; Close wakes the ones still waiting with ErrClosed.
func TestTurnsFollowTicketsAndCloseWakesTheWaiters(t *testing.T) {
	c := &Comm{}
	c.cond = sync.NewCond(&c.mu)
	const n = 50
	var order []uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for seq := uint64(n); seq >= 1; seq-- { // started in reverse
		wg.Go(func() {
			if err := c.awaitTurn(seq); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, seq)
			mu.Unlock()
			c.passTurn(seq)
		})
	}
	wg.Wait()
	for i, seq := range order {
		if seq != uint64(i+1) {
			t.Fatalf("ran in the order %v", order)
		}
	}
	done := make(chan error)
	go func() { done <- c.awaitTurn(n + 2) }() // n+1 never comes
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	select {
	case err := <-done:
		if !errors.Is(err, comm.ErrClosed) {
			t.Errorf("waiter after Close: %v, want ErrClosed", err)
		}
	case <-time.After(time.Minute): // a safety net, not a timing assertion
		t.Fatal("Close left a waiter waiting")
	}
}

func TestBadOptionsAreRejectedBeforeMPI(t *testing.T) {
	for _, o := range []comm.Options{{ChunkBytes: -1}, {ChunkBytes: 1 << 31}, {Timeout: -time.Second}} {
		c, err := Open(Config{Backend: "test", Mode: Staged, Options: o})
		var ce *comm.Error
		if c != nil || !errors.Is(err, comm.ErrInvalidArgument) || !errors.As(err, &ce) || ce.Backend != "test" {
			t.Errorf("Open(%+v) = %v, %v; want a *comm.Error wrapping ErrInvalidArgument", o, c, err)
		}
	}
	if mpi.Initialized() {
		t.Error("a rejected Open started MPI")
	}
}

func TestAwareOverrideReadsTheEnvironment(t *testing.T) {
	for env, want := range map[string]Override{"": NoOverride, "1": Trust, "true": Trust, "0": Refuse, " probe ": Check, "PROBE": Check} {
		t.Setenv(AwareEnv, env)
		if got, err := AwareOverride(); err != nil || got != want {
			t.Errorf("%s=%q: %v, %v; want %v", AwareEnv, env, got, err, want)
		}
	}
	t.Setenv(AwareEnv, "yes please")
	if _, err := AwareOverride(); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("a malformed %s: %v, want ErrInvalidArgument", AwareEnv, err)
	}
}

// GPUCOMM_TRACE_PIPELINE=SKIP,COUNT traces COUNT transfers of two chunks or
// more after SKIP, a line a chunk, each stage's times in order; a malformed
// value is an error.
func TestTraceWritesTheChosenTransfersTimelines(t *testing.T) {
	for _, bad := range []string{"3", "a,1", "1,0", "-1,2", "1,2,3"} {
		if tr, err := newTracer(bad); tr != nil || !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%s=%q: %v, %v; want ErrInvalidArgument", TraceEnv, bad, tr, err)
		}
	}
	if tr, err := newTracer(""); tr != nil || err != nil {
		t.Errorf("unset: %v, %v; want no tracer", tr, err)
	}
	tr, err := newTracer("1, 2")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	tr.w = &out
	const chunk = 1000
	c := bare(t, chunk)
	c.trace = tr
	n := 7*chunk + 5 // chunks of 1000, 2000, 4000 and 5 bytes
	buf, err := c.dev.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 { // the one-chunk transfer is never counted
		size := n
		if i == 2 {
			size = chunk
		}
		p := pipeline{bytes: size, chunk: chunk, maxChunk: 8 * chunk, in: copyIn(buf), out: copyOut(buf, 0),
			mpi: func(*slot, int, int) ([]*mpi.Request, error) { return nil, nil }}
		if err := c.run(&op{call: driver.Call{Operation: driver.OpSend, Count: size, DType: comm.Uint8}}, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	c.closeBare(t)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2*5 || strings.Count(out.String(), ", 4 chunks, ") != 2 {
		t.Fatalf("want two transfers of 4 chunks traced (the 2nd and 3rd of those with several chunks); got:\n%s", out.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, "chunk ") {
			continue
		}
		var j, bytes, at int
		var in0, in1, m0, m1, o0, o1 float64
		if _, err := fmt.Sscanf(l, "trace rank 0:   chunk %d (%d bytes at %d): in %f–%f, mpi %f–%f, out %f–%f",
			&j, &bytes, &at, &in0, &in1, &m0, &m1, &o0, &o1); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if !(0 < in0 && in0 <= in1 && in1 <= m0 && m0 <= m1 && m1 <= o0 && o0 <= o1) {
			t.Errorf("chunk %d's stages out of order: %q", j, l)
		}
	}
}
