package mpicomm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// These tests need no MPI: they drive the parts of the engine that run
// without it. The backends' tests run the rest under mpirun.

func randomBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
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
	c := &Comm{strat: stagedStrategy{}, size: 3, rank: 0, nodeMin: 100, onNode: []bool{true, true, false},
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
		if tr.Link == nil {
			g = append(g, got{})
			continue
		}
		g = append(g, got{true, tr.Link.Send(), tr.Ticket})
	}
	want := []got{{true, true, 0}, {}, {true, true, 1}, {true, false, 0}, {}}
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Errorf("turns %v, want %v", g, want)
	}
	if turns[0].Link != turns[2].Link || turns[0].Link == turns[3].Link {
		t.Errorf("sends to rank 1 share a link, its receives have their own")
	}
	c.nodeMin = 0
	if _, turns := c.takeTags([]comm.P2P{big(comm.SendKind, 1)}, nil, nil); turns[0].Link != nil {
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

// The IPC reductions' parts cover the array once, in rank order, each
// starting on a multiple of its unit (16 bytes of elements), none longer
// than its share plus a unit, whatever the count and the ranks.
func TestPartsCoverTheArrayOnAlignedBoundaries(t *testing.T) {
	for _, unit := range []int{1, 2, 4, 8, 16} {
		for _, size := range []int{1, 2, 3, 4, 7, 16} {
			for _, count := range []int{0, 1, 5, 15, 16, 17, 100, 1001, 1 << 20, 1<<20 + 3} {
				next := 0
				for q := range size {
					lo, hi := part(count, size, q, unit)
					if lo != next || hi < lo || lo%unit != 0 {
						t.Fatalf("part(%d, %d, %d, %d) = [%d, %d) after %d: not the next aligned range", count, size, q, unit, lo, hi, next)
					}
					if hi-lo > count/size+2*unit {
						t.Errorf("part(%d, %d, %d, %d) = [%d, %d): %d elements, share %d", count, size, q, unit, lo, hi, hi-lo, count/size)
					}
					next = hi
				}
				if next != count {
					t.Errorf("the parts of %d over %d ranks (unit %d) end at %d", count, size, unit, next)
				}
			}
		}
	}
}
