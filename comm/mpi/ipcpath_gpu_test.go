package mpi_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// The IPC path on a GPU (GPUCOMM_GPU_TESTS=1; under the machine's own,
// non-CUDA-aware Open MPI; every rank on the one GPU): 2 and 4 ranks run the
// conformance suite with every message and collective of a byte or more on
// the path (reductions of every type and Op through the fold kernels, against
// the host reference), and TestRankIPCReallocated, the H200's failure: buffers
// freed and allocated again at other sizes between reductions, two
// communicators of one process on one peer allocation, two ranges of one
// allocation, and nothing left open at the end; and TestRankIPCWindow, a
// GroupP2P's messages moved together. Then the counts that differ
// (TestRankIPCSmallestChunk, TestRankIPCMismatchOfSeveralChunks) with the
// messages' IPC events at their default (off) and on, ordered on the GPU.
func TestIPCPathOnGPUUnderLauncher(t *testing.T) {
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		t.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU")
	}
	if !mpi.Built() {
		t.Skip("built without MPI")
	}
	passOnRanks(t, []int{2, 4}, "^TestRank(Conformance|IPCReallocated|IPCWindow)$", 8*time.Minute, "GPUCOMM_DEVICE=cuda", "GPUCOMM_NODE_BYTES=1")
	for _, ev := range []string{"", "on"} {
		t.Run("Mismatches/events="+ev, func(t *testing.T) {
			passOnRanks(t, []int{2, 4}, "^TestRankIPC(SmallestChunk|MismatchOfSeveralChunks)$", 2*time.Minute, "GPUCOMM_DEVICE=cuda", mpicomm.IPCEventsEnv+"="+ev)
		})
	}
}

// The same rank test on the host device, whose OpenIPC refuses new memory
// in the place of freed memory still mapped as a GPU does
// (devmem.ErrAlreadyMapped).
func TestIPCReallocationUnderLauncher(t *testing.T) {
	if !mpi.Built() {
		t.Skip("built without MPI")
	}
	passOnRanks(t, []int{2, 4}, "^TestRankIPCReallocated$", 3*time.Minute)
}

// TestRankIPCReallocated runs on whatever device the launcher gives (the
// host device, or a GPU under TestIPCPathOnGPUUnderLauncher):
// reductions whose send buffers and scratches are freed and allocated again,
// at growing and shrinking sizes (a peer's cache keeps idle entries of the
// freed ones, where a GPU refused the new memory with
// CUDA_ERROR_ALREADY_MAPPED); a second communicator reducing the same
// buffer (its opens of the peers' buffers are hits on the first's entries);
// two halves of one allocation; every result against the host sum, every
// reduction through the path, and nothing open after Close.
func TestRankIPCReallocated(t *testing.T) {
	mpitest.RankOnly(t)
	c1, err := comm.Open(name, comm.WithNodeBytes(1))
	if err != nil {
		t.Fatal(err)
	}
	// A second communicator of the same ranks and device (the conformance
	// suite's Split): its own Comm, the process's one cache.
	c2, err := c1.Split(0, c1.Rank())
	if err != nil {
		t.Fatal(err)
	}
	m1, m2 := c1.(*mpicomm.Comm), c2.(*mpicomm.Comm)
	if !m1.IPCAll() || !m2.IPCAll() {
		t.Fatal("IPCAll false on a job of one node")
	}
	dev := c1.Device()
	p, r := c1.Size(), c1.Rank()
	sum := func(seed, n int) []float64 {
		return mpitest.ValuesSum(p, n, func(q int) int { return q*7919 + seed })
	}
	reduce := func(c comm.Communicator, what string, x devmem.Slice[float64], seed, n int) {
		t.Helper()
		y := mpitest.Poisoned(t, dev, n)
		defer y.Free()
		if err := comm.AllReduce(c, x, y, comm.Sum, nil); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		mpitest.Expect(t, what, y, sum(seed, n))
	}
	before1 := m1.IPCCollectives()
	_, _, staged0 := m1.IPCMessages()
	// Sizes in float64s: 1 MiB, 2, 0.5, 4, 1, 3; each send buffer freed
	// before the next is allocated (in its place, or over it).
	sizes := []int{128 << 10, 256 << 10, 64 << 10, 512 << 10, 128 << 10, 384 << 10}
	for i, n := range sizes {
		x := mpitest.Upload(t, dev, mpitest.Values(r*7919+i, n))
		reduce(c1, fmt.Sprintf("AllReduce %d of %d float64s", i, n), x, i, n)
		x.Free()
	}
	if got := m1.IPCCollectives() - before1; got != int64(len(sizes)) {
		t.Errorf("%d of %d reductions through the IPC path", got, len(sizes))
	}
	if _, _, staged := m1.IPCMessages(); staged != staged0 {
		t.Errorf("%d reductions fell back to the staged path", staged-staged0)
	}

	// The second communicator on the first's buffer: the peers' send
	// buffers are open already (hits); only c2's scratches are new.
	const n = 100_000
	x := mpitest.Upload(t, dev, mpitest.Values(r*7919+50, n))
	reduce(c1, "AllReduce on the first communicator", x, 50, n)
	st0 := m2.IPCCache()
	reduce(c2, "AllReduce of the same buffer on the second", x, 50, n)
	st := m2.IPCCache()
	if hits := st.Hits - st0.Hits; hits < int64(p-1) {
		t.Errorf("the second communicator's opens of the peers' send buffers: %d hits, want %d (one entry a process): %+v", hits, p-1, st)
	}
	if got := m2.IPCCollectives(); got != 1 {
		t.Errorf("%d reductions through the IPC path on the second communicator, want 1", got)
	}
	x.Free()

	// Two halves of one allocation, each reduced: two views of one entry.
	whole := mpitest.Upload(t, dev, append(mpitest.Values(r*7919+60, n), mpitest.Values(r*7919+61, n)...))
	for h := range 2 {
		half, err := whole.Sub(h*n, (h+1)*n)
		if err != nil {
			t.Fatal(err)
		}
		reduce(c2, fmt.Sprintf("AllReduce of half %d of one allocation", h), half, 60+h, n)
	}
	whole.Free()

	for _, c := range []comm.Communicator{c2, c1} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if st := dev.Stats(); st.Opened != 0 || st.Buffers != 0 || st.Pinned != 0 {
		t.Errorf("left after both Close: %+v", st)
	}
}
