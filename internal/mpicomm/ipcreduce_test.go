package mpicomm_test

import (
	"errors"
	"fmt"
	"os"
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

// TestMain holds MPI up in the ranks of a launched job (mpitest.Main);
// elsewhere it only runs the tests.
func TestMain(m *testing.M) { mpitest.Main(m) }

// The reductions through the IPC path, every rank reducing its part into
// every output: on the host device (2 and 3 ranks) and, with
// GPUCOMM_GPU_TESTS=1, on the GPU (2 and 4 ranks, GPUCOMM_DEVICE=cuda),
// where each is one kernels.Reduce and, with SetFusedRanks(1), the fold
// kernels and copies instead; and TestRankIPCReductionFault on the same
// device.
func TestIPCReductionsUnderLauncher(t *testing.T) {
	if !mpi.Built() {
		t.Skip("MPI is not built in: -tags mpi or mpich")
	}
	const pattern = "^TestRankIPC(Reductions|ReductionFault|OrderedChain|MixedStreams)$"
	for _, np := range []int{2, 3} {
		mpitest.ExpectPass(t, np, mpitest.RunRanks(t, np, pattern, 2*time.Minute, "GPUCOMM_DEVICE=host"))
	}
	// On a stream: host-ordered on the host device, whatever the events.
	mpitest.ExpectPass(t, 2, mpitest.RunRanks(t, 2, pattern, 2*time.Minute, "GPUCOMM_DEVICE=host", onStreamEnv+"=1"))
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		return
	}
	for _, np := range []int{2, 4} {
		mpitest.ExpectPass(t, np, mpitest.RunRanks(t, np, pattern, 3*time.Minute, "GPUCOMM_DEVICE=cuda", mpicomm.IPCEventsEnv+"=off"))
		// The same calls on a stream, ordered on the GPU with IPC events.
		mpitest.ExpectPass(t, np, mpitest.RunRanks(t, np, pattern, 3*time.Minute, "GPUCOMM_DEVICE=cuda",
			mpicomm.IPCEventsEnv+"=on", onStreamEnv+"=1"))
	}
}

// onStreamEnv makes the rank tests of this file issue their reductions on
// a stream and wait for it, where they otherwise pass none; with the IPC
// events on (mpicomm.IPCEventsEnv), on a GPU, the reductions are then
// ordered on the GPU, which the tests check they were.
const onStreamEnv = "GPUCOMM_TEST_IPC_ON_STREAM"

// caller issues a test's reductions: on no stream, or (onStreamEnv) on a
// stream of its own, waited for before the call's error is returned, so
// that a failure the stream reports counts as the call's.
type caller struct {
	s       *devmem.Stream
	c       *mpicomm.Comm
	ordered bool // the reductions must be ordered on the GPU
}

func newCaller(t *testing.T, c *mpicomm.Comm) *caller {
	t.Helper()
	if os.Getenv(onStreamEnv) != "1" {
		return &caller{c: c}
	}
	s, err := c.Device().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	on, _ := c.IPCOrdered()
	wantOn := os.Getenv(mpicomm.IPCEventsEnv) == "on" && c.Device().Kind() == devmem.CUDA
	if on != wantOn {
		t.Fatalf("IPC events on: %v, want %v", on, wantOn)
	}
	return &caller{s: s, c: c, ordered: on}
}

// do runs f on the caller's stream (nil: none) and returns its error or
// the stream's; on a stream, it checks that a reduction the path counted
// was ordered on the GPU where that is on (fused: one kernel a rank).
func (k *caller) do(t *testing.T, fused bool, f func(s *devmem.Stream) error) error {
	t.Helper()
	_, before := k.c.IPCOrdered()
	ipc0 := k.c.IPCCollectives()
	err := f(k.s)
	if k.s != nil {
		err = errors.Join(err, k.s.Synchronize())
	}
	_, after := k.c.IPCOrdered()
	counted := k.c.IPCCollectives() - ipc0
	want := int64(0)
	if k.ordered && fused {
		want = counted
	}
	if after-before != want {
		t.Errorf("%d reductions ordered on the GPU of %d through the IPC path, want %d", after-before, counted, want)
	}
	return err
}

