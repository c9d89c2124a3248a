package mpitest_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/all" // the backends to rank against
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

func TestMain(m *testing.M) { mpitest.Main(m) }

// backendEnv names the backend TestRankStreamOrderedCollectiveNeitherBlocksNorWaits
// opens in the ranks.
const backendEnv = "GPUCOMM_TEST_STREAM_BACKEND"

// A stream-ordered collective neither blocks its caller until the other
// ranks arrive (an MPI call made at once on the caller's goroutine would)
// nor waits for a later call of its rank to start (work left for the next
// Synchronize would): either way the rank body below never ends, and the
// launcher's limit fails the job. Both MPI backends, two ranks on the host
// device (or on the GPU that GPUCOMM_DEVICE names, where cudaaware must be
// refused unless the MPI is CUDA-aware), with every core and with
// GOMAXPROCS=1 (where the stream's goroutine can only run when the caller's
// thread blocks in MPI).
func TestStreamOrderedCollectivesUnderLauncher(t *testing.T) {
	if !mpi.Built() {
		t.Skip("MPI is not built in: -tags mpi or mpich")
	}
	for _, backend := range []string{"mpi", "cudaaware"} {
		for _, procs := range []string{"", "1"} {
			name := backend
			env := []string{backendEnv + "=" + backend}
			if procs != "" {
				name += "/GOMAXPROCS=" + procs
				env = append(env, "GOMAXPROCS="+procs)
			}
			t.Run(name, func(t *testing.T) {
				mpitest.ExpectPass(t, 2, mpitest.RunRanks(t, 2, "^TestRankStreamOrderedCollectiveNeitherBlocksNorWaits$", time.Minute, env...))
			})
		}
	}
}

// onGPU is whether the ranks' device is a GPU rather than the host device.
func onGPU() bool {
	d := os.Getenv("GPUCOMM_DEVICE")
	return d != "" && d != "host"
}

func TestRankStreamOrderedCollectiveNeitherBlocksNorWaits(t *testing.T) {
	mpitest.RankOnly(t)
	backend := os.Getenv(backendEnv)
	c, err := comm.Open(backend)
	if backend == "cudaaware" && errors.Is(err, comm.ErrNotCUDAAware) && onGPU() {
		// On a GPU (the GPU runner exports GPUCOMM_DEVICE=cuda) under an MPI
		// that is not CUDA-aware, the refusal is the right answer; the
		// cudaaware case runs there under a CUDA-aware MPI in comm/cudaaware.
		t.Logf("Open(%s) on a GPU refused as it must be under this MPI: %v", backend, err)
		return
	}
	if err != nil {
		t.Fatalf("Open(%s): %v", backend, err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	if c.Size() != 2 {
		t.Fatalf("%d ranks, want 2", c.Size())
	}
	me, peer := c.Rank(), 1-c.Rank()
	dev := c.Device()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const n = 3
	values := func(seed int) []float64 { return mpitest.Values(seed, n) }
	sumOf := func(seed int) []float64 {
		v0, v1 := values(seed), values(seed+1)
		for i := range v0 {
			v0[i] += v1[i]
		}
		return v0
	}
	for round := range 20 {
		seed := 10 * round
		// Blocking: rank 0 reduces on its stream, then sends on no stream;
		// rank 1 receives that first and only then reduces.
		a := mpitest.Upload(t, dev, values(seed+me))
		m := mpitest.Poisoned(t, dev, n)
		if me == 0 {
			x := mpitest.Upload(t, dev, values(seed+5))
			err = errors.Join(comm.AllReduce(c, a, a, comm.Sum, s), c.Send(x.Buffer(), n, comm.Float64, peer, nil), s.Synchronize())
			x.Free()
		} else {
			err = c.Recv(m.Buffer(), n, comm.Float64, peer, nil)
			if err == nil {
				mpitest.Expect(t, "the message sent after a stream-ordered AllReduce", m, values(seed+5))
			}
			err = errors.Join(err, comm.AllReduce(c, a, a, comm.Sum, s), s.Synchronize())
		}
		if err != nil {
			t.Fatalf("round %d, the AllReduce before a send: %v", round, err)
		}
		mpitest.Expect(t, "AllReduce issued before a send", a, sumOf(seed))

		// Waiting: rank 0 reduces on its stream, then receives on no stream
		// before it synchronizes; rank 1 sends only once its reduction is
		// done, which needs rank 0's to have run.
		b := mpitest.Upload(t, dev, values(seed+2+me))
		if me == 0 {
			err = errors.Join(comm.AllReduce(c, b, b, comm.Sum, s), c.Recv(m.Buffer(), n, comm.Float64, peer, nil), s.Synchronize())
			if err == nil {
				mpitest.Expect(t, "the message received before Synchronize", m, values(seed+6))
			}
		} else {
			err = errors.Join(comm.AllReduce(c, b, b, comm.Sum, s), s.Synchronize())
			y := mpitest.Upload(t, dev, values(seed+6))
			err = errors.Join(err, c.Send(y.Buffer(), n, comm.Float64, peer, nil))
			y.Free()
		}
		if err != nil {
			t.Fatalf("round %d, the AllReduce before a receive: %v", round, err)
		}
		mpitest.Expect(t, "AllReduce issued before a receive", b, sumOf(seed+2))
		for _, v := range [](interface{ Free() error }){a, b, m} {
			if err := v.Free(); err != nil {
				t.Error(err)
			}
		}
	}
}
