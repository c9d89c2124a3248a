package mpitest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/conformance"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm"
	"github.com/gpucomm/gpucomm/solver/solvertest"
)

// The test bodies below run in every rank of a launched job, the same on
// each (outside one they skip): a rank that fails one still makes every
// collective call, so that no other rank is left waiting.

// NewGroup opens this process's one rank of backend.
func NewGroup(backend string, opts ...comm.Option) conformance.NewGroup {
	return func() ([]comm.Communicator, error) {
		c, err := comm.Open(backend, opts...)
		if err != nil {
			return nil, err
		}
		return []comm.Communicator{c}, nil
	}
}

func open(t *testing.T, backend string, opts ...comm.Option) comm.Communicator {
	t.Helper()
	c, err := comm.Open(backend, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", backend, err)
	}
	return c
}

// short is whether to leave out the large conformance cases: with -short,
// and always on MPICH, whose ranks busy-poll (about 5 ms a collective with 4
// ranks on 2 cores), to keep the job near two minutes.
func short() bool { return testing.Short() || mpi.Family() == "mpich" }

// Conformance is the whole conformance suite on one rank a process.
func Conformance(t *testing.T, backend string) {
	RankOnly(t)
	conformance.RunConfig(t, NewGroup(backend), conformance.Config{Short: short()})
}

// SmallChunks reruns the cases that move data with chunks so small that
// every transfer is cut into many, of sizes that are not a whole number of
// every element type, so that the pipeline's every path runs.
func SmallChunks(t *testing.T, backend string) {
	RankOnly(t)
	t.Run("1000B", func(t *testing.T) {
		conformance.RunConfig(t, NewGroup(backend, comm.WithChunkBytes(1000)), conformance.Config{
			Short: true, Run: "^(Grid/(AllReduce|ReduceScatter|Broadcast|Reduce|AllGather|AllToAll)|Counts|Stream|SendRecv|GroupP2P)$"})
	})
	if !short() {
		t.Run("65539B", func(t *testing.T) {
			conformance.RunConfig(t, NewGroup(backend, comm.WithChunkBytes(65539)), conformance.Config{Run: "^Large/"})
		})
	}
}

// Solver is the solver's conformance check on this backend.
func Solver(t *testing.T, backend string) {
	RankOnly(t)
	solvertest.Run(t, func() ([]comm.Communicator, error) { return NewGroup(backend)() })
}

// values is count float64s drawn from a generator seeded by rank: exact in
// binary, different on every rank.
// Values are count float64s from seed, exact in sums of a job's ranks
// (multiples of 1/16 below 2^19): the data of the rank tests.
func Values(seed, count int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(seed)+1, 0x5eed))
	v := make([]float64, count)
	for i := range v {
		v[i] = float64(rng.IntN(1<<24)-1<<23) / 16
	}
	return v
}

// ValuesSum is the element-wise sum, in rank order, of Values(seed(q),
// count) over ranks q < p: what a Sum of every rank's Values gives.
func ValuesSum(p, count int, seed func(q int) int) []float64 {
	sum := make([]float64, count)
	for q := range p {
		for i, v := range Values(seed(q), count) {
			sum[i] += v
		}
	}
	return sum
}

// NodeShared fills one node-shared buffer from every process of the node:
// each rank writes its own part, and after the barrier every rank (the
// root first among them) finds every other rank's part in it.
func NodeShared(t *testing.T, backend string) {
	RankOnly(t)
	c := open(t, backend)
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	// The buffer is shared by the ranks of a node: across nodes (a job under
	// scripts/multinode's launchers) each node has its own, among the node's
	// ranks, as a user makes it (comm.SplitNode); on one node that is every
	// rank.
	node, err := comm.SplitNode(c)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := node.Close(); err != nil {
			t.Error(err)
		}
	}()
	if node.Size() != c.LocalSize() {
		t.Errorf("rank %d: SplitNode gave %d ranks, the launcher says %d on this node", c.Rank(), node.Size(), c.LocalSize())
	}
	counts := func(r int) int { return 1000 + 37*r }
	ns, err := devmem.NewNodeSharedSlice[float64](comm.NodeComm(node), counts(node.Rank()))
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Mine().CopyFrom(Values(node.Rank(), counts(node.Rank())), nil); err != nil {
		t.Fatal(err)
	}
	if err := ns.Barrier(); err != nil {
		t.Fatal(err)
	}
	all, err := ns.All().ToHost(nil)
	if err != nil {
		t.Fatal(err)
	}
	i, bad := 0, 0
	for r := range node.Size() {
		for k, want := range Values(r, counts(r)) {
			if all[i] != want && bad < 5 {
				t.Errorf("rank %d reads element %d of node rank %d's part as %v; node rank %d wrote %v", c.Rank(), k, r, all[i], r, want)
				bad++
			}
			i++
		}
	}
	if i != len(all) {
		t.Errorf("shared buffer of %d elements, the parts add up to %d", len(all), i)
	}
	if node.Rank() != 0 && !ns.Shared().All().IsOpenedIPC() {
		t.Errorf("rank %d's view is not an IPC mapping of the root's buffer", c.Rank())
	}
	// Every rank has read before any rank closes (the root frees the memory).
	if err := ns.Barrier(); err != nil {
		t.Fatal(err)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
}