// openIPC opens a communicator of the launched ranks on GPUCOMM_DEVICE
// (the host device when unset) with every reduction of a byte or more
// on the IPC path, and closes it at the end of t.
func openIPC(t *testing.T) *mpicomm.Comm {
	t.Helper()
	dev := os.Getenv("GPUCOMM_DEVICE")
	if dev == "" {
		dev = "host"
	}
	c, err := mpicomm.Open(mpicomm.Config{Backend: "mpi", Mode: mpicomm.Staged,
		Options: driver.Options{Device: dev, NodeBytes: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	if !c.IPCAll() {
		t.Fatal("IPCAll false on a job of one node")
	}
	return c
}

// TestRankIPCReductions: AllReduce (Sum, Avg), Reduce to rank 1 (Max) and
// ReduceScatter (Sum), out of place and in place, each through the IPC path
// (counted) with the result element by element against the host's, in
// rank order; on a GPU in one kernel and, with the cap at one rank, through
// the fold kernels and copies.
func TestRankIPCReductions(t *testing.T) {
	mpitest.RankOnly(t)
	c := openIPC(t)
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	const k = 347 // elements a rank's block (ReduceScatter) and, times the ranks, the array
	kc := newCaller(t, c)
	was := mpicomm.SetFusedRanks(0)
	t.Cleanup(func() { mpicomm.SetFusedRanks(was) })
	for _, fused := range []int{was, 1} {
		mpicomm.SetFusedRanks(fused)
		for ci, tc := range []struct {
			op  driver.Operation
			red comm.Op
		}{{driver.OpAllReduce, comm.Sum}, {driver.OpAllReduce, comm.Avg}, {driver.OpReduce, comm.Max}, {driver.OpReduceScatter, comm.Sum}} {
			for _, inPlace := range []bool{false, true} {
				name := fmt.Sprintf("%v %v (in place %v, fused up to %d ranks)", tc.op, tc.red, inPlace, fused)
				count := k*p + 1 // parts of different sizes
				if tc.op == driver.OpReduceScatter {
					count = k * p
				}
				seed := 100 + 10*ci + b2i(inPlace)
				in := func(q int) []float64 { return mpitest.Values(q*17+seed, count) }
				want := in(0)
				for q := 1; q < p; q++ {
					for i, v := range in(q) {
						if tc.red == comm.Max {
							want[i] = max(want[i], v)
						} else {
							want[i] += v
						}
					}
				}
				if tc.red == comm.Avg {
					for i := range want {
						want[i] /= float64(p)
					}
				}
				x := mpitest.Upload(t, dev, in(r))
				outN := count
				if tc.op == driver.OpReduceScatter {
					outN, want = k, want[r*k:(r+1)*k]
				}
				y := mpitest.Poisoned(t, dev, outN)
				out := y
				if inPlace {
					out = x
					if tc.op == driver.OpReduceScatter {
						var err error
						if out, err = x.Sub(r*k, (r+1)*k); err != nil {
							t.Fatal(err)
						}
					}
				}
				ipc0 := c.IPCCollectives()
				err := kc.do(t, fused >= p, func(s *devmem.Stream) error {
					switch tc.op {
					case driver.OpAllReduce:
						return comm.AllReduce(c, x, out, tc.red, s)
					case driver.OpReduce:
						return comm.Reduce(c, x, out, tc.red, 1, s)
					}
					return comm.ReduceScatter(c, x, out, tc.red, s)
				})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if tc.op != driver.OpReduce || r == 1 {
					mpitest.Expect(t, name, out, want)
				}
				if d := c.IPCCollectives() - ipc0; d != 1 {
					t.Errorf("%s: %d through the IPC path, want 1", name, d)
				}
				x.Free()
				y.Free()
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var errInjected = errors.New("injected: this rank's part failed")

// TestRankIPCReductionFault: a rank whose part of an IPC reduction fails
// after the ranks agreed to go on (on a GPU: a launch or a copy that
// failed) has left its part of every output unwritten, so no rank may
// report the reduction done. Rank 1's part fails once in each reduction,
// writing nothing (so only a real fallback gives the right result). Out of
// place every send buffer is intact, and every rank takes the host-staged
// reduction instead: the right result everywhere, counted as a fallback.
// In place on one rank (its inputs overwritten by the others' parts):
// every rank fails, the failing rank with its own error, the others
// saying another's part failed. The communicator goes on: the next
// reduction through the path is whole.
func TestRankIPCReductionFault(t *testing.T) {
	mpitest.RankOnly(t)
	c := openIPC(t)
	dev := c.Device()
	p, r := c.Size(), c.Rank()
	var err error
	kc := newCaller(t, c)
	const n = 1001
	sum := func(seed, count int) []float64 {
		return mpitest.ValuesSum(p, count, func(q int) int { return q*13 + seed })
	}
	failOnce := func() {
		fired := false
		mpicomm.SetReduceFault(func(rank int) error {
			if rank != 1 || fired {
				return nil
			}
			fired = true
			return errInjected
		})
	}
	defer mpicomm.SetReduceFault(nil)

	// Out of place: the fallback writes every output again.
	for _, op := range []driver.Operation{driver.OpAllReduce, driver.OpReduce, driver.OpReduceScatter} {
		count := n
		if op == driver.OpReduceScatter {
			count = n * p
		}
		x := mpitest.Upload(t, dev, mpitest.Values(r*13+int(op), count))
		y := mpitest.Poisoned(t, dev, min(count, n))
		ipc0, staged0 := c.IPCCollectives(), stagedOf(c)
		failOnce()
		err = kc.do(t, true, func(s *devmem.Stream) error {
			switch op {
			case driver.OpAllReduce:
				return comm.AllReduce(c, x, y, comm.Sum, s)
			case driver.OpReduce:
				// The non-roots hand their send as the recv they do not
				// have: not in place, as no output of theirs is written.
				out := y
				if r != 0 {
					out = x
				}
				return comm.Reduce(c, x, out, comm.Sum, 0, s)
			}
			return comm.ReduceScatter(c, x, y, comm.Sum, s)
		})
		if err != nil {
			t.Fatalf("%v out of place, rank 1's part failing: %v, want the host-staged result", op, err)
		}
		want := sum(int(op), count)
		switch op {
		case driver.OpAllReduce:
			mpitest.Expect(t, "AllReduce after rank 1's part failed", y, want)
		case driver.OpReduce:
			if r == 0 {
				mpitest.Expect(t, "Reduce after rank 1's part failed", y, want)
			}
		case driver.OpReduceScatter:
			mpitest.Expect(t, "ReduceScatter after rank 1's part failed", y, want[r*n:(r+1)*n])
		}
		if d, s := c.IPCCollectives()-ipc0, stagedOf(c)-staged0; d != 0 || s != 1 {
			t.Errorf("%v: %d counted through the IPC path, %d fallen back; want 0 and 1", op, d, s)
		}
		x.Free()
		y.Free()
	}

	// In place, on the last rank only (2 ranks: rank 1, the failing one;
	// 3: rank 2, another): every rank fails.
	x := mpitest.Upload(t, dev, mpitest.Values(r*13+1, n))
	y := mpitest.Poisoned(t, dev, n)
	failOnce()
	err = kc.do(t, true, func(s *devmem.Stream) error {
		if r == p-1 {
			return comm.AllReduce(c, x, x, comm.Sum, s)
		}
		return comm.AllReduce(c, x, y, comm.Sum, s)
	})
	switch {
	case err == nil:
		t.Errorf("AllReduce in place on rank %d with rank 1's part failing: no error", p-1)
	case r == 1 && !errors.Is(err, errInjected):
		t.Errorf("rank 1's error %v does not carry its own failure", err)
	case r != 1 && (errors.Is(err, errInjected) || !strings.Contains(err.Error(), "another rank could not write its part")):
		t.Errorf("rank %d's error %v does not say that another rank's part failed", r, err)
	}
	x.Free()
	y.Free()

	// The path goes on whole.
	mpicomm.SetReduceFault(nil)
	x = mpitest.Upload(t, dev, mpitest.Values(r*13+7, n))
	y = mpitest.Poisoned(t, dev, n)
	ipc0 := c.IPCCollectives()
	if err := kc.do(t, true, func(s *devmem.Stream) error { return comm.AllReduce(c, x, y, comm.Sum, s) }); err != nil {
		t.Fatal(err)
	}
	mpitest.Expect(t, "AllReduce after the failures", y, sum(7, n))
	if d := c.IPCCollectives() - ipc0; d != 1 {
		t.Errorf("the AllReduce after the failures: %d through the IPC path, want 1", d)
	}
	x.Free()
	y.Free()
}

func stagedOf(c *mpicomm.Comm) int64 {
	_, _, staged := c.IPCMessages()
	return staged
}
