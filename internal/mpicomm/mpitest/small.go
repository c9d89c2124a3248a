package mpitest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// smallBlocker is what a backend on internal/mpicomm says of its staged
// collectives of one small chunk (mpicomm's smallBlocking).
type smallBlocker interface {
	ThreadMultiple() bool
	BlocksSmallCollectives() bool
	SmallBlockingCollectives() int64
}

// SmallBlocking checks the staged collectives of one small chunk, which go
// as MPI's blocking call on one pinned slot where no rank has a timeout and
// every rank's MPI is at MPI_THREAD_MULTIPLE, beside those one element
// larger, which go through the chunk pipeline. With chunks of 4 KiB:
// AllReduce (sum out of place, average in place, max), Reduce to rank 1 % n,
// ReduceScatter (out of place and in place) and Broadcast from the last
// rank (out of place and in place) of 512 float64s (4096 bytes; for
// ReduceScatter 512/n a rank) go the blocking way, the same of 513 (and
// 512/n+1 a rank) through the pipeline. Inputs are seeded random values,
// different on every rank; outputs are poisoned first and checked element
// by element. The count of blocking collectives must grow by exactly the
// calls of 4096 bytes, on every rank; and again with a timeout on rank 0
// only, when no rank may take the blocking way (they all must agree, as MPI
// matches no blocking collective with a nonblocking one) and it must not
// grow at all.
func SmallBlocking(t *testing.T, backend string) {
	RankOnly(t)
	me := mpi.World().Rank()
	for _, timed := range []bool{false, true} {
		timeout := time.Duration(0)
		if timed && me == 0 {
			timeout = time.Minute
		}
		t.Run(fmt.Sprintf("timeout on rank 0 %v", timed), func(t *testing.T) {
			c := open(t, backend, comm.WithChunkBytes(4096), comm.WithTimeout(timeout), comm.WithDebug(false))
			defer func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}()
			s, ok := c.(smallBlocker)
			if !ok {
				t.Fatalf("%s's communicator %T does not count its small blocking collectives", backend, c)
			}
			blocks := s.ThreadMultiple() && !timed
			if s.BlocksSmallCollectives() != blocks {
				t.Errorf("rank %d: BlocksSmallCollectives() = %v, want %v (MPI_THREAD_MULTIPLE %v, timeout on rank 0 %v)",
					me, s.BlocksSmallCollectives(), blocks, s.ThreadMultiple(), timed)
			}
			for _, count := range []int{512, 513} {
				before := s.SmallBlockingCollectives()
				calls := smallCollectives(t, c, count)
				got := s.SmallBlockingCollectives() - before
				want := int64(0)
				if blocks && count == 512 {
					want = int64(calls)
				}
				if got != want {
					t.Errorf("rank %d, %d float64s: %d of %d collectives went as MPI's blocking call on one slot, want %d",
						me, count, got, calls, want)
				}
			}
			if blocks {
				smallAllocations(t, c)
			}
		})
	}
}

