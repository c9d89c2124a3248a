package mpi_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	gpumpi "github.com/gpucomm/gpucomm/comm/mpi"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// The TestRank... tests run in the ranks of a job that the TestUnderLauncher
// tests start, one process a rank, on the host device.

func TestMain(m *testing.M) { mpitest.Main(m) }

const name = gpumpi.Name

func TestRegisteredBetweenLocalAndCUDAAware(t *testing.T) {
	i := slices.Index(comm.Backends(), name)
	if i < 0 {
		t.Fatalf("%q not among %v", name, comm.Backends())
	}
	v, err := comm.Probe(name)
	if err != nil {
		t.Fatal(err)
	}
	if v.Usable != mpi.Built() {
		t.Errorf("Probe %+v in a binary with MPI built in: %v", v, mpi.Built())
	}
	how := "not built: rebuild with -tags mpi (Open MPI) or -tags mpich (MPICH and its ABI), with cgo enabled"
	if mpi.TaggedWithoutCgo() {
		how = "not built: this binary was built with an MPI tag (-tags mpi or mpich) but without cgo (CGO_ENABLED=0, " +
			"or no C compiler on PATH, which turns cgo off), and MPI needs cgo: rebuild with CGO_ENABLED=1 and a C compiler"
	}
	if !mpi.Built() && v.Reason != how {
		t.Errorf("Probe reason %q does not say how to rebuild (%q)", v.Reason, how)
	}
	if mpi.Built() && !strings.Contains(v.Reason, "host-staged") {
		t.Errorf("Probe reason %q does not say how data moves", v.Reason)
	}
}

func TestOpenWithoutMPIIsNotBuilt(t *testing.T) {
	if mpi.Built() {
		t.Skip("MPI is built in")
	}
	c, err := comm.Open(name)
	var ce *comm.Error
	if c != nil || !errors.Is(err, comm.ErrNotBuilt) || !errors.As(err, &ce) || ce.Backend != name || !strings.Contains(err.Error(), "-tags mpi") {
		t.Fatalf("Open = %v, %v; want a %s *comm.Error wrapping ErrNotBuilt that says how to rebuild", c, err, name)
	}
}

func TestProbeRefusesTheOtherFamilysLauncher(t *testing.T) {
	mpitest.ProbeRefusesOtherLauncher(t, name)
}

func TestUnderLauncher(t *testing.T) { mpitest.UnderLauncher(t, name, 4, "rank 2 never sent it") }

func TestRankConformance(t *testing.T)              { mpitest.Conformance(t, name) }
func TestRankSmallChunks(t *testing.T)              { mpitest.SmallChunks(t, name) }
func TestRankSolver(t *testing.T)                   { mpitest.Solver(t, name) }
func TestRankNodeShared(t *testing.T)               { mpitest.NodeShared(t, name) }
func TestRankStreamsKeepCallOrder(t *testing.T)     { mpitest.StreamsKeepCallOrder(t, name) }
func TestRankNothingLeftAfterClose(t *testing.T)    { mpitest.NothingLeftAfterClose(t, name) }
func TestRankDebugNamesMismatch(t *testing.T)       { mpitest.DebugNamesMismatch(t, name) }
func TestRankOptionsAgree(t *testing.T)             { mpitest.OptionsAgree(t, name) }
func TestRankBadOptions(t *testing.T)               { mpitest.BadOptions(t, name) }
func TestRankReceiveOfAnotherSize(t *testing.T)     { mpitest.ReceiveOfAnotherSizeIsAMismatch(t, name) }
func TestRankTimeout(t *testing.T)                  { mpitest.Timeout(t, name) }
func TestRankStreamOrderedP2P(t *testing.T)         { mpitest.StreamOrderedP2P(t, name) }
func TestRankSendThenClose(t *testing.T)            { mpitest.SendThenClose(t, name) }
func TestRankUnreceivedSendFailsClose(t *testing.T) { mpitest.UnreceivedSendFailsClose(t, name) }
func TestRankSendThenFinalize(t *testing.T) {
	mpitest.SendThenFinalize(t, name, gpumpi.Finalize)
}
func TestRankNodePath(t *testing.T)      { mpitest.NodePath(t, name) }
func TestRankSmallBlocking(t *testing.T) { mpitest.SmallBlocking(t, name) }
