package nccl

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/conformance"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// Rank tests that need MPI but no GPU: Open's refusals, and the whole
// bootstrap over real MPI with the in-process NCCL of fake_test.go.

func TestRankHostDeviceIsRefused(t *testing.T) {
	rankOnly(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	me := mpi.World().Rank()
	for name, open := range map[string]func() (comm.Communicator, error){
		"Open":      func() (comm.Communicator, error) { return Open(comm.WithDevice("host")) },
		"comm.Open": func() (comm.Communicator, error) { return comm.Open(Name, comm.WithDevice("host")) },
	} {
		c, err := open()
		var ce *comm.Error
		switch {
		case c != nil && c != (*Comm)(nil):
			t.Errorf("%s: opened a communicator on the host device", name)
			c.Close()
		case !errors.Is(err, comm.ErrUnsupported) || !errors.As(err, &ce):
			t.Errorf("%s: %v; want a *comm.Error wrapping ErrUnsupported", name, err)
		case ce.Backend != Name || ce.Rank != me || ce.Op != "Open":
			t.Errorf("%s: error names %q rank %d op %q; want %q rank %d Open", name, ce.Backend, ce.Rank, ce.Op, Name, me)
		case !strings.Contains(err.Error(), "nccl needs a GPU; use local or mpi on the host device"):
			t.Errorf("%s: %v; want the clear message", name, err)
		}
	}
	// Every rank got here: the refusal left no rank waiting, and MPI works.
	if err := mpi.World().Barrier(); err != nil {
		t.Errorf("MPI after the refusals: %v", err)
	}
}

// overMPI opens this rank over real MPI with the given stand-in for NCCL.
func overMPI(lib *fakeLib) (*Comm, error) {
	return open(comm.Options{Device: "host"}, openWorld, lib)
}

func TestRankOverMPIConformanceWithFakeNCCL(t *testing.T) {
	rankOnly(t)
	if n := mpi.World().Size(); n != 1 {
		t.Skipf("the fake NCCL lives in one process; %d ranks", n)
	}
	net := newFakeNet()
	group := func(noSplit bool) conformance.NewGroup {
		return func() ([]comm.Communicator, error) {
			c, err := overMPI(&fakeLib{net: net, noSplit: noSplit})
			if err != nil {
				return nil, err
			}
			return []comm.Communicator{c}, nil
		}
	}
	conformance.RunConfig(t, group(false), conformance.Config{Short: testing.Short()})
	// Split's fallback: MPI_Comm_split, then a unique id broadcast in it.
	t.Run("without ncclCommSplit", func(t *testing.T) {
		conformance.RunConfig(t, group(true), conformance.Config{Run: "^Split$"})
	})
	net.checkClean(t)
}

func TestRankOverMPIDuplicateDevicesAreRefusedByEveryRank(t *testing.T) {
	rankOnly(t)
	p, me := mpi.World().Size(), mpi.World().Rank()
	if p < 2 {
		t.Skip("needs two ranks")
	}
	net := newFakeNet()
	// Ranks 0 and 1 claim one device; the others one each.
	dev := [16]byte{0xde, 0xad, byte(max(me, 1))}
	c, err := overMPI(&fakeLib{net: net, device: dev})
	if c != nil {
		c.Close()
		t.Fatal("opened a communicator with two ranks on one device")
	}
	if !errors.Is(err, comm.ErrDuplicateGPU) || !strings.Contains(err.Error(), "ranks 0 and 1 share GPU-dead01") {
		t.Errorf("%v; want ErrDuplicateGPU naming ranks 0 and 1 and the device", err)
	}
	if n := net.calls.Load(); n != 0 {
		t.Errorf("%d NCCL calls before the refusal", n)
	}
}

func TestRankOverMPIOneRanksFailureReachesEveryRank(t *testing.T) {
	rankOnly(t)
	p, me := mpi.World().Size(), mpi.World().Rank()
	if p < 2 {
		t.Skip("needs two ranks")
	}
	lib := &fakeLib{net: newFakeNet()}
	if me == p-1 {
		lib.badDevice = fmt.Errorf("GPU fell off the bus: %w", comm.ErrLibraryNotFound)
	}
	c, err := overMPI(lib)
	if c != nil {
		c.Close()
		t.Fatal("opened a communicator though one rank failed")
	}
	if !errors.Is(err, comm.ErrLibraryNotFound) || !strings.Contains(err.Error(), "GPU fell off the bus") {
		t.Errorf("%v; want the last rank's error", err)
	}
	if me != p-1 && !strings.Contains(err.Error(), fmt.Sprintf("rank %d: ", p-1)) {
		t.Errorf("%v does not name rank %d", err, p-1)
	}
}
