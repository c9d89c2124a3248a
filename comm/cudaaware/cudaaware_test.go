package cudaaware_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/all" // the backends to rank against
	"github.com/gpucomm/gpucomm/comm/cudaaware"
	gpumpi "github.com/gpucomm/gpucomm/comm/mpi"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// The TestRank... tests run in the ranks of a job that the TestUnderLauncher
// tests start, one process a rank, on the host device: there MPI moves host
// memory, which every MPI can, so the direct path runs in CI with both MPI
// families.

func TestMain(m *testing.M) { mpitest.Main(m) }

const name = cudaaware.Name

func TestRegisteredAboveMPI(t *testing.T) {
	bs := comm.Backends()
	i, j := slices.Index(bs, name), slices.Index(bs, "mpi")
	if i < 0 || j < 0 || i > j {
		t.Fatalf("backends %v: want %s, then mpi", bs, name)
	}
}

func TestProbeSaysWhy(t *testing.T) {
	t.Setenv("GPUCOMM_DEVICE", "host")
	for _, tc := range []struct {
		env    string
		usable bool
		says   string
	}{
		{"", true, "host device"},
		{"1", true, "GPUCOMM_CUDA_AWARE=1"},
		{"0", false, "use -backend mpi (host-staged) or nccl, or an MPI built with CUDA support"},
		{"probe", true, "exchanges device buffers"},
		{"maybe", true, "want 1, 0 or probe: invalid argument; Open refuses it"},
	} {
		t.Setenv(cudaaware.AwareEnv, tc.env)
		v, err := comm.Probe(name)
		if err != nil {
			t.Fatal(err)
		}
		if !mpi.Built() {
			tc.usable, tc.says = false, "not built: rebuild with -tags mpi (Open MPI) or -tags mpich (MPICH and its ABI), with cgo enabled"
			if mpi.TaggedWithoutCgo() {
				tc.says = "not built: this binary was built with an MPI tag (-tags mpi or mpich) but without cgo"
			}
		}
		if v.Usable != tc.usable || !strings.Contains(v.Reason, tc.says) {
			t.Errorf("%s=%q: Probe %+v; want usable %v, saying %q", cudaaware.AwareEnv, tc.env, v, tc.usable, tc.says)
		}
	}
}

// A malformed GPUCOMM_CUDA_AWARE stops "auto" at this backend, whose Open
// refuses it with ErrInvalidArgument, rather than letting auto pass over to
// mpi as if the backend could not run here.
func TestAutoStopsAtAMalformedCUDAAware(t *testing.T) {
	if !mpi.Built() {
		t.Skip("MPI is not built in")
	}
	t.Setenv("GPUCOMM_DEVICE", "host")
	t.Setenv("GPUCOMM_BACKEND", "")
	t.Setenv(cudaaware.AwareEnv, "yes")
	if v, err := comm.Probe("nccl"); err == nil && v.Usable {
		t.Skip("nccl is usable here: auto tries it first")
	}
	if got, err := comm.Auto(); err != nil || got != name {
		t.Fatalf("Auto() = %q, %v with %s=yes; want %q, whose Open refuses the value", got, err, cudaaware.AwareEnv, name)
	}
}

func TestOpenWithoutMPIIsNotBuilt(t *testing.T) {
	if mpi.Built() {
		t.Skip("MPI is built in")
	}
	c, err := comm.Open(name)
	var ce *comm.Error
	if c != nil || !errors.Is(err, comm.ErrNotBuilt) || !errors.As(err, &ce) || ce.Backend != name {
		t.Fatalf("Open = %v, %v; want a %s *comm.Error wrapping ErrNotBuilt", c, err, name)
	}
}

func TestProbeRefusesTheOtherFamilysLauncher(t *testing.T) {
	mpitest.ProbeRefusesOtherLauncher(t, name)
}

func TestUnderLauncher(t *testing.T) { mpitest.UnderLauncher(t, name, 4, "rank 2 never sent") }

// A program that never calls Init: the refused Open leaves MPI up, so the
// host-staged backend its refusal names opens after it, and MPI ends with
// that communicator.
func TestUnderLauncherStagedOpensAfterTheRefusal(t *testing.T) {
	mpitest.ExpectPass(t, 2, mpitest.RunRanks(t, 2, "^TestRankStagedAfterRefusal$", time.Minute,
		mpitest.ScenarioEnv+"=fallback", mpitest.NoInitEnv+"=1"))
}

