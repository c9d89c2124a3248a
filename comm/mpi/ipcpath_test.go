package mpi_test

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
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			mpitest.ExpectPass(t, np, mpitest.RunRanks(t, np, "^TestRank(IPCPath|NodePath|StreamOrderedP2P)$", 3*time.Minute))
		})
	}
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

// ipcOffRankEnv names the rank that sets GPUCOMM_NODE_IPC=off itself
// before it opens (a launcher sets the environment of every rank alike).
const ipcOffRankEnv = "GPUCOMM_TEST_IPC_OFF_RANK"

func ipcValues(seed, n int) []float64 {
	r := rand.New(rand.NewPCG(uint64(seed), 22))
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(r.IntN(1<<20)) - 5e5
	}
	return v
}

const ipcPoison = -7.25

func ipcUpload(t *testing.T, dev *devmem.Device, v []float64) devmem.Slice[float64] {
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

func ipcExpect(t *testing.T, what string, s devmem.Slice[float64], want []float64) {
	t.Helper()
	got, err := s.ToHost(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

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
	const chunk, nodeMin = 4096, 1000
	c, err := comm.Open(name, comm.WithChunkBytes(chunk), comm.WithNodeBytes(nodeMin))
	if err != nil {
		t.Fatal(err)
	}
	mc := c.(*mpicomm.Comm)
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	next, prev := (r+1)%p, (r+p-1)%p
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
	poison := func(n int) devmem.Slice[float64] { return ipcUpload(t, dev, slices.Repeat([]float64{ipcPoison}, n)) }
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
		sends = append(sends, ipcUpload(t, dev, ipcValues(r*1000+n, n)))
		recvs = append(recvs, poison(n))
	}
	for round := range 2 {
		for i, n := range sizes {
			if round == 1 {
				if err := recvs[i].CopyFrom(slices.Repeat([]float64{ipcPoison}, n), nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.GroupP2P([]comm.P2P{comm.SendSlice(next, sends[i]), comm.RecvSlice(prev, recvs[i])}, nil); err != nil {
				t.Fatalf("round %d: ring exchange of %d float64s: %v", round, n, err)
			}
			ipcExpect(t, fmt.Sprintf("round %d: %d float64s from rank %d", round, n, prev), recvs[i], ipcValues(prev*1000+n, n))
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
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	const ns = 7000
	data, later, recv := ipcUpload(t, dev, ipcValues(r+5000, ns)), ipcUpload(t, dev, ipcValues(r+6000, ns)), poison(ns)
	gate := make(chan struct{})
	if err := s.HostFunc(func() error { <-gate; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.GroupP2P([]comm.P2P{comm.SendSlice(next, data), comm.RecvSlice(prev, recv)}, s); err != nil {
		t.Fatal(err)
	}
	if err := devmem.Copy(data.Buffer(), later.Buffer(), s); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	ipcExpect(t, "stream-ordered receive", recv, ipcValues(prev+5000, ns))
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}

	// Pinned host memory from AllocPinned cannot be exported: the send
	// goes through the pipeline, announced by the control message.
	pb, err := dev.AllocPinned(3000 * 8)
	if err != nil {
		t.Fatal(err)
	}
	pinned := devmem.SliceOf[float64](pb)
	if err := pinned.CopyFrom(ipcValues(r+7000, 3000), nil); err != nil {
		t.Fatal(err)
	}
	precv := poison(3000)
	if err := c.GroupP2P([]comm.P2P{comm.SendSlice(next, pinned), comm.RecvSlice(prev, precv)}, nil); err != nil {
		t.Fatal(err)
	}
	ipcExpect(t, "receive of a pinned send", precv, ipcValues(prev+7000, 3000))
	if _, _, staged := mc.IPCMessages(); staged != b2i(ipcNext)+b2i(ipcPrev) {
		t.Errorf("%d messages fell back to the pipeline, want %d (the pinned send and its receive)", staged, b2i(ipcNext)+b2i(ipcPrev))
	}

	// Counts that differ: rank 0 sends 3000 float64s where rank 1 expects
	// 3500 (both the IPC path), then 100 (MPI) where rank 1 expects 2000
	// (the IPC path); then a matching message arrives whole.
	if r < 2 && peers != nil && peers[1-r] {
		for _, step := range []struct{ sent, expected int }{{3000, 3500}, {100, 2000}, {2500, 2500}} {
			if r == 0 {
				buf := ipcUpload(t, dev, ipcValues(11, step.sent))
				if err := comm.Send(c, buf, 1, nil); err != nil {
					t.Errorf("send of %d float64s: %v", step.sent, err)
				}
				buf.Free()
				continue
			}
			buf := poison(step.expected)
			err := comm.Recv(c, buf, 0, nil)
			if step.sent == step.expected {
				if err != nil {
					t.Fatalf("receive after the mismatches: %v", err)
				}
				ipcExpect(t, "receive after the mismatches", buf, ipcValues(11, step.sent))
			} else {
				if !errors.Is(err, comm.ErrMismatch) {
					t.Fatalf("receive of %d float64s where %d were sent: %v, want ErrMismatch", step.expected, step.sent, err)
				}
				ipcExpect(t, "buffer of a refused receive", buf, slices.Repeat([]float64{ipcPoison}, step.expected))
			}
			buf.Free()
		}
	}

	// Blocks of 700 float64s (5600 bytes) to and from every other rank.
	const nb = 700
	concat := func(seed func(q int) int) []float64 {
		var v []float64
		for q := range p {
			v = append(v, ipcValues(seed(q), nb)...)
		}
		return v
	}
	reached := int64(0)
	for q := range p {
		if peers != nil && peers[q] {
			reached++
		}
	}
	sentB, gotB, _ := mc.IPCMessages()
	mine := ipcUpload(t, dev, ipcValues(r+900, nb))
	all := poison(nb * p)
	if err := comm.AllGather(c, mine, all, nil); err != nil {
		t.Fatal(err)
	}
	ipcExpect(t, "AllGather", all, concat(func(q int) int { return q + 900 }))
	a2aSend, a2aRecv := ipcUpload(t, dev, concat(func(q int) int { return 100*r + q })), poison(nb*p)
	if err := comm.AllToAll(c, a2aSend, a2aRecv, nil); err != nil {
		t.Fatal(err)
	}
	ipcExpect(t, "AllToAll", a2aRecv, concat(func(q int) int { return 100*q + r }))
	gathered := poison(nb * p)
	if err := comm.Gather(c, mine, gathered, 0, nil); err != nil {
		t.Fatal(err)
	}
	if r == 0 {
		ipcExpect(t, "Gather", gathered, concat(func(q int) int { return q + 900 }))
	}
	scattered := poison(nb)
	if err := comm.Scatter(c, a2aSend, scattered, p-1, nil); err != nil {
		t.Fatal(err)
	}
	ipcExpect(t, "Scatter", scattered, ipcValues(100*(p-1)+r, nb))
	// AllGather and AllToAll: a block each way with every peer reached;
	// Gather: one to rank 0; Scatter: one from rank p-1.
	wantS, wantG := 2*reached, 2*reached
	if r != 0 && peers != nil && peers[0] {
		wantS++
	}
	if r == 0 {
		wantG += reached
	}
	if r == p-1 {
		wantS += reached
	}
	if r != p-1 && peers != nil && peers[p-1] {
		wantG++
	}
	if s2, g2, _ := mc.IPCMessages(); s2-sentB != wantS || g2-gotB != wantG {
		t.Errorf("collectives' blocks through the IPC path: %d sent, %d received; want %d, %d", s2-sentB, g2-gotB, wantS, wantG)
	}

	for _, b := range append(append(sends, recvs...), data, later, recv, precv, mine, all, a2aSend, a2aRecv, gathered, scattered) {
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
	x := ipcUpload(t, dev, ipcValues(r, n))
	y := ipcUpload(t, dev, slices.Repeat([]float64{ipcPoison}, n))
	before := mc.IPCCollectives()
	if err := comm.AllReduce(c, x, y, comm.Sum, nil); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, n)
	for q := range p {
		for i, v := range ipcValues(q, n) {
			want[i] += v
		}
	}
	ipcExpect(t, "AllReduce", y, want)
	if err := comm.AllReduce(c, x, x, comm.Sum, nil); err != nil { // in place
		t.Fatal(err)
	}
	ipcExpect(t, "AllReduce in place", x, want)
	if err := comm.Broadcast(c, x, y, 1, nil); err != nil {
		t.Fatal(err)
	}
	ipcExpect(t, "Broadcast", y, want)
	want3 := int64(3)
	if got := mc.IPCCollectives() - before; int64(got) != want3 {
		t.Errorf("%d collectives through the IPC path, want %d", got, want3)
	}
	x.Free()
	y.Free()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st := dev.Stats(); st.Opened != 0 || st.Buffers != 0 || st.Pinned != 0 {
		t.Errorf("left after Close: %+v", st)
	}
}
