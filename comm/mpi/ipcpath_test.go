package mpi_test

import (
	"fmt"
	"os"
	"slices"
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

// The IPC path (issue 22) between ranks of one node, on the host device,
// whose memory processes share as GPUs share theirs through CUDA IPC: the
// launcher side runs TestRankIPCPath with 2 and 4 ranks, with the path on
// (the default) and turned off by GPUCOMM_NODE_IPC=off on one rank, and
// the node path and conformance tests with the path on.
func TestIPCPathUnderLauncher(t *testing.T) {
	if !mpi.Built() {
		t.Skip("built without MPI")
	}
	passOnRanks(t, []int{2, 4}, "^TestRank(IPCPath|IPCWindow|IPCSmallestChunk|IPCMismatchOfSeveralChunks|NodePath|StreamOrderedP2P)$", 3*time.Minute)
	// Every message and collective of one byte or more between the ranks
	// takes the IPC path: the whole conformance suite, reductions of every
	// element type and Op included, against the host reference.
	t.Run("ConformanceThroughIPC", func(t *testing.T) {
		mpitest.ExpectPass(t, 3, mpitest.RunRanks(t, 3, "^TestRank(Conformance|IPCCollectives)$", 6*time.Minute, "GPUCOMM_NODE_BYTES=1"))
	})
	t.Run("OffOnOneRank", func(t *testing.T) {
		mpitest.ExpectPass(t, 3, mpitest.RunRanks(t, 3, "^TestRankIPCPath$", 3*time.Minute, ipcOffRankEnv+"=2"))
	})
}

// passOnRanks runs the rank tests that pattern selects in a job of np ranks,
// a subtest "np<np>" for each np of nps, and expects every rank to pass.
func passOnRanks(t *testing.T, nps []int, pattern string, limit time.Duration, env ...string) {
	t.Helper()
	for _, np := range nps {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			mpitest.ExpectPass(t, np, mpitest.RunRanks(t, np, pattern, limit, env...))
		})
	}
}

// ipcOffRankEnv names the rank that sets GPUCOMM_NODE_IPC=off itself
// before it opens (a launcher sets the environment of every rank alike).
const ipcOffRankEnv = "GPUCOMM_TEST_IPC_OFF_RANK"