func TestRankStagedAfterRefusal(t *testing.T) {
	mpitest.RankOnly(t)
	if mpitest.Scenario() != "fallback" {
		t.Skip("needs MPI down at its start: run by TestUnderLauncherStagedOpensAfterTheRefusal")
	}
	t.Setenv(cudaaware.AwareEnv, "0")
	if c, err := comm.Open(name); c != nil || !errors.Is(err, comm.ErrNotCUDAAware) {
		t.Fatalf("Open with %s=0: %v, %v; want ErrNotCUDAAware", cudaaware.AwareEnv, c, err)
	}
	c, err := comm.Open(gpumpi.Name)
	if err != nil {
		t.Fatalf("Open(%q) after the refusal: %v", gpumpi.Name, err)
	}
	x, err := devmem.AllocSlice[int64](c.Device(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, x.Len())
	in := make([]int64, x.Len())
	for i := range in {
		in[i] = int64(i*7 + c.Rank())
		want[i] = int64(c.Size()*i*7 + c.Size()*(c.Size()-1)/2)
	}
	if err := x.CopyFrom(in, nil); err != nil {
		t.Fatal(err)
	}
	if err := comm.AllReduce(c, x, x, comm.Sum, nil); err != nil {
		t.Fatal(err)
	}
	got, err := x.ToHost(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("element %d: %d, want %d", i, got[i], want[i])
		}
	}
	if err := errors.Join(x.Free(), c.Close()); err != nil {
		t.Fatal(err)
	}
	// The last communicator closed: MPI has ended, for good.
	if c, err := comm.Open(gpumpi.Name); c != nil || !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("Open after MPI ended: %v, %v; want ErrClosed", c, err)
	}
}

func TestRankConformance(t *testing.T)           { mpitest.Conformance(t, name) }
func TestRankSmallChunks(t *testing.T)           { mpitest.SmallChunks(t, name) }
func TestRankSolver(t *testing.T)                { mpitest.Solver(t, name) }
func TestRankNodeShared(t *testing.T)            { mpitest.NodeShared(t, name) }
func TestRankStreamsKeepCallOrder(t *testing.T)  { mpitest.StreamsKeepCallOrder(t, name) }
func TestRankNothingLeftAfterClose(t *testing.T) { mpitest.NothingLeftAfterClose(t, name) }
func TestRankDebugNamesMismatch(t *testing.T)    { mpitest.DebugNamesMismatch(t, name) }
func TestRankOptionsAgree(t *testing.T)          { mpitest.OptionsAgree(t, name) }
func TestRankBadOptions(t *testing.T)            { mpitest.BadOptions(t, name) }
func TestRankReceiveOfAnotherSize(t *testing.T)  { mpitest.ReceiveOfAnotherSizeIsAMismatch(t, name) }
func TestRankTimeout(t *testing.T)               { mpitest.Timeout(t, name) }
func TestRankStreamOrderedP2P(t *testing.T)      { mpitest.StreamOrderedP2P(t, name) }
func TestRankSendThenClose(t *testing.T)         { mpitest.SendThenClose(t, name) }
func TestRankNoStreamCallsAllocateNothing(t *testing.T) {
	mpitest.NoStreamCallsAllocateNothing(t, name)
}
func TestRankStagedReductions(t *testing.T) { mpitest.StagedReductions(t, name) }

// GPUCOMM_CUDA_AWARE=0 refuses on every rank, with what to do instead, and
// leaves MPI usable: the next Open works.
func TestRankRefusedWhenToldNotAware(t *testing.T) {
	mpitest.RankOnly(t)
	t.Setenv(cudaaware.AwareEnv, "0")
	c, err := comm.Open(name)
	var ce *comm.Error
	if c != nil || !errors.Is(err, comm.ErrNotCUDAAware) || !errors.As(err, &ce) || ce.Backend != name ||
		!strings.Contains(err.Error(), "use -backend mpi (host-staged) or nccl, or an MPI built with CUDA support, e.g. Open MPI configured --with-cuda") {
		t.Fatalf("Open with %s=0: %v, %v; want a %s *comm.Error wrapping ErrNotCUDAAware that says what to do", cudaaware.AwareEnv, c, err, name)
	}
	t.Setenv(cudaaware.AwareEnv, "")
	if v := cudaaware.Probe(); v.Usable || !strings.Contains(v.Reason, "not CUDA-aware on rank 0, 1") {
		t.Errorf("Probe after the refusal: %+v; want the refusal's verdict", v)
	}
	c, err = comm.Open(name)
	if err != nil {
		t.Fatalf("Open after a refused Open: %v", err)
	}
	// The verdict of the latest Open: on the host device MPI moves host
	// memory; on a GPU, the CUDA-aware MPI said it takes device pointers.
	want := "host device"
	if c.Device().Kind() == devmem.CUDA {
		want = "CUDA support"
	}
	if v := cudaaware.Probe(); !v.Usable || !strings.Contains(v.Reason, want) {
		t.Errorf("Probe after Open on %v: %+v; want usable, saying %q", c.Device(), v, want)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

// GPUCOMM_CUDA_AWARE=probe runs the run-time check (a device-buffer exchange
// between neighbours), which on the host device passes.
func TestRankRunTimeProbeExchangesDeviceBuffers(t *testing.T) {
	mpitest.RankOnly(t)
	t.Setenv(cudaaware.AwareEnv, "probe")
	c, err := comm.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Setenv(cudaaware.AwareEnv, "")
	if v := cudaaware.Probe(); !v.Usable || !strings.Contains(v.Reason, "device-buffer exchange between ranks delivered the right bytes") {
		t.Errorf("Probe after the run-time check: %+v", v)
	}
	if st := c.Device().Stats(); st.Buffers != 0 {
		t.Errorf("the exchange left %d device buffers", st.Buffers)
	}
}