// smallCollectives runs SmallBlocking's collectives of count float64s (for
// ReduceScatter count/n a rank, plus one past 512) and checks each; it
// returns how many it ran.
func smallCollectives(t *testing.T, c comm.Communicator, count int) int {
	t.Helper()
	me, n, dev := c.Rank(), c.Size(), c.Device()
	mine := func(seed int) []float64 { return Values(1000*seed+me, count) }
	sumOf := func(seed int) []float64 {
		s := make([]float64, count)
		for r := range n {
			for i, x := range Values(1000*seed+r, count) {
				s[i] += x
			}
		}
		return s
	}
	calls := 0
	check := func(what string, err error, got devmem.Slice[float64], want []float64) {
		t.Helper()
		calls++
		what = fmt.Sprintf("%s of %d float64s", what, count)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		if got.Len() != len(want) {
			t.Fatalf("%s: %d elements to check, want %d", what, got.Len(), len(want))
		}
		Expect(t, what, got, want)
	}

	// AllReduce, sum out of place.
	in, out := Upload(t, dev, mine(1)), Poisoned(t, dev, count)
	err := comm.AllReduce(c, in, out, comm.Sum, nil)
	check("AllReduce sum", err, out, sumOf(1))
	in.Free()
	out.Free()

	// AllReduce, average in place.
	buf := Upload(t, dev, mine(2))
	avg := sumOf(2)
	for i := range avg {
		avg[i] /= float64(n)
	}
	err = comm.AllReduce(c, buf, buf, comm.Avg, nil)
	check("AllReduce average in place", err, buf, avg)
	buf.Free()

	// AllReduce, max out of place.
	in, out = Upload(t, dev, mine(3)), Poisoned(t, dev, count)
	top := Values(3000, count)
	for r := 1; r < n; r++ {
		for i, x := range Values(3000+r, count) {
			top[i] = max(top[i], x)
		}
	}
	err = comm.AllReduce(c, in, out, comm.Max, nil)
	check("AllReduce max", err, out, top)
	in.Free()
	out.Free()

	// Reduce to rank 1 % n: only the root's output changes.
	root := 1 % n
	in, out = Upload(t, dev, mine(4)), Poisoned(t, dev, count)
	err = comm.Reduce(c, in, out, comm.Sum, root, nil)
	want := sumOf(4)
	if me != root {
		want = poisons(count)
	}
	check(fmt.Sprintf("Reduce to rank %d", root), err, out, want)
	in.Free()
	out.Free()

	// ReduceScatter, out of place and in place (recv this rank's block of
	// send), of count/n a rank: 4096 bytes in all for 512, more for 513.
	block := 512 / n
	if count > 512 {
		block++
	}
	all := func(seed int) []float64 { return Values(1000*seed+me, n*block) }
	allSum := func(seed int) []float64 {
		s := make([]float64, n*block)
		for r := range n {
			for i, x := range Values(1000*seed+r, n*block) {
				s[i] += x
			}
		}
		return s[me*block : (me+1)*block]
	}
	in, out = Upload(t, dev, all(5)), Poisoned(t, dev, block)
	err = comm.ReduceScatter(c, in, out, comm.Sum, nil)
	check(fmt.Sprintf("ReduceScatter of %d a rank", block), err, out, allSum(5))
	in.Free()
	out.Free()
	buf = Upload(t, dev, all(6))
	part, serr := buf.Sub(me*block, (me+1)*block)
	if serr != nil {
		t.Fatal(serr)
	}
	err = comm.ReduceScatter(c, buf, part, comm.Sum, nil)
	check(fmt.Sprintf("ReduceScatter in place of %d a rank", block), err, part, allSum(6))
	buf.Free()

	// Broadcast from the last rank, out of place (the root's output too)
	// and in place.
	last := n - 1
	from := Values(7000+last, count)
	in, out = Upload(t, dev, mine(7)), Poisoned(t, dev, count)
	err = comm.Broadcast(c, in, out, last, nil)
	check(fmt.Sprintf("Broadcast from rank %d", last), err, out, from)
	Expect(t, fmt.Sprintf("the root's send of a Broadcast of %d float64s", count), in, mine(7))
	in.Free()
	out.Free()
	from = Values(8000+last, count)
	buf = Poisoned(t, dev, count)
	if me == last {
		buf.Free()
		buf = Upload(t, dev, from)
	}
	err = comm.Broadcast(c, buf, buf, last, nil)
	check(fmt.Sprintf("Broadcast in place from rank %d", last), err, buf, from)
	buf.Free()
	return calls
}

// poisons is n Poisons, what an output no call may write still holds.
func poisons(n int) []float64 {
	p := make([]float64, n)
	for i := range p {
		p[i] = Poison
	}
	return p
}

// smallAllocations checks that the small collectives that go as MPI's
// blocking call allocate nothing a call once warm, on a stream and on no
// stream, on the host device: no closure for a copy on no stream, the
// staging slot from an array of free lists, the queued record of a
// stream-ordered call reused (on a small collective, allocations and their
// collection had cost about a fifth of gpucomm's own work). On a GPU the
// count is logged (the CUDA calls are not this test's), and under the race
// detector (whose sync.Pool drops a quarter of what is put back). The
// results are checked afterwards.
func smallAllocations(t *testing.T, c comm.Communicator) {
	t.Helper()
	me, n, dev := c.Rank(), c.Size(), c.Device()
	const count = 2
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	in, sum, bc := Upload(t, dev, Values(9000+me, count)), Poisoned(t, dev, count), Poisoned(t, dev, count)
	defer func() { in.Free(); sum.Free(); bc.Free() }()
	for _, st := range []*devmem.Stream{nil, s} {
		var failed error
		allocs := testing.AllocsPerRun(200, func() {
			failed = errors.Join(failed, comm.AllReduce(c, in, sum, comm.Sum, st), comm.Broadcast(c, in, bc, 0, st))
			if st != nil {
				failed = errors.Join(failed, st.Synchronize())
			}
		})
		if failed != nil {
			t.Fatalf("rank %d, stream %v: %v", me, st != nil, failed)
		}
		switch {
		case dev.Kind() != devmem.Host || raceEnabled:
			t.Logf("rank %d, stream %v: %v allocations a small AllReduce and Broadcast on %v (race detector %v)", me, st != nil, allocs, dev, raceEnabled)
		case allocs != 0:
			t.Errorf("rank %d, stream %v: a small AllReduce and Broadcast allocate %v objects, want none", me, st != nil, allocs)
		}
	}
	want := make([]float64, count)
	for r := range n {
		for i, x := range Values(9000+r, count) {
			want[i] += x
		}
	}
	Expect(t, "the last small AllReduce", sum, want)
	Expect(t, "the last small Broadcast", bc, Values(9000, count))
}
