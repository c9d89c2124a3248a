package mpicomm_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// TestRankIPCOrderedChain: stream-ordered AllReduces back to back on one
// stream, each rank's send buffer rewritten on the stream before each call
// and rank 0's stream held back by a chain of large copies before each, every
// output checked after one Synchronize. A kernel that read a send buffer
// before its rank's stream had written it (a missing wait for that rank's
// place), or a stream that rewrote its send buffer before every peer's
// kernel had read it (a missing wait for the peers' kernels), gives wrong
// sums; so does an output read back before every rank wrote its part. Once
// the stream is done, no reference to a peer's buffer is left in use. It
// runs wherever TestIPCReductionsUnderLauncher runs its rank tests: on the
// host device (host-ordered), and on a GPU with and without the events.
func TestRankIPCOrderedChain(t *testing.T) {
	mpitest.RankOnly(t)
	c := openIPC(t)
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const rounds = 12
	ch := newChain(t, dev, r, rounds, 31)
	_, ordered0 := c.IPCOrdered()
	ipc0 := c.IPCCollectives()
	for k := range rounds {
		ch.round(t, c, s, k, r == 0)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for k := range rounds {
		mpitest.Expect(t, fmt.Sprintf("AllReduce of round %d", k), ch.outs[k], ch.want(p, k))
	}
	if d := c.IPCCollectives() - ipc0; d != rounds {
		t.Errorf("%d AllReduces through the IPC path, want %d", d, rounds)
	}
	on, ordered := c.IPCOrdered()
	want := int64(0)
	if on {
		want = rounds
	}
	if d := ordered - ordered0; d != want {
		t.Errorf("%d AllReduces ordered on the GPU (events on: %v), want %d", d, on, want)
	}
	if st := c.IPCCache(); st.InUse != 0 {
		t.Errorf("%d opened buffers still in use after the stream is done", st.InUse)
	}
	ch.free()
}

// TestIPCEventsEnvAndItsDefault: unset, the reductions' events are on for a
// communicator of two ranks only, and only where no two ranks share a GPU,
// the messages' off everywhere; "on" and "off" (and their synonyms) say
// so whatever the size; anything else is ErrInvalidArgument.
func TestIPCEventsEnvAndItsDefault(t *testing.T) {
	for _, tc := range []struct {
		v      string
		size   int
		shared bool
		want   bool
		bad    bool
	}{{"", 2, false, true, false}, {"", 2, true, false, false}, {"", 3, false, false, false}, {"", 4, false, false, false},
		{"on", 4, false, true, false}, {"on", 2, true, true, false}, {"1", 8, false, true, false},
		{" ON ", 3, false, true, false}, {"off", 2, false, false, false}, {"false", 2, false, false, false}, {"sometimes", 2, false, false, true}} {
		t.Setenv(mpicomm.IPCEventsEnv, tc.v)
		got, err := mpicomm.IPCEventsWanted(tc.size, tc.shared)
		if tc.bad {
			if !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("%q: error %v, want ErrInvalidArgument", tc.v, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q with %d ranks, a GPU shared %v: %v, %v; want %v", tc.v, tc.size, tc.shared, got, err, tc.want)
		}
	}
	// The messages: unset, off (on the host), whether or not ranks share a GPU.
	for _, tc := range []struct {
		v    string
		want bool
		bad  bool
	}{{"", false, false}, {"on", true, false}, {" on", true, false}, {"true", true, false}, {"off", false, false}, {"maybe", false, true}} {
		t.Setenv(mpicomm.IPCEventsEnv, tc.v)
		got, err := mpicomm.P2PEventsWanted()
		if tc.bad {
			if !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("%q: error %v, want ErrInvalidArgument", tc.v, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("messages, %q: %v, %v; want %v", tc.v, got, err, tc.want)
		}
	}
}

// TestIPCEventsBadValueUnderLauncher: a bad GPUCOMM_NODE_IPC_EVENTS on one
// rank fails every rank's Open together (no rank left waiting in a
// collective the others never enter).
func TestIPCEventsBadValueUnderLauncher(t *testing.T) {
	if !mpi.Built() {
		t.Skip("MPI is not built in: -tags mpi or mpich")
	}
	mpitest.ExpectPass(t, 2, mpitest.RunRanks(t, 2, "^TestRankIPCEventsBadValue$", time.Minute, "GPUCOMM_DEVICE=host"))
}

func TestRankIPCEventsBadValue(t *testing.T) {
	mpitest.RankOnly(t)
	w := mpi.World()
	if w.Rank() == 1 {
		t.Setenv(mpicomm.IPCEventsEnv, "sometimes")
	}
	c, err := mpicomm.Open(mpicomm.Config{Backend: "mpi", Mode: mpicomm.Staged, Options: driver.Options{Device: "host", NodeBytes: 1}})
	if err == nil {
		c.Close()
		t.Fatal("Open succeeded with a bad GPUCOMM_NODE_IPC_EVENTS on rank 1")
	}
	want := comm.ErrUnsupported // another rank failed to set up
	if w.Rank() == 1 {
		want = comm.ErrInvalidArgument
	}
	if !errors.Is(err, want) {
		t.Errorf("Open: %v, want an error wrapping %v", err, want)
	}
	if w.Rank() == 1 && !strings.Contains(err.Error(), mpicomm.IPCEventsEnv) {
		t.Errorf("Open: %v does not name %s", err, mpicomm.IPCEventsEnv)
	}
}

// TestRankIPCMixedStreams: rank 0 passes a stream (its send buffer written
// on it, behind a chain of large copies) where the other ranks pass none,
// a legal mix (the stream is no part of a collective's signature). The
// ranks on no stream take the host-ordered path, which reads rank 0's send
// buffer once the ranks agree and returns, done, after the last agreement;
// so rank 0, ordered on the GPU where the events are on, orders its part on
// the host in such a call: every output right on every rank, each checked
// as soon as its call is done (at once on no stream), and none counted as
// ordered on the GPU.
func TestRankIPCMixedStreams(t *testing.T) {
	mpitest.RankOnly(t)
	c := openIPC(t)
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	var s *devmem.Stream
	if r == 0 {
		var err error
		if s, err = dev.NewStream(); err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
	}
	const rounds = 6
	ch := newChain(t, dev, r, rounds, 37)
	_, ordered0 := c.IPCOrdered()
	for k := range rounds {
		// On no stream the copies are done when they return, and so is the
		// AllReduce: the next round's copy rewrites the send buffer at once.
		ch.round(t, c, s, k, r == 0)
		if s == nil {
			mpitest.Expect(t, fmt.Sprintf("AllReduce of round %d, on no stream", k), ch.outs[k], ch.want(p, k))
		}
	}
	if s != nil {
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for k := range rounds {
			mpitest.Expect(t, fmt.Sprintf("AllReduce of round %d, on a stream", k), ch.outs[k], ch.want(p, k))
		}
	}
	if _, ordered := c.IPCOrdered(); ordered != ordered0 {
		t.Errorf("%d AllReduces ordered on the GPU where a rank passed no stream, want 0", ordered-ordered0)
	}
	if st := c.IPCCache(); st.InUse != 0 {
		t.Errorf("%d opened buffers still in use after every call is done", st.InUse)
	}
	ch.free()
}

// chain is a run of AllReduces of n float64s (8 MiB on a GPU, where the
// kernels must be long enough for a missing wait to show; 1 MiB on the host
// device, whose shared memory a CI container may have little of) whose send buffer x
// is rewritten before each: srcs[k] is round k's input on this rank, outs[k]
// its output (poisoned), and slowA and slowB a large pair whose copies hold
// a rank's stream back.
type chain struct {
	x, slowA, slowB devmem.Slice[float64]
	srcs, outs      []devmem.Slice[float64]
	mul             int // rank q's input of round k is mpitest.Values(q*mul+k, n)
	n               int
}

func newChain(t *testing.T, dev *devmem.Device, r, rounds, mul int) *chain {
	t.Helper()
	n := 1 << 17
	if dev.Kind() == devmem.CUDA {
		n = 1 << 20
	}
	ch := &chain{x: mpitest.Poisoned(t, dev, n), slowA: mpitest.Poisoned(t, dev, 4*n), slowB: mpitest.Poisoned(t, dev, 4*n), mul: mul, n: n}
	for k := range rounds {
		ch.srcs = append(ch.srcs, mpitest.Upload(t, dev, mpitest.Values(r*mul+k, n)))
		ch.outs = append(ch.outs, mpitest.Poisoned(t, dev, n))
	}
	return ch
}

// round issues round k on s (nil: none): six copies of 4n float64s first where
// holdBack, then the input copied into x, then the AllReduce into outs[k].
func (ch *chain) round(t *testing.T, c *mpicomm.Comm, s *devmem.Stream, k int, holdBack bool) {
	t.Helper()
	if holdBack {
		for range 6 {
			if err := devmem.Copy(ch.slowB.Buffer(), ch.slowA.Buffer(), s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := devmem.Copy(ch.x.Buffer(), ch.srcs[k].Buffer(), s); err != nil {
		t.Fatal(err)
	}
	if err := comm.AllReduce(c, ch.x, ch.outs[k], comm.Sum, s); err != nil {
		t.Fatalf("round %d: %v", k, err)
	}
}

// want is round k's sum over p ranks.
func (ch *chain) want(p, k int) []float64 {
	return mpitest.ValuesSum(p, ch.n, func(q int) int { return q*ch.mul + k })
}

func (ch *chain) free() {
	for _, b := range append(append(ch.srcs, ch.outs...), ch.x, ch.slowA, ch.slowB) {
		b.Free()
	}
}