// TestRankIPCPath: with a node path from 1000 bytes, messages from that
// size between ranks of the node go through the IPC path (its counters say
// so, and the cache's hits show the second round of the same buffers opened
// nothing), smaller ones through MPI; a stream-ordered send reads its buffer
// before later work on its stream overwrites it; a buffer that cannot be
// exported (AllocPinned) falls back to the pipeline; counts that differ are
// ErrMismatch with the buffer untouched and the next message whole; the
// collectives built from blocks take the path. With the path off on one
// rank (GPUCOMM_NODE_IPC=off), no pair with that rank takes it.
func TestRankIPCPath(t *testing.T) {
	mpitest.RankOnly(t)
	offRank := -1
	if v := os.Getenv(ipcOffRankEnv); v != "" {
		fmt.Sscan(v, &offRank)
	}
	if mpi.World().Rank() == offRank {
		t.Setenv(mpicomm.IPCEnv, "off")
	}
	const nodeMin = ipcRingNodeMin
	c, mc, next, prev := openIPCRing(t)
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	peers := mc.IPCPeers()
	for q := range p {
		want := q != r && r != offRank && q != offRank
		if got := q < len(peers) && peers[q]; got != want {
			t.Fatalf("rank %d reaches rank %d through the IPC path: %v, want %v (off on rank %d)", r, q, got, want, offRank)
		}
	}
	// gpucomm info's lines: the IPC path or the ring, and why.
	routes := mc.NodeRoutes()
	if len(routes) != p-1 {
		t.Fatalf("%d routes for %d other ranks: %q", len(routes), p-1, routes)
	}
	for _, line := range routes {
		var q int
		fmt.Sscanf(line, "rank %d:", &q)
		want := fmt.Sprintf("rank %d: IPC from %d bytes", q, nodeMin)
		if q == offRank || r == offRank {
			want = fmt.Sprintf("rank %d: pinned ring from %d bytes: no IPC: ", q, nodeMin)
		}
		if !strings.HasPrefix(line, want) || (r == offRank && !strings.Contains(line, mpicomm.IPCEnv+"=off on this rank")) {
			t.Errorf("route %q, want it to start %q", line, want)
		}
	}
	// With the path off on a rank, its ring neighbours use the ring.
	ipcNext, ipcPrev := peers != nil && peers[next], peers != nil && peers[prev]
	poison := func(n int) devmem.Slice[float64] { return mpitest.Poisoned(t, dev, n) }
	sent0, got0, _ := mc.IPCMessages()
	wantSent, wantGot := int64(0), int64(0)
	count := func(n int) {
		if n*8 >= nodeMin {
			wantSent += b2i(ipcNext)
			wantGot += b2i(ipcPrev)
		}
	}
	// Sizes in float64s: below nodeMin (MPI), one chunk, many chunks; each
	// twice with the same buffers.
	sizes := []int{100, 512, 5000, 46 * 512}
	var sends, recvs []devmem.Slice[float64]
	for _, n := range sizes {
		sends = append(sends, mpitest.Upload(t, dev, mpitest.Values(r*1000+n, n)))
		recvs = append(recvs, poison(n))
	}
	for round := range 2 {
		for i, n := range sizes {
			if round == 1 {
				if err := recvs[i].CopyFrom(slices.Repeat([]float64{mpitest.Poison}, n), nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.GroupP2P([]comm.P2P{comm.SendSlice(next, sends[i]), comm.RecvSlice(prev, recvs[i])}, nil); err != nil {
				t.Fatalf("round %d: ring exchange of %d float64s: %v", round, n, err)
			}
			mpitest.Expect(t, fmt.Sprintf("round %d: %d float64s from rank %d", round, n, prev), recvs[i], mpitest.Values(prev*1000+n, n))
			count(n)
		}
	}
	sent, got, staged := mc.IPCMessages()
	if sent-sent0 != wantSent || got-got0 != wantGot || staged != 0 {
		t.Fatalf("IPC path: %d sent, %d received, %d staged; want %d, %d, 0", sent-sent0, got-got0, staged, wantSent, wantGot)
	}
	st := mc.IPCCache()
	if ipcPrev && (st.Misses != 3 || st.Hits != 3 || st.InUse != 0) {
		t.Fatalf("cache after two rounds of the same three buffers: %+v, want 3 misses, 3 hits, none in use", st)
	}

	// A stream-ordered send behind a host function that holds its stream,
	// its buffer overwritten after it on the same stream.
	mpitest.StreamOrderedSend(t, c, next, prev)

	// Pinned host memory from AllocPinned cannot be exported: the send
	// goes through the pipeline, announced by the control message.
	pb, err := dev.AllocPinned(3000 * 8)
	if err != nil {
		t.Fatal(err)
	}
	pinned := devmem.SliceOf[float64](pb)
	if err := pinned.CopyFrom(mpitest.Values(r+7000, 3000), nil); err != nil {
		t.Fatal(err)
	}
	precv := poison(3000)
	if err := c.GroupP2P([]comm.P2P{comm.SendSlice(next, pinned), comm.RecvSlice(prev, precv)}, nil); err != nil {
		t.Fatal(err)
	}
	mpitest.Expect(t, "receive of a pinned send", precv, mpitest.Values(prev+7000, 3000))
	if _, _, staged := mc.IPCMessages(); staged != b2i(ipcNext)+b2i(ipcPrev) {
		t.Errorf("%d messages fell back to the pipeline, want %d (the pinned send and its receive)", staged, b2i(ipcNext)+b2i(ipcPrev))
	}

	// Counts that differ: rank 0 sends 3000 float64s where rank 1 expects
	// 3500 (both the IPC path), then 100 (MPI) where rank 1 expects 2000
	// (the IPC path), then 2000 (the IPC path) where rank 1 expects 20
	// (MPI); then a matching message arrives whole. The same from pinned
	// memory, whose bytes follow the control message through the pipeline.
	if r < 2 && peers != nil && peers[1-r] {
		mpitest.CountsThatDiffer(t, c)
		mpitest.CountsThatDifferFromPinned(t, c)
	}

	// Blocks of 700 float64s (5600 bytes) to and from every other rank,
	// those with the ranks it reaches through the IPC path.
	mpitest.BlockCollectives(t, c, "the IPC path", func(q int) bool { return peers != nil && peers[q] },
		func() (int64, int64) { s, g, _ := mc.IPCMessages(); return s, g })

	for _, b := range append(append(sends, recvs...), precv) {
		b.Free()
	}
	pinned.Free()
	if st := mc.IPCCache(); st.InUse != 0 {
		t.Errorf("cache entries still in use: %+v", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st := dev.Stats(); st.Opened != 0 || st.Buffers != 0 || st.Pinned != 0 {
		t.Errorf("left after Close: %+v", st)
	}
}

// TestRankIPCSmallestChunk: with the smallest chunk a communicator takes
// (comm.MinChunkBytes), the staging pool's smallest slot, a receive under
// the node path's threshold still takes an IPC control message whole:
// counts that differ are ErrMismatch with the buffer untouched, never MPI's
// truncation or a sender left waiting, and the next message arrives whole.
// The threshold is one chunk: a message under it is one MPI message, which
// a receive of another count takes whole (a message of several chunks that
// no receive takes breaks the communicator, with the error that says so).
// The same again with every send and receive on a stream (the messages
// ordered on the GPU where the IPC events are on: there, the matching
// message after the mismatches is counted as ordered), and from pinned
// memory, whose bytes follow the control message through the pipeline. Ranks
// 0 and 1 must reach each other through the IPC path (a ring header's
// mismatch breaks the communicator: NodePathMismatchEndsTheJob).
func TestRankIPCSmallestChunk(t *testing.T) {
	mpitest.RankOnly(t)
	c, err := comm.Open(name, comm.WithChunkBytes(comm.MinChunkBytes), comm.WithNodeBytes(comm.MinChunkBytes))
	if err != nil {
		t.Fatal(err)
	}
	mc := c.(*mpicomm.Comm)
	if got := mc.ChunkBytes(); got != comm.MinChunkBytes {
		t.Fatalf("chunk %d bytes, want %d", got, comm.MinChunkBytes)
	}
	if r := c.Rank(); r < 2 {
		if !ipcPair(mc) {
			t.Fatalf("ranks 0 and 1 do not reach each other through the IPC path (peers %v)", mc.IPCPeers())
		}
		mpitest.CountsThatDiffer(t, c)
		on, sends0, receives0 := mc.IPCOrderedP2P()
		if want := os.Getenv(mpicomm.IPCEventsEnv) == "on" && c.Device().Kind() == devmem.CUDA; on != want {
			t.Errorf("messages ordered on the GPU: %v, want %v (%s=%q on a %v device)", on, want, mpicomm.IPCEventsEnv, os.Getenv(mpicomm.IPCEventsEnv), c.Device().Kind())
		}
		mpitest.CountsThatDifferOnStreams(t, c)
		if _, sends, receives := mc.IPCOrderedP2P(); on && sends-sends0+receives-receives0 != 1 {
			t.Errorf("%d sends and %d receives ordered on the GPU, want the one matching message", sends-sends0, receives-receives0)
		}
		mpitest.CountsThatDifferFromPinned(t, c)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRankIPCMismatchOfSeveralChunks: with chunks smaller than the node
// path's threshold, a staged receive under it is several chunks, the
// pipeline posting receives ahead of the first; where the first meets an
// IPC control message (16000 bytes sent, 4000 expected: chunks of 512,
// 1024, 2048 and 416 bytes), the receive is ErrMismatch with its buffer
// untouched, the receives posted ahead are cancelled, the sender is
// answered, and the next message arrives whole.
func TestRankIPCMismatchOfSeveralChunks(t *testing.T) {
	mpitest.RankOnly(t)
	c, err := comm.Open(name, comm.WithChunkBytes(comm.MinChunkBytes), comm.WithNodeBytes(8192))
	if err != nil {
		t.Fatal(err)
	}
	if mc := c.(*mpicomm.Comm); c.Rank() < 2 {
		if !ipcPair(mc) {
			t.Fatalf("ranks 0 and 1 do not reach each other through the IPC path (peers %v)", mc.IPCPeers())
		}
		mpitest.CountOverSeveralChunks(t, c, 2000, 500)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// ipcPair reports whether ranks 0 and 1 of mc reach each other through the
// IPC path (both sides agree on it).
func ipcPair(mc *mpicomm.Comm) bool {
	peers := mc.IPCPeers()
	r := mc.Rank()
	return r < 2 && 1-r < len(peers) && peers[1-r]
}

// ipcRingNodeMin is openIPCRing's node path size: messages from 1000 bytes
// between ranks of the node take the IPC path (or the ring).
const ipcRingNodeMin = 1000

// openIPCRing opens the backend with chunks of 4096 bytes and the node path
// from ipcRingNodeMin, and returns this rank's ring neighbours.
func openIPCRing(t *testing.T) (c comm.Communicator, mc *mpicomm.Comm, next, prev int) {
	t.Helper()
	c, err := comm.Open(name, comm.WithChunkBytes(4096), comm.WithNodeBytes(ipcRingNodeMin))
	if err != nil {
		t.Fatal(err)
	}
	p, r := c.Size(), c.Rank()
	return c, c.(*mpicomm.Comm), (r + 1) % p, (r + p - 1) % p
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestRankIPCCollectives: with a node path from one byte, every reduction
// and broadcast of a job on one node goes through the IPC path (its counter
// says so); the conformance suite, run beside it with GPUCOMM_NODE_BYTES=1,
// checks every element type and Op against the host reference; here the
// counter, in place and not.
func TestRankIPCCollectives(t *testing.T) {
	mpitest.RankOnly(t)
	c, err := comm.Open(name, comm.WithNodeBytes(1))
	if err != nil {
		t.Fatal(err)
	}
	mc := c.(*mpicomm.Comm)
	if !mc.IPCAll() {
		t.Fatal("IPCAll false on a job of one node")
	}
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	const n = 1001 // not a multiple of the ranks: parts of different sizes
	x := mpitest.Upload(t, dev, mpitest.Values(r, n))
	y := mpitest.Poisoned(t, dev, n)
	before := mc.IPCCollectives()
	if err := comm.AllReduce(c, x, y, comm.Sum, nil); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, n)
	for q := range p {
		for i, v := range mpitest.Values(q, n) {
			want[i] += v
		}
	}
	mpitest.Expect(t, "AllReduce", y, want)
	if err := comm.AllReduce(c, x, x, comm.Sum, nil); err != nil { // in place
		t.Fatal(err)
	}
	mpitest.Expect(t, "AllReduce in place", x, want)
	if err := comm.Broadcast(c, x, y, 1, nil); err != nil {
		t.Fatal(err)
	}
	mpitest.Expect(t, "Broadcast", y, want)
	want3 := int64(3)
	if got := mc.IPCCollectives() - before; int64(got) != want3 {
		t.Errorf("%d collectives through the IPC path, want %d", got, want3)
	}
	x.Free()
	y.Free()
	ipcReductionOutputs(t, c, mc)
	ipcBlockCollectives(t, c, mc)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st := dev.Stats(); st.Opened != 0 || st.Buffers != 0 || st.Pinned != 0 {
		t.Errorf("left after Close: %+v", st)
	}
}

// ipcReductionOutputs: each rank writes its reduced part straight into the
// outputs that hold it, so the receive buffers peers write must be
// exportable. A pinned receive buffer (AllocPinned's memory cannot be
// exported) on a rank whose output peers write sends every rank to the
// host-staged reduction, with the right result; on a rank whose output no
// peer writes (Reduce's non-roots, ReduceScatter's every rank) it changes
// nothing.
func ipcReductionOutputs(t *testing.T, c comm.Communicator, mc *mpicomm.Comm) {
	t.Helper()
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	const n = 515
	pinnedOr := func(pin bool, count int) devmem.Slice[float64] {
		if !pin {
			return mpitest.Poisoned(t, dev, count)
		}
		pb, err := dev.AllocPinned(count * 8)
		if err != nil {
			t.Fatal(err)
		}
		y := devmem.SliceOf[float64](pb)
		if err := y.CopyFrom(slices.Repeat([]float64{mpitest.Poison}, count), nil); err != nil {
			t.Fatal(err)
		}
		return y
	}
	sum := func(seed, count int) []float64 {
		return mpitest.ValuesSum(p, count, func(q int) int { return q*31 + seed })
	}
	const root = 1
	for _, tc := range []struct {
		name    string
		op      driver.Operation
		pin     bool // this rank's receive buffer is pinned
		staged  bool // every rank falls back
		seed, k int  // k: ReduceScatter's block
	}{
		{name: "AllReduce into a pinned output on rank 1", op: driver.OpAllReduce, pin: r == 1, staged: true, seed: 1},
		{name: "Reduce into a pinned output at the root", op: driver.OpReduce, pin: r == root, staged: true, seed: 2},
		{name: "Reduce with pinned outputs at the non-roots", op: driver.OpReduce, pin: r != root, seed: 3},
		{name: "ReduceScatter into pinned outputs", op: driver.OpReduceScatter, pin: true, seed: 4, k: n},
	} {
		count := n
		if tc.op == driver.OpReduceScatter {
			count = tc.k * p
		}
		x := mpitest.Upload(t, dev, mpitest.Values(r*31+tc.seed, count))
		outN := count
		if tc.op == driver.OpReduceScatter {
			outN = tc.k
		}
		y := pinnedOr(tc.pin, outN)
		before, stagedBefore := mc.IPCCollectives(), ipcStaged(mc)
		var err error
		switch tc.op {
		case driver.OpAllReduce:
			err = comm.AllReduce(c, x, y, comm.Sum, nil)
		case driver.OpReduce:
			err = comm.Reduce(c, x, y, comm.Sum, root, nil)
		case driver.OpReduceScatter:
			err = comm.ReduceScatter(c, x, y, comm.Sum, nil)
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := sum(tc.seed, count)
		switch {
		case tc.op == driver.OpReduceScatter:
			mpitest.Expect(t, tc.name, y, want[r*tc.k:(r+1)*tc.k])
		case tc.op == driver.OpAllReduce || r == root:
			mpitest.Expect(t, tc.name, y, want)
		}
		ipcN, stagedN := mc.IPCCollectives()-before, ipcStaged(mc)-stagedBefore
		if tc.staged && (ipcN != 0 || stagedN != 1) || !tc.staged && (ipcN != 1 || stagedN != 0) {
			t.Errorf("%s: %d through the IPC path, %d fallen back to the host-staged path; want the fallback %v", tc.name, ipcN, stagedN, tc.staged)
		}
		x.Free()
		y.Free()
	}
}

// ipcBlockCollectives: AllGather (out of place and in place), Gather to
// rank 1, Scatter from rank 1 (out of place and in place at the root) and
// AllToAll go through the IPC path, every block copied out of its sender's
// buffer, and an AllGather whose send on rank 0 is pinned memory (which
// cannot be exported) through the host-staged blocks on every rank (the
// counters say which); outputs poisoned first, checked element by element,
// and what a rank does not receive left as it was.
func ipcBlockCollectives(t *testing.T, c comm.Communicator, mc *mpicomm.Comm) {
	t.Helper()
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	const n = 1001
	root := 1 % p
	before, stagedBefore := mc.IPCCollectives(), ipcStaged(mc)
	// block is rank q's block j of seed's data: q's send of an AllGather
	// (j = 0) or block j of q's send of an AllToAll or a Scatter.
	block := func(seed, q, j int) []float64 { return mpitest.Values(1000*seed+100*q+j, n) }
	concat := func(parts ...[]float64) []float64 {
		var out []float64
		for _, v := range parts {
			out = append(out, v...)
		}
		return out
	}
	blocks := func(seed, q int) []float64 { // q's whole send of size blocks
		var parts [][]float64
		for j := range p {
			parts = append(parts, block(seed, q, j))
		}
		return concat(parts...)
	}
	run := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// AllGather, out of place and in place.
	x := mpitest.Upload(t, dev, block(1, r, 0))
	y := mpitest.Poisoned(t, dev, p*n)
	run("AllGather", comm.AllGather(c, x, y, nil))
	var gathered [][]float64
	for q := range p {
		gathered = append(gathered, block(1, q, 0))
	}
	mpitest.Expect(t, "AllGather", y, concat(gathered...))
	x.Free()
	y.Free()
	all := mpitest.Poisoned(t, dev, p*n)
	mine, err := all.Sub(r*n, (r+1)*n)
	if err != nil {
		t.Fatal(err)
	}
	if err := mine.CopyFrom(block(1, r, 0), nil); err != nil {
		t.Fatal(err)
	}
	run("AllGather in place", comm.AllGather(c, mine, all, nil))
	mpitest.Expect(t, "AllGather in place", all, concat(gathered...))
	all.Free()

	// Gather to the root: only the root's output changes.
	x = mpitest.Upload(t, dev, block(2, r, 0))
	y = mpitest.Poisoned(t, dev, p*n)
	run("Gather", comm.Gather(c, x, y, root, nil))
	want := make([]float64, p*n)
	for i := range want {
		want[i] = mpitest.Poison
	}
	if r == root {
		var parts [][]float64
		for q := range p {
			parts = append(parts, block(2, q, 0))
		}
		want = concat(parts...)
	}
	mpitest.Expect(t, fmt.Sprintf("Gather to rank %d", root), y, want)
	x.Free()
	y.Free()

	// Scatter from the root, out of place, then in place at the root.
	var send devmem.Slice[float64]
	if r == root {
		send = mpitest.Upload(t, dev, blocks(3, root))
	} else {
		send = mpitest.Poisoned(t, dev, p*n)
	}
	y = mpitest.Poisoned(t, dev, n)
	run("Scatter", comm.Scatter(c, send, y, root, nil))
	mpitest.Expect(t, fmt.Sprintf("Scatter from rank %d", root), y, block(3, root, r))
	y.Free()
	if r == root {
		own, err := send.Sub(r*n, (r+1)*n)
		if err != nil {
			t.Fatal(err)
		}
		run("Scatter in place", comm.Scatter(c, send, own, root, nil))
		mpitest.Expect(t, "Scatter in place at the root", send, blocks(3, root))
	} else {
		y = mpitest.Poisoned(t, dev, n)
		run("Scatter in place", comm.Scatter(c, send, y, root, nil))
		mpitest.Expect(t, fmt.Sprintf("Scatter from rank %d, in place at the root", root), y, block(3, root, r))
		y.Free()
	}
	send.Free()

	// AllToAll: block j of rank q's send lands in block q of rank j's recv.
	x = mpitest.Upload(t, dev, blocks(4, r))
	y = mpitest.Poisoned(t, dev, p*n)
	run("AllToAll", comm.AllToAll(c, x, y, nil))
	var got [][]float64
	for q := range p {
		got = append(got, block(4, q, r))
	}
	mpitest.Expect(t, "AllToAll", y, concat(got...))
	y.Free()
	x.Free()
	if got := mc.IPCCollectives() - before; got != 6 {
		t.Errorf("%d block collectives through the IPC path, want 6", got)
	}
	// Rank 0's send cannot be exported: every rank takes the host-staged
	// blocks.
	var pinned devmem.Slice[float64]
	if r == 0 {
		pb, err := dev.AllocPinned(n * 8)
		if err != nil {
			t.Fatal(err)
		}
		pinned = devmem.SliceOf[float64](pb)
		if err := pinned.CopyFrom(block(5, r, 0), nil); err != nil {
			t.Fatal(err)
		}
	} else {
		pinned = mpitest.Upload(t, dev, block(5, r, 0))
	}
	y = mpitest.Poisoned(t, dev, p*n)
	run("AllGather of a pinned send on rank 0", comm.AllGather(c, pinned, y, nil))
	gathered = gathered[:0]
	for q := range p {
		gathered = append(gathered, block(5, q, 0))
	}
	mpitest.Expect(t, "AllGather of a pinned send on rank 0", y, concat(gathered...))
	y.Free()
	pinned.Free()
	if got := mc.IPCCollectives() - before; got != 6 {
		t.Errorf("after an AllGather of a pinned send, %d block collectives through the IPC path, want still 6", got)
	}
	// The fallback counts once on every rank, and its blocks from rank 0,
	// sent as messages of the IPC path that cannot export the buffer
	// either, each once more at both ends.
	wantStaged := int64(2)
	if r == 0 {
		wantStaged = int64(p)
	}
	if got := ipcStaged(mc) - stagedBefore; got != wantStaged {
		t.Errorf("%d collectives and messages fell back to the host-staged path, want %d (the AllGather of a pinned send, and its messages from rank 0)", got, wantStaged)
	}
}

// ipcStaged is how many messages and collectives of the IPC path went
// through the host-staged path after all.
func ipcStaged(mc *mpicomm.Comm) int64 {
	_, _, staged := mc.IPCMessages()
	return staged
}
