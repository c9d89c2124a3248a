package mpi_test

import (
	"testing"

	"github.com/gpucomm/gpucomm/internal/multinode/mpinode"
)

// The whole conformance suite and the solver, 2 simulated nodes × 2 ranks
// (GPUCOMM_MULTINODE=1, root; scripts/multinode/ci.sh runs it).
func TestMultinodeConformance(t *testing.T) { mpinode.UnderLauncher(t, name) }

func TestRankOnItsNode(t *testing.T) { mpinode.OnItsNode(t) }