// StreamsKeepCallOrder calls two collectives on two streams, in the same
// order on every rank, with the first stream held shut on even ranks: their
// second stream is free first, and only the tickets keep MPI in call order.
func StreamsKeepCallOrder(t *testing.T, backend string) {
	RankOnly(t)
	c := open(t, backend, comm.WithChunkBytes(4096))
	defer c.Close()
	p := c.Size()
	s1, err1 := c.Device().NewStream()
	s2, err2 := c.Device().NewStream()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	defer s1.Destroy()
	defer s2.Destroy()
	const n1, n2 = 5000, 777 // different counts: a swap fails or sums the wrong data
	x1, x2 := Values(c.Rank(), n1), Values(c.Rank()+100, n2)
	a := upload(t, c, x1)
	b := upload(t, c, x2)
	gate := make(chan struct{})
	if c.Rank()%2 == 0 {
		if err := s1.HostFunc(func() error { <-gate; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := comm.AllReduce(c, a, a, comm.Sum, s1); err != nil {
		t.Fatal(err)
	}
	if err := comm.AllReduce(c, b, b, comm.Max, s2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // lets s2's goroutine reach the backend first; the checks below do not depend on it
	close(gate)
	if err := errors.Join(s1.Synchronize(), s2.Synchronize()); err != nil {
		t.Fatal(err)
	}
	sum, mx := make([]float64, n1), make([]float64, n2)
	for r := range p {
		for i, v := range Values(r, n1) {
			sum[i] += v
		}
		for i, v := range Values(r+100, n2) {
			if r == 0 || v > mx[i] {
				mx[i] = v
			}
		}
	}
	Expect(t, "AllReduce(sum) on the held stream", a, sum)
	Expect(t, "AllReduce(max) on the free stream", b, mx)
	if err := errors.Join(a.Free(), b.Free()); err != nil {
		t.Error(err)
	}
}

func upload(t *testing.T, c comm.Communicator, v []float64) devmem.Slice[float64] {
	t.Helper()
	return Upload(t, c.Device(), v)
}

// Upload allocates a slice of len(v) float64s on dev holding v.
func Upload(t *testing.T, dev *devmem.Device, v []float64) devmem.Slice[float64] {
	t.Helper()
	s, err := devmem.AllocSlice[float64](dev, len(v))
	if err == nil {
		err = s.CopyFrom(v, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Poison is what a receive buffer holds before a test's call fills it.
const Poison = -7.25

// Poisoned is Upload of n Poisons.
func Poisoned(t *testing.T, dev *devmem.Device, n int) devmem.Slice[float64] {
	t.Helper()
	return Upload(t, dev, slices.Repeat([]float64{Poison}, n))
}

// Expect checks s against want element by element, reporting the first
// element that differs; the test goes on (its rank still makes every call
// the others make).
func Expect(t *testing.T, what string, s devmem.Slice[float64], want []float64) {
	t.Helper()
	got, err := s.ToHost(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: element %d is %v, want %v", what, i, got[i], want[i])
			return
		}
	}
}

// NothingLeftAfterClose runs pipelined transfers on streams and checks that
// Close leaves the device with no staging buffer, stream or event.
func NothingLeftAfterClose(t *testing.T, backend string) {
	RankOnly(t)
	c := open(t, backend, comm.WithChunkBytes(1024))
	dev := c.Device()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	x := upload(t, c, Values(c.Rank(), 3000))
	y := upload(t, c, make([]float64, 3000*c.Size()))
	z := upload(t, c, make([]float64, 3000)) // a ring's receive, apart from its send
	right, left := (c.Rank()+1)%c.Size(), (c.Rank()+c.Size()-1)%c.Size()
	for _, err := range []error{
		comm.AllReduce(c, x, x, comm.Avg, s),
		comm.AllGather(c, x, y, s),
		c.GroupP2P([]comm.P2P{comm.SendSlice(right, x), comm.RecvSlice(left, z)}, s),
		c.Barrier(s),
		s.Synchronize(),
		s.Destroy(),
		x.Free(), y.Free(), z.Free(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := dev.Stats(); st.Pinned == 0 || st.Streams == 0 {
		t.Errorf("before Close: %+v; want the staging buffers and copy streams counted", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st := dev.Stats(); st != (devmem.Stats{}) {
		t.Errorf("after Close: %+v; want nothing left", st)
	}
	var ce *comm.Error
	if err := c.Barrier(nil); !errors.Is(err, comm.ErrClosed) || !errors.As(err, &ce) || ce.Backend != backend {
		t.Errorf("Barrier after Close: %v; want a %s *comm.Error wrapping ErrClosed", err, backend)
	}
	if err := c.Close(); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("second Close: %v; want ErrClosed", err)
	}
}

// DebugNamesMismatch has rank 1 call Broadcast and rank 2 AllReduce of
// another count where the rest call AllReduce: with Debug every rank gets
// ErrMismatch naming them, no data moves, and the next collective works.
func DebugNamesMismatch(t *testing.T, backend string) {
	RankOnly(t)
	c := open(t, backend, comm.WithDebug(true))
	defer c.Close()
	x := upload(t, c, []float64{1, 2, 3, 4})
	defer x.Free()
	var err error
	switch c.Rank() {
	case 1:
		err = comm.Broadcast(c, x, x, 0, nil)
	case 2:
		sub, _ := x.Sub(0, 3)
		err = comm.AllReduce(c, sub, sub, comm.Sum, nil)
	default:
		err = comm.AllReduce(c, x, x, comm.Sum, nil)
	}
	var ce *comm.Error
	if !errors.Is(err, comm.ErrMismatch) || !errors.As(err, &ce) || ce.Backend != backend || ce.Rank != c.Rank() {
		t.Fatalf("rank %d: %v; want a %s *comm.Error of this rank wrapping ErrMismatch", c.Rank(), err, backend)
	}
	want := []string{"rank 0 called AllReduce(count=4 dtype=float64 op=sum)", "rank 1 called Broadcast(count=4 dtype=float64 root=0)"}
	if c.Size() > 2 {
		want = append(want, "rank 2 called AllReduce(count=3 dtype=float64 op=sum)")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("rank %d: %q does not say %q", c.Rank(), err, w)
		}
	}
	Expect(t, "buffer after a mismatched collective", x, []float64{1, 2, 3, 4})

	// On a stream the mismatch comes back from Synchronize.
	s, err := c.Device().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	if c.Rank() == 0 {
		err = c.Barrier(s)
	} else {
		err = comm.AllReduce(c, x, x, comm.Max, s)
	}
	if err != nil {
		t.Fatalf("queueing on a stream: %v", err)
	}
	if err := s.Synchronize(); !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), "rank 0 called Barrier") {
		t.Errorf("rank %d: Synchronize after a mismatch on the stream: %v; want ErrMismatch naming rank 0's Barrier", c.Rank(), err)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := comm.AllReduce(c, x, x, comm.Sum, nil); err != nil {
		t.Fatalf("AllReduce after the mismatch: %v", err)
	}
	p := float64(c.Size())
	Expect(t, "AllReduce after the mismatch", x, []float64{p, 2 * p, 3 * p, 4 * p})
}

// OptionsAgree gives every rank its own chunk size: the ranks use the
// smallest, so message boundaries match, and a transfer of many chunks
// arrives whole.
func OptionsAgree(t *testing.T, backend string) {
	RankOnly(t)
	c := open(t, backend, comm.WithChunkBytes(4096+1024*(mpi.World().Rank()%3)))
	defer c.Close()
	if got := c.(*mpicomm.Comm).ChunkBytes(); got != 4096 {
		t.Errorf("rank %d: chunk %d bytes, want the smallest asked for, 4096", c.Rank(), got)
	}
	const n = 10000
	x := upload(t, c, Values(c.Rank(), n))
	defer x.Free()
	y := upload(t, c, make([]float64, n))
	defer y.Free()
	right, left := (c.Rank()+1)%c.Size(), (c.Rank()+c.Size()-1)%c.Size()
	if err := c.GroupP2P([]comm.P2P{comm.SendSlice(right, x), comm.RecvSlice(left, y)}, nil); err != nil {
		t.Fatal(err)
	}
	Expect(t, "halo of 10000 float64 in chunks of 4096 bytes", y, Values(left, n))
}

// ReceiveOfAnotherSizeIsAMismatch has rank 0 send messages into rank 1's
// receives of other counts, in chunks of 4096 bytes (512 float64, then
// 1024, 2048, ...: whole chunks end at 512, 1536 and 3584 elements): longer
// and shorter by whole chunks, within a chunk, one chunk against several,
// a one-chunk receive the size of the pipeline's length header (3
// float64), through the pipeline alone (the node path off), and, on the
// mpi backend, a send of several chunks below the node path's threshold
// into a receive above it and the other way round, on the IPC path and on
// the ring, and from pinned memory (whose bytes follow the IPC path's
// control message through the pipeline). Every receive fails with
// ErrMismatch (on the mpi backend, its buffer as it was: on cudaaware MPI
// writes the device buffer itself), every send completes, and the next
// message arrives whole. On cudaaware with a GPU only receives longer than
// their sends run: a shorter one is MPI's truncation into device memory.
func ReceiveOfAnotherSizeIsAMismatch(t *testing.T, backend string) {
	RankOnly(t)
	staged := [][2]int{{3000, 5000}, {5000, 3000}, {3584, 1536}, {1536, 3584}, {100, 3584}, {3584, 100},
		{500, 100}, {100, 500}, {3, 3584}, {3584, 3}, {1536, 1535}, {1535, 1536}}
	settings := []mismatchSetting{
		{"Pipeline", "", false, []comm.Option{comm.WithNodeBytes(-1)}, staged},
	}
	if backend == "mpi" {
		crossing := [][2]int{{3584, 10000}, {10000, 3584}, {10000, 3}, {3, 10000}}
		node := []comm.Option{comm.WithNodeBytes(65536)}
		settings = append(settings,
			mismatchSetting{"IPCPath", "", false, node, crossing},
			mismatchSetting{"IPCPathFromPinned", "", true, node, crossing},
			mismatchSetting{"Ring", "off", false, node, [][2]int{{3584, 10000}, {3, 10000}}})
	}
	for _, set := range settings {
		t.Run(set.name, func(t *testing.T) {
			if set.ipc != "" {
				t.Setenv(mpicomm.IPCEnv, set.ipc)
			}
			c := open(t, backend, append(set.opts, comm.WithChunkBytes(4096))...)
			defer func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}()
			for _, k := range set.cases {
				if backend != "mpi" && c.Device().Kind() == devmem.CUDA && k[0] > k[1] {
					// MPI's truncation into device memory: CUDA-aware Open
					// MPI 4.1 copies the whole message (an H100, 2026-12-06:
					// cuMemcpyAsync failed, the process aborted).
					continue
				}
				anotherCount(t, c, k[0], k[1], set.pinned, backend == "mpi")
			}
		})
	}
}

// mismatchSetting is one communicator of ReceiveOfAnotherSizeIsAMismatch
// and the pairs of counts (sent, wanted) it runs.
type mismatchSetting struct {
	name   string
	ipc    string // GPUCOMM_NODE_IPC
	pinned bool   // rank 0 sends from pinned memory
	opts   []comm.Option
	cases  [][2]int
}

// anotherCount has rank 0 send sent float64 into rank 1's receive of
// wanted, then a message of 1000 that rank 1 receives whole; then a
// Barrier.
func anotherCount(t *testing.T, c comm.Communicator, sent, wanted int, pinned, untouched bool) {
	t.Helper()
	what := fmt.Sprintf("a send of %d float64 into a receive of %d", sent, wanted)
	switch c.Rank() {
	case 0:
		var x devmem.Slice[float64]
		if pinned {
			pb, err := c.Device().AllocPinned(8 * sent)
			if err != nil {
				t.Fatal(err)
			}
			x = devmem.SliceOf[float64](pb)
			if err := x.CopyFrom(Values(0, sent), nil); err != nil {
				t.Fatal(err)
			}
		} else {
			x = upload(t, c, Values(0, sent))
		}
		if err := comm.Send(c, x, 1, nil); err != nil {
			t.Errorf("%s: the send: %v; want it to complete", what, err)
		}
		x.Free()
	case 1:
		y := Poisoned(t, c.Device(), wanted)
		err := comm.Recv(c, y, 0, nil)
		var ce *comm.Error
		if !errors.Is(err, comm.ErrMismatch) || !errors.As(err, &ce) || ce.Rank != 1 {
			t.Errorf("%s: the receive: %v; want a *comm.Error of rank 1 wrapping ErrMismatch", what, err)
		}
		if untouched {
			Expect(t, what+": the refused receive's buffer", y, slices.Repeat([]float64{Poison}, wanted))
		}
		y.Free()
	}
	// The pair is in step: the next message arrives whole.
	const next = 1000
	switch c.Rank() {
	case 0:
		x := upload(t, c, Values(7, next))
		if err := comm.Send(c, x, 1, nil); err != nil {
			t.Errorf("after %s: the next send: %v", what, err)
		}
		x.Free()
	case 1:
		y := Poisoned(t, c.Device(), next)
		if err := comm.Recv(c, y, 0, nil); err != nil {
			t.Errorf("after %s: the next receive: %v", what, err)
		}
		Expect(t, "the message after "+what, y, Values(7, next))
		y.Free()
	}
	if err := c.Barrier(nil); err != nil {
		t.Fatalf("Barrier after %s: %v", what, err)
	}
}

// BadOptions fail on the rank that gives them, before MPI, changing nothing.
func BadOptions(t *testing.T, backend string) {
	RankOnly(t)
	for _, o := range []comm.Option{comm.WithChunkBytes(-1), comm.WithChunkBytes(1 << 31), comm.WithTimeout(-time.Second), comm.WithNodeBytes(-2), comm.WithStageReduceBytes(-2)} {
		c, err := comm.Open(backend, o)
		var ce *comm.Error
		if c != nil || !errors.Is(err, comm.ErrInvalidArgument) || !errors.As(err, &ce) || ce.Backend != backend {
			t.Errorf("Open with a bad option: %v, %v; want a %s *comm.Error wrapping ErrInvalidArgument", c, err, backend)
		}
	}
}

// Scenarios that end the job: Timeout runs only when the parent asks for
// it, and every rank that times out ends the job through Close.

// Timeout makes the last rank skip a collective (scenario "collective") or
// never send what rank 0 waits for (scenario "recv"; "ipc-window": two
// receives of one GroupP2P through the IPC path): the other ranks get
// ErrTimeout naming it, print it, and Close ends the job with MPI_Abort.
func Timeout(t *testing.T, backend string) {
	RankOnly(t)
	scenario := Scenario()
	if scenario == "" {
		t.Skip("ends the job on purpose: run by TestUnderLauncher...Timeout")
	}
	if scenario == "node-mismatch" {
		nodeMismatch(t, backend, 3000, 100, comm.WithNodeBytes(1000))
		return
	}
	if scenario == "abort" {
		abortEndsTheJob(t, backend)
		return
	}
	opts := []comm.Option{comm.WithTimeout(2 * time.Second)}
	if scenario == "ipc-window" {
		opts = append(opts, comm.WithNodeBytes(1000)) // the IPC path's messages of a window move together
	}
	c := open(t, backend, opts...)
	last := c.Size() - 1
	x := upload(t, c, Values(c.Rank(), 1<<16))
	var err error
	switch {
	case scenario == "ipc-window" && c.Rank() == 0:
		y := upload(t, c, Values(c.Rank()+1, 1<<10))
		err = c.GroupP2P([]comm.P2P{comm.RecvSlice(last, x), comm.RecvSlice(last, y)}, nil)
	case scenario == "collective" && c.Rank() == last:
		// This rank skips the collective and leaves.
	case scenario == "collective":
		err = comm.AllReduce(c, x, x, comm.Sum, nil)
	case scenario == "recv" && c.Rank() == 0:
		err = comm.Recv(c, x, last, nil)
	}
	if err != nil {
		var ce *comm.Error
		if !errors.Is(err, comm.ErrTimeout) || !errors.As(err, &ce) || ce.Backend != backend || ce.Rank != c.Rank() {
			fmt.Fprintf(os.Stderr, "rank %d: want a %s *comm.Error wrapping ErrTimeout, got %v\n", c.Rank(), backend, err)
		}
		// Straight to the job's output: testing's buffered log would die
		// with the process.
		fmt.Fprintf(os.Stderr, "rank %d timed out: %v\n", c.Rank(), err)
		if next := c.Barrier(nil); next == nil {
			fmt.Fprintf(os.Stderr, "rank %d: Barrier on the broken communicator succeeded\n", c.Rank())
		}
	}
	c.Close() // ends the job on the ranks that timed out
}

// AbortReason is what the last rank gives Abort in the scenario "abort".
const AbortReason = "the last rank cannot go on (the abort scenario)"

// abortEndsTheJob: with no timeout anywhere, every rank but the last waits
// in an AllReduce the last never joins; the last aborts the job instead
// (comm.Aborter), which must end every process with MPI_Abort, its reason
// said, where the others would otherwise wait for ever.
func abortEndsTheJob(t *testing.T, backend string) {
	c := open(t, backend)
	last := c.Size() - 1
	if c.Rank() == last {
		time.Sleep(300 * time.Millisecond) // the others are waiting by now
		if !comm.Abort(c, errors.New(AbortReason)) {
			fmt.Fprintf(os.Stderr, "rank %d: the %s backend's communicator has no Abort: want one\n", c.Rank(), backend)
			os.Exit(3)
		}
		fmt.Fprintf(os.Stderr, "rank %d: Abort returned: want it to end the job\n", c.Rank())
		os.Exit(3)
	}
	x := upload(t, c, Values(c.Rank(), 1<<10))
	err := comm.AllReduce(c, x, x, comm.Sum, nil)
	fmt.Fprintf(os.Stderr, "rank %d: the AllReduce the last rank never joined returned %v: want the job ended by its abort\n", c.Rank(), err)
	os.Exit(3)
}

// nodeMismatch: rank 0 sends sent float64s through the node path, the
// last rank receives expected, fewer, through MPI (its count is below the
// node path's). The receive is ErrMismatch with its buffer untouched, the
// sender's chunks are left in flight in its ring, so the communicator is
// broken, and closing it ends the job with the reason, instead of the pair
// hanging at its next message.
func nodeMismatch(t *testing.T, backend string, sent, expected int, opts ...comm.Option) {
	c := open(t, backend, append(opts, comm.WithTimeout(5*time.Second))...)
	last := c.Size() - 1
	switch c.Rank() {
	case 0:
		x := upload(t, c, Values(0, sent))
		if err := comm.Send(c, x, last, nil); err != nil {
			fmt.Fprintf(os.Stderr, "rank 0: the send failed: %v\n", err)
		}
	case last:
		x := upload(t, c, slices.Repeat([]float64{-7.25}, expected))
		err := comm.Recv(c, x, 0, nil)
		if !errors.Is(err, comm.ErrMismatch) {
			fmt.Fprintf(os.Stderr, "rank %d: want ErrMismatch, got %v\n", c.Rank(), err)
		}
		got, herr := x.ToHost(nil)
		if herr != nil || !slices.Equal(got, slices.Repeat([]float64{-7.25}, expected)) {
			fmt.Fprintf(os.Stderr, "rank %d: the refused receive changed its buffer (%v)\n", c.Rank(), herr)
		}
		fmt.Fprintf(os.Stderr, "rank %d mismatch: %v\n", c.Rank(), err)
		if next := comm.Recv(c, x, 0, nil); next == nil {
			fmt.Fprintf(os.Stderr, "rank %d: a receive on the broken communicator succeeded\n", c.Rank())
		}
	}
	c.Close() // ends the job on the last rank
}

// NodePath moves point-to-point messages between the ranks of one node (all
// of a test job's) through the node path: a ring of rank r to r+1 of
// several sizes (one chunk, many chunks, more chunks than the ring has
// slots, not a whole number of chunks), three messages after each other to
// one peer in one GroupP2P, stream-ordered sends, receives whose count
// differs from the sender's (ErrMismatch, the buffer untouched, the ring
// still in step for the next message), and the node path turned off by one
// rank's option, which turns it off on every rank.
func NodePath(t *testing.T, backend string) {
	RankOnly(t)
	const chunk, nodeMin = 4096, 1000
	c := open(t, backend, comm.WithChunkBytes(chunk), comm.WithNodeBytes(nodeMin))
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	mc := c.(*mpicomm.Comm)
	if got := mc.NodeBytes(); got != nodeMin {
		t.Fatalf("NodeBytes() = %d on a job of one node, want %d", got, nodeMin)
	}
	p, r := c.Size(), c.Rank()
	next, prev := (r+1)%p, (r+p-1)%p
	poison := func(n int) devmem.Slice[float64] { return Poisoned(t, c.Device(), n) }
	// Sizes in float64s: below nodeMin (MPI), one chunk, a chunk and a
	// bit, exactly the four slots, and 11.5 rings' worth.
	for _, n := range []int{100, 512, 513, 4 * 512, 23*256 + 3, 46 * 512} {
		send := upload(t, c, Values(r*1000+n, n))
		recv := poison(n)
		err := c.GroupP2P([]comm.P2P{comm.SendSlice(next, send), comm.RecvSlice(prev, recv)}, nil)
		if err != nil {
			t.Fatalf("ring exchange of %d float64s: %v", n, err)
		}
		Expect(t, fmt.Sprintf("%d float64s from rank %d", n, prev), recv, Values(prev*1000+n, n))
		send.Free()
		recv.Free()
	}
	// Three messages to one peer, in one call, and a stream-ordered send
	// behind a host function that holds its stream.
	sizes := []int{3000, 130, 9000}
	var ps []comm.P2P
	var recvs []devmem.Slice[float64]
	for i, n := range sizes {
		ps = append(ps, comm.SendSlice(next, upload(t, c, Values(r*77+i, n))))
		recvs = append(recvs, poison(n))
		ps = append(ps, comm.RecvSlice(prev, recvs[i]))
	}
	if err := c.GroupP2P(ps, nil); err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		Expect(t, fmt.Sprintf("message %d of the group from rank %d", i, prev), recvs[i], Values(prev*77+i, n))
	}
	StreamOrderedSend(t, c, next, prev)
	// Counts that differ, to rank 1: both the node path, then MPI against
	// the node path.
	if p >= 2 {
		CountsThatDiffer(t, c)
	}
	sent, got := mc.NodeMessages()
	if sent < 8 || got < 8 {
		t.Errorf("rank %d sent %d and received %d messages through the node path, want at least 8 each", r, sent, got)
	}

	// Collectives built from messages take the node path too, with every
	// other rank.
	BlockCollectives(t, c, "the node path", func(int) bool { return true }, mc.NodeMessages)

	// One rank turns the node path off: every rank's is off.
	opt := comm.WithNodeBytes(nodeMin)
	if r == p-1 {
		opt = comm.WithNodeBytes(-1)
	}
	off := open(t, backend, comm.WithChunkBytes(chunk), opt)
	defer off.Close()
	if got := off.(*mpicomm.Comm).NodeBytes(); got != 0 {
		t.Errorf("NodeBytes() = %d with the node path off on rank %d", got, p-1)
	}
	a, b := upload(t, off, Values(r, 5000)), upload(t, off, slices.Repeat([]float64{-7.25}, 5000))
	if err := off.GroupP2P([]comm.P2P{comm.SendSlice(next, a), comm.RecvSlice(prev, b)}, nil); err != nil {
		t.Fatal(err)
	}
	Expect(t, "exchange with the node path off", b, Values(prev, 5000))
	if s, g := off.(*mpicomm.Comm).NodeMessages(); s != 0 || g != 0 {
		t.Errorf("node path off, yet %d sent and %d received through it", s, g)
	}
}

// StreamOrderedSend sends 7000 float64s to next and receives as many from
// prev on a stream that a host function holds, overwrites the sent buffer
// after the send on the same stream, and checks that the send read it first.
func StreamOrderedSend(t *testing.T, c comm.Communicator, next, prev int) {
	t.Helper()
	dev, r := c.Device(), c.Rank()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	const ns = 7000
	data, later, recv := Upload(t, dev, Values(r+5000, ns)), Upload(t, dev, Values(r+6000, ns)), Poisoned(t, dev, ns)
	gate := make(chan struct{})
	if err := s.HostFunc(func() error { <-gate; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.GroupP2P([]comm.P2P{comm.SendSlice(next, data), comm.RecvSlice(prev, recv)}, s); err != nil {
		t.Fatal(err)
	}
	// Overwritten after the send on the same stream: the send must have read first.
	if err := devmem.Copy(data.Buffer(), later.Buffer(), s); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	Expect(t, "stream-ordered receive", recv, Values(prev+5000, ns))
	if err := errors.Join(s.Destroy(), data.Free(), later.Free(), recv.Free()); err != nil {
		t.Error(err)
	}
}

// CountsThatDiffer, between ranks 0 and 1 (the others do nothing): rank 0
// sends 3000 float64s where rank 1 expects 3500, then 100 where rank 1
// expects 2000, then 2000 where rank 1 expects 20 (160 bytes: under a node
// path's threshold the receive is staged, and its first chunk must take the
// sender's IPC control message whole), each
// ErrMismatch with the buffer untouched; then 2500 that arrive whole.
func CountsThatDiffer(t *testing.T, c comm.Communicator) {
	countsThatDiffer(t, c, nil, false, countsCases)
}

// countsCases are CountsThatDiffer's messages: the float64s rank 0 sends
// and those rank 1 expects.
var countsCases = [][2]int{{3000, 3500}, {100, 2000}, {2000, 20}, {2500, 2500}}

// CountOverSeveralChunks: rank 0 sends sent float64s where rank 1 expects
// expected, each ErrMismatch with the buffer untouched, then 2500 that
// arrive whole; for a receive that the pipeline posts as several chunks
// (the ones after the first are cancelled when the first refuses).
func CountOverSeveralChunks(t *testing.T, c comm.Communicator, sent, expected int) {
	countsThatDiffer(t, c, nil, false, [][2]int{{sent, expected}, {2500, 2500}})
}

// CountsThatDifferFromPinned is CountsThatDiffer with rank 0 sending from
// pinned host memory (AllocPinned), which the IPC path cannot export: its
// control message says that the bytes follow through the pipeline, and a
// receive of another count takes and drops them, so that the next message
// still arrives whole.
func CountsThatDifferFromPinned(t *testing.T, c comm.Communicator) {
	countsThatDiffer(t, c, nil, true, countsCases)
}

// CountsThatDifferOnStreams is CountsThatDiffer with every send and receive
// ordered on a stream of its rank's, each call's error that stream's next
// Synchronize's, on both sides.
func CountsThatDifferOnStreams(t *testing.T, c comm.Communicator) {
	t.Helper()
	if c.Rank() > 1 {
		return
	}
	s, err := c.Device().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	countsThatDiffer(t, c, s, false, countsCases)
	if err := s.Destroy(); err != nil {
		t.Error(err)
	}
}

func countsThatDiffer(t *testing.T, c comm.Communicator, s *devmem.Stream, pinned bool, cases [][2]int) {
	t.Helper()
	r, dev := c.Rank(), c.Device()
	if r > 1 {
		return
	}
	// done is a call's error: at once on no stream, else the stream's.
	done := func(err error) error {
		if err == nil && s != nil {
			err = s.Synchronize()
		}
		return err
	}
	for _, cs := range cases {
		st := struct{ sent, expected int }{cs[0], cs[1]}
		if r == 0 {
			var buf devmem.Slice[float64]
			if pinned {
				pb, err := dev.AllocPinned(8 * st.sent)
				if err != nil {
					t.Fatal(err)
				}
				buf = devmem.SliceOf[float64](pb)
				if err := buf.CopyFrom(Values(11, st.sent), nil); err != nil {
					t.Fatal(err)
				}
			} else {
				buf = Upload(t, dev, Values(11, st.sent))
			}
			// As with MPI, the send completes; the receive says why.
			if err := done(comm.Send(c, buf, 1, s)); err != nil {
				t.Errorf("send of %d float64s: %v", st.sent, err)
			}
			buf.Free()
			continue
		}
		buf := Poisoned(t, dev, st.expected)
		err := done(comm.Recv(c, buf, 0, s))
		if st.sent == st.expected {
			if err != nil {
				t.Errorf("receive after the mismatches: %v", err)
			}
			Expect(t, "receive after the mismatches", buf, Values(11, st.sent))
		} else {
			if !errors.Is(err, comm.ErrMismatch) {
				t.Errorf("receive of %d float64s where %d were sent: %v, want ErrMismatch", st.expected, st.sent, err)
			}
			Expect(t, fmt.Sprintf("buffer of a refused receive (%d sent, %d expected)", st.sent, st.expected), buf, slices.Repeat([]float64{Poison}, st.expected))
		}
		buf.Free()
	}
	// Nothing of a refused message is left behind (a chunk no receive
	// took): by the last message's arrival, shared memory has delivered
	// every earlier one.
	if u, ok := c.(interface{ Unreceived(int) (bool, error) }); ok && r == 1 {
		if left, err := u.Unreceived(0); err != nil || left {
			t.Errorf("after the counts that differ, a message of rank 0's no receive took: %v (%v)", left, err)
		}
	}
}

// BlockCollectives runs AllGather, AllToAll, Gather (to rank 0) and Scatter
// (from the last rank) of blocks of 700 float64s (5600 bytes: two 4 KiB
// chunks) to and from every other rank and checks every block; and it
// checks that counter, the messages sent and received through path, grew by
// a block for each that moved between this rank and a rank q that path
// reaches (reaches(q)): AllGather and AllToAll one each way with each such
// rank, Gather one to rank 0, Scatter one from the last rank. Where every
// pair of the communicator reaches through the IPC path (IPCAll), the four
// go as collectives of that path instead, each rank copying its blocks out
// of the senders' buffers: then no message moves, and the IPC path's
// collectives grow by four on every rank.
func BlockCollectives(t *testing.T, c comm.Communicator, path string, reaches func(q int) bool, counter func() (sent, got int64)) {
	t.Helper()
	type ipcCollectives interface {
		IPCAll() bool
		IPCCollectives() int64
		NodeBytes() int
	}
	const nb = 700
	ic, viaIPC := c.(ipcCollectives)
	viaIPC = viaIPC && ic.IPCAll() && ic.NodeBytes() > 0 && nb*8 >= ic.NodeBytes()
	var collectives0 int64
	if viaIPC {
		collectives0 = ic.IPCCollectives()
	}
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	concat := func(seed func(q int) int) []float64 {
		var v []float64
		for q := range p {
			v = append(v, Values(seed(q), nb)...)
		}
		return v
	}
	reached := int64(0)
	for q := range p {
		if q != r && reaches(q) {
			reached++
		}
	}
	sent, got := counter()
	mine := Upload(t, dev, Values(r+900, nb))
	all := Poisoned(t, dev, nb*p)
	if err := comm.AllGather(c, mine, all, nil); err != nil {
		t.Fatal(err)
	}
	Expect(t, "AllGather through "+path, all, concat(func(q int) int { return q + 900 }))
	a2aSend, a2aRecv := Upload(t, dev, concat(func(q int) int { return 100*r + q })), Poisoned(t, dev, nb*p)
	if err := comm.AllToAll(c, a2aSend, a2aRecv, nil); err != nil {
		t.Fatal(err)
	}
	Expect(t, "AllToAll through "+path, a2aRecv, concat(func(q int) int { return 100*q + r }))
	gathered := Poisoned(t, dev, nb*p)
	if err := comm.Gather(c, mine, gathered, 0, nil); err != nil {
		t.Fatal(err)
	}
	if r == 0 {
		Expect(t, "Gather through "+path, gathered, concat(func(q int) int { return q + 900 }))
	}
	scattered := Poisoned(t, dev, nb)
	if err := comm.Scatter(c, a2aSend, scattered, p-1, nil); err != nil {
		t.Fatal(err)
	}
	Expect(t, "Scatter through "+path, scattered, Values(100*(p-1)+r, nb))
	wantS, wantG := 2*reached, 2*reached
	if r != 0 && reaches(0) {
		wantS++
	}
	if r == 0 {
		wantG += reached
	}
	if r == p-1 {
		wantS += reached
	}
	if r != p-1 && reaches(p-1) {
		wantG++
	}
	if viaIPC {
		wantS, wantG = 0, 0
		if n := ic.IPCCollectives() - collectives0; n != 4 {
			t.Errorf("rank %d: %d of the 4 block collectives went through the IPC path's collectives, with every pair reaching", r, n)
		}
	}
	if s2, g2 := counter(); s2-sent != wantS || g2-got != wantG {
		t.Errorf("rank %d: collectives' blocks through %s: %d sent, %d received; want %d, %d (IPC collectives %v)", r, path, s2-sent, g2-got, wantS, wantG, viaIPC)
	}
	if err := errors.Join(mine.Free(), all.Free(), a2aSend.Free(), a2aRecv.Free(), gathered.Free(), scattered.Free()); err != nil {
		t.Error(err)
	}
}

// StreamOrderedP2P runs Send and Recv on streams as a GPU program makes
// them, between ranks 0 and 1 (the others only open and close): a ping-pong
// of 8 B, 4 KiB and 64 KiB messages whose receiver copies what arrived on
// the same stream and sends the copy back (later work on a stream waits for
// a receive still pending), data checked each round against poisoned
// buffers; a run of small messages posted without synchronizing, received
// in order; and a receive of the wrong size, whose call returns and whose
// Synchronize reports ErrMismatch, with the next message arriving whole. In
// the cudaaware backend a call on a stream with nothing pending is posted at
// once and a small receive not yet complete waits for the Synchronize.
func StreamOrderedP2P(t *testing.T, backend string) {
	RankOnly(t)
	c := open(t, backend)
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	me := c.Rank()
	if me > 1 {
		return
	}
	peer := 1 - me
	dev := c.Device()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	alloc := func(n int, fill byte) devmem.Buffer {
		b, err := dev.Alloc(n)
		if err == nil {
			err = devmem.Memset(b, fill, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free() })
		return b
	}
	read := func(b devmem.Buffer) []byte {
		got := make([]byte, b.Len())
		if err := devmem.CopyToHost(got, b, nil); err != nil {
			t.Fatal(err)
		}
		return got
	}
	const poison = 0xA5
	for _, n := range []int{8, 4096, 65536} {
		in, out := alloc(n, poison), alloc(n, poison)
		for round := range 10 {
			rng := rand.New(rand.NewPCG(uint64(n), uint64(round)))
			want := make([]byte, n)
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			if err := errors.Join(devmem.Memset(in, poison, nil), devmem.Memset(out, poison, nil)); err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("%d B, round %d", n, round)
			if me == 0 {
				err = errors.Join(devmem.CopyFromHost(out, want, s),
					c.Send(out, n, comm.Uint8, peer, s), c.Recv(in, n, comm.Uint8, peer, s), s.Synchronize())
			} else {
				err = errors.Join(c.Recv(in, n, comm.Uint8, peer, s), devmem.Copy(out, in, s),
					c.Send(out, n, comm.Uint8, peer, s), s.Synchronize())
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if got := read(in); !slices.Equal(got, want) {
				i := 0
				for got[i] == want[i] {
					i++
				}
				t.Fatalf("%s: rank %d received byte %d = %#x, want %#x", what, me, i, got[i], want[i])
			}
		}
	}

	const msgs = 64
	row := alloc(8*msgs, poison)
	for i := range msgs {
		v, _ := row.Slice(8*i, 8)
		if me == 0 {
			if err := devmem.CopyFromHost(v, []byte{byte(i), 1, 2, 3, 4, 5, 6, byte(i * 3)}, nil); err != nil {
				t.Fatal(err)
			}
			err = c.Send(v, 8, comm.Uint8, peer, s)
		} else {
			err = c.Recv(v, 8, comm.Uint8, peer, s)
		}
		if err != nil {
			t.Fatalf("message %d of %d: %v", i, msgs, err)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("%d small messages: %v", msgs, err)
	}
	got := read(row)
	for i := range msgs {
		if want := []byte{byte(i), 1, 2, 3, 4, 5, 6, byte(i * 3)}; !slices.Equal(got[8*i:8*i+8], want) {
			t.Fatalf("message %d of %d arrived as %v, want %v", i, msgs, got[8*i:8*i+8], want)
		}
	}

	const sent, wanted = 3, 5
	x := alloc(8*wanted, poison)
	if me == 0 {
		err = errors.Join(c.Send(x, sent, comm.Float64, peer, s), s.Synchronize())
		if err != nil {
			t.Fatal(err)
		}
	} else {
		if err := c.Recv(x, wanted, comm.Float64, peer, s); err != nil {
			t.Fatalf("stream-ordered Recv of %d float64 from a Send of %d returned %v at the call; want the error from Synchronize", wanted, sent, err)
		}
		var ce *comm.Error
		if err := s.Synchronize(); !errors.Is(err, comm.ErrMismatch) || !errors.As(err, &ce) || ce.Rank != 1 {
			t.Errorf("Synchronize after a stream-ordered Recv of %d float64 from a Send of %d: %v; want a *comm.Error of rank 1 wrapping ErrMismatch", wanted, sent, err)
		}
	}
	// The message numbers stay in step: the next message arrives whole.
	want := []byte{9, 8, 7, 6, 5, 4, 3, 2}
	y := alloc(8, poison)
	if me == 0 {
		err = errors.Join(devmem.CopyFromHost(y, want, nil), c.Send(y, 1, comm.Float64, peer, s), s.Synchronize())
	} else {
		err = errors.Join(c.Recv(y, 1, comm.Float64, peer, s), s.Synchronize())
	}
	if err != nil {
		t.Fatalf("the message after the mismatch: %v", err)
	}
	if got := read(y); !slices.Equal(got, want) {
		t.Errorf("the message after the mismatch arrived as %v, want %v", got, want)
	}
}

// NoStreamCallsAllocateNothing checks that a collective and a Send and Recv
// on no stream allocate nothing on the Go heap in a backend that hands
// device pointers to MPI (cudaaware), so that a loop of small calls pays
// for no garbage collection: AllReduce (max, in place, which gives the same
// result each time: checked after the loop), Broadcast and Barrier on
// every rank, and a ping-pong between ranks 2k and 2k+1.
func NoStreamCallsAllocateNothing(t *testing.T, backend string) {
	RankOnly(t)
	// No timeout, Debug or staging from the environment: each costs its
	// own bookkeeping.
	c := open(t, backend, comm.WithTimeout(0), comm.WithDebug(false), comm.WithStageReduceBytes(-1))
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	me, n := c.Rank(), c.Size()
	v, err := devmem.AllocSlice[float32](c.Device(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Free()
	if err := v.CopyFrom([]float32{float32(me), -float32(me)}, nil); err != nil {
		t.Fatal(err)
	}
	b := v.Buffer()
	peer := me ^ 1
	calls := []struct {
		name string
		call func() error
	}{
		{"AllReduce", func() error { return c.AllReduce(b, b, 2, comm.Float32, comm.Max, nil) }},
		{"Broadcast", func() error { return c.Broadcast(b, b, 2, comm.Float32, 0, nil) }},
		{"Barrier", func() error { return c.Barrier(nil) }}, // below thread-multiple: MPI_Ibarrier's request
		{"Send and Recv", func() error {
			switch {
			case peer >= n:
				return nil
			case me%2 == 0:
				return errors.Join(c.Send(b, 2, comm.Float32, peer, nil), c.Recv(b, 2, comm.Float32, peer, nil))
			default:
				return errors.Join(c.Recv(b, 2, comm.Float32, peer, nil), c.Send(b, 2, comm.Float32, peer, nil))
			}
		}},
	}
	multiple := c.(interface{ ThreadMultiple() bool }).ThreadMultiple()
	for _, k := range calls {
		if k.name == "Barrier" && !multiple {
			continue
		}
		var failed error
		allocs := testing.AllocsPerRun(50, func() {
			if err := k.call(); err != nil && failed == nil {
				failed = err
			}
		})
		if failed != nil {
			t.Fatalf("%s: %v", k.name, failed)
		}
		if allocs != 0 {
			t.Errorf("%s on no stream: %v allocations a call, want 0", k.name, allocs)
		}
		if k.name == "AllReduce" {
			got := make([]float32, 2)
			if err := v.CopyTo(got, nil); err != nil {
				t.Fatal(err)
			}
			if want := []float32{float32(n - 1), 0}; !slices.Equal(got, want) {
				t.Errorf("AllReduce max in place, 51 times: %v, want %v", got, want)
			}
		}
	}
}

// StagedReductions (cudaaware) checks the size from which reductions go
// through the host-staged pipeline: the ranks agree on it (the largest
// asked, off on every rank when one asks off), the default is 64 KiB with
// Open MPI 4 on a GPU and off elsewhere, reductions from that size go staged
// and smaller ones to MPI, both with the right results, and (without
// -short) the conformance suite passes with every reduction staged.
func StagedReductions(t *testing.T, backend string) {
	RankOnly(t)
	type stager interface {
		StageReduceBytes() int
		StagedReductions() int64
	}
	me, n := mpi.World().Rank(), mpi.World().Size()
	agreed := func(want int, opts ...comm.Option) {
		t.Helper()
		c := open(t, backend, opts...)
		defer c.Close()
		if got := c.(stager).StageReduceBytes(); got != want {
			t.Errorf("rank %d with %d options: StageReduceBytes() = %d, want %d", me, len(opts), got, want)
		}
	}
	agreed(1024*n, comm.WithStageReduceBytes(1024*(me+1)))
	off := comm.WithStageReduceBytes(4096)
	if me == n-1 {
		off = comm.WithStageReduceBytes(-1)
	}
	agreed(0, off)
	if dev, err := devmem.Open("", 0); err == nil {
		def := 0
		if dev.Kind() == devmem.CUDA && strings.HasPrefix(mpi.Version(), "Open MPI v4.") {
			def = 64 << 10
		}
		agreed(def)
	}

	// A threshold of 4 KiB: AllReduce and Reduce of 512 float64s and a
	// ReduceScatter of 512/n a rank (4 KiB in all) go staged, the same of
	// 511 and 511/n a rank direct. Every result is checked element by
	// element against the sums of every rank's values, over poisoned
	// outputs.
	c := open(t, backend, comm.WithStageReduceBytes(4096))
	defer c.Close()
	s := c.(stager)
	for _, count := range []int{512, 511} {
		block := count / n
		in := upload(t, c, Values(me, count))
		out := upload(t, c, make([]float64, count))
		sum := make([]float64, count)
		for r := range n {
			for i, x := range Values(r, count) {
				sum[i] += x
			}
		}
		poison := func() {
			if err := devmem.Memset(out.Buffer(), 0xEE, nil); err != nil {
				t.Fatal(err)
			}
		}
		before := s.StagedReductions()
		poison()
		if err := c.AllReduce(in.Buffer(), out.Buffer(), count, comm.Float64, comm.Sum, nil); err != nil {
			t.Fatal(err)
		}
		Expect(t, fmt.Sprintf("AllReduce of %d", count), out, sum)
		poison()
		if err := c.Reduce(in.Buffer(), out.Buffer(), count, comm.Float64, comm.Sum, 0, nil); err != nil {
			t.Fatal(err)
		}
		if me == 0 {
			Expect(t, fmt.Sprintf("Reduce of %d", count), out, sum)
		}
		poison()
		if err := c.ReduceScatter(in.Buffer(), out.Buffer(), block, comm.Float64, comm.Sum, nil); err != nil {
			t.Fatal(err)
		}
		Expect(t, fmt.Sprintf("ReduceScatter of %d a rank", block), out, sum[me*block:(me+1)*block])
		staged := s.StagedReductions() - before
		want := int64(0)
		if count == 512 {
			want = 2 // AllReduce and Reduce
			if block*n*8 >= 4096 {
				want = 3
			}
		}
		if staged != want {
			t.Errorf("%d elements: %d reductions went through staging, want %d", count, staged, want)
		}
		in.Free()
		out.Free()
	}
	if !short() { // MPICH's busy-polling ranks would take minutes
		conformance.RunConfig(t, NewGroup(backend, comm.WithStageReduceBytes(1)), conformance.Config{Short: true})
	}
}

// SendThenClose: each even rank sends 400 KB (above the node path's
// default threshold) to the next rank on no stream and closes its
// communicator at once; the receiver posts its receive 500 ms later. A
// completed send is delivered whatever the sender does next, as in MPI:
// the receiver gets every element, and the sender's Close returns without
// error once the message is taken. Run with NoInitEnv, the sender's Close
// also ends MPI and its process exits.
func SendThenClose(t *testing.T, backend string) {
	RankOnly(t)
	const count = 400_000 / 8
	c := open(t, backend)
	r := c.Rank()
	peer := r + 1
	if r%2 == 1 {
		peer = r - 1
	}
	if peer >= c.Size() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		return
	}
	mc, _ := c.(*mpicomm.Comm)
	nodePath := mc != nil && mc.NodeBytes() > 0 && mc.NodeBytes() <= count*8
	if r%2 == 0 {
		x := upload(t, c, Values(r, count))
		err := comm.Send(c, x, peer, nil)
		if nodePath {
			if sent, _ := mc.NodeMessages(); sent != 1 {
				t.Errorf("rank %d sent %d messages through the node path, want the one of %d bytes", r, sent, count*8)
			}
		}
		start := time.Now()
		if err := errors.Join(err, c.Close(), x.Free()); err != nil {
			t.Fatalf("rank %d: Send, then Close at once: %v", r, err)
		}
		t.Logf("rank %d: Close returned after %v", r, time.Since(start).Round(time.Millisecond))
		return
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	x := upload(t, c, slices.Repeat([]float64{-7.25}, count))
	defer x.Free()
	time.Sleep(500 * time.Millisecond)
	if err := comm.Recv(c, x, peer, nil); err != nil {
		t.Fatalf("rank %d: Recv of %d bytes 500 ms after rank %d sent them and closed: %v", r, count*8, peer, err)
	}
	if nodePath {
		if _, got := mc.NodeMessages(); got != 1 {
			t.Errorf("rank %d received %d messages through the node path, want the one of %d bytes", r, got, count*8)
		}
	}
	Expect(t, fmt.Sprintf("rank %d's message, received after it closed", peer), x, Values(peer, count))
}

// UnreceivedSendFailsClose: with a timeout, a rank whose node path message
// is never received fails its Close with ErrTimeout naming the rank that
// did not take it, within about the timeout, instead of waiting forever.
func UnreceivedSendFailsClose(t *testing.T, backend string) {
	RankOnly(t)
	if Scenario() != "unreceived" {
		// The header left unreceived in MPI would match a later receive
		// on a communicator that reuses the freed one's context (MPICH).
		t.Skip("leaves a message unreceived: run alone by TestUnderLauncher/UnreceivedNodeMessageFailsClose")
	}
	const count, timeout = 400_000 / 8, time.Second
	c := open(t, backend, comm.WithTimeout(timeout))
	mc, _ := c.(*mpicomm.Comm)
	if mc == nil || mc.NodeBytes() == 0 || mc.NodeBytes() > count*8 || c.Size() < 2 {
		c.Close()
		t.Skip("no node path here: a send nobody receives blocks in MPI instead")
	}
	if c.Rank() != 0 {
		// Rank 1 never receives.
		if err := c.Close(); err != nil {
			t.Errorf("rank %d: Close: %v", c.Rank(), err)
		}
		return
	}
	x := upload(t, c, Values(0, count))
	defer x.Free()
	if err := comm.Send(c, x, 1, nil); err != nil {
		t.Fatalf("Send of %d bytes through the node path: %v", count*8, err)
	}
	start := time.Now()
	err := c.Close()
	took := time.Since(start)
	var ce *comm.Error
	if !errors.Is(err, comm.ErrTimeout) || !errors.As(err, &ce) || ce.Backend != backend || ce.Op != "Close" ||
		!strings.Contains(err.Error(), "rank 1 has taken 0 of the 1 chunks sent it") {
		t.Errorf("Close with a message rank 1 never received: %v; want a %s Close error wrapping ErrTimeout naming rank 1", err, backend)
	}
	if took < timeout || took > timeout+5*time.Second {
		t.Errorf("Close returned after %v; want about the timeout, %v", took, timeout)
	}
}

// SendThenFinalize: rank 0 sends 400 KB to rank 1 through the node path
// and calls finalize (comm/mpi's Finalize) without closing, as a program
// that ends MPI and exits; rank 1 receives 500 ms later. finalize must
// wait until the message is taken, so it returns no earlier than about
// then, and rank 1 gets every element. Run alone (NoInitEnv): finalize
// drops the program's reference to MPI, which the communicator's Close then
// ends.
func SendThenFinalize(t *testing.T, backend string, finalize func() error) {
	RankOnly(t)
	if Scenario() != "finalize" {
		t.Skip("ends MPI: run by TestUnderLauncher/SentMessageOutlivesFinalize")
	}
	const count = 400_000 / 8
	c := open(t, backend)
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	switch c.Rank() {
	case 0:
		x := upload(t, c, Values(0, count))
		defer x.Free()
		if err := comm.Send(c, x, 1, nil); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := finalize(); err != nil {
			t.Fatalf("Finalize after a Send, without Close: %v", err)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Errorf("Finalize returned after %v, before rank 1 (which receives after 500 ms) can have taken the message", took)
		}
	case 1:
		x := upload(t, c, slices.Repeat([]float64{-7.25}, count))
		defer x.Free()
		time.Sleep(500 * time.Millisecond)
		if err := comm.Recv(c, x, 0, nil); err != nil {
			t.Fatalf("Recv 500 ms after rank 0 sent and called Finalize: %v", err)
		}
		Expect(t, "rank 0's message, received after its Finalize", x, Values(0, count))
	}
}
