package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
	"github.com/gpucomm/gpucomm/internal/multinode"
)

// The gpucomm command across 2 simulated nodes × 2 ranks (GPUCOMM_MULTINODE=1,
// root; scripts/multinode/ci.sh runs these). GPUCOMM_MULTINODE_GPUCOMM names
// a gpucomm built for this binary's MPI family, else the test builds one.

const multinodeNodes, multinodePerNode = 2, 2

// multinodeCommand brings the nodes up and returns them with the gpucomm
// command to launch on them; it skips t where either is not possible.
func multinodeCommand(t *testing.T) (*multinode.Nodes, string) {
	t.Helper()
	if mpitest.InRanks() {
		t.Skip("a rank of a launched job")
	}
	if !mpiBuiltForTest {
		t.Skip("MPI is not built in: build with -tags mpi or -tags mpich")
	}
	nodes := multinode.Up(t, multinodeNodes)
	if bin := os.Getenv("GPUCOMM_MULTINODE_GPUCOMM"); bin != "" {
		return nodes, bin
	}
	return nodes, mpitest.BuildCommand(t)
}

// finalizeWatch is, under MPICH, the second line against its known
// finalize hang (multinode.LaunchUntil), after the ranks' own bound
// (GPUCOMM_MPI_FINALIZE_BOUND, which nodes.sh sets for MPICH jobs): the
// job's work is done once its output holds last, the start of the last
// line rank 0 prints. Under Open MPI: none.
func finalizeWatch(last string) func(string) bool {
	if mpi.Family() != multinode.MPICH {
		return nil
	}
	return func(out string) bool { return strings.Contains(out, last) }
}

// gpucomm check passes every case on both MPI backends across the nodes,
// and its IPC probe shares a buffer among one node's ranks only.
func TestMultinodeCheckPasses(t *testing.T) {
	nodes, bin := multinodeCommand(t)
	for _, backend := range []string{"mpi", "cudaaware"} {
		t.Run(backend, func(t *testing.T) {
			args := []string{bin, "check", "-backend", backend}
			if testing.Short() || mpi.Family() == "mpich" {
				args = append(args, "-short")
			}
			j := nodes.LaunchUntil(t, mpi.Family(), multinodePerNode, 5*time.Minute, finalizeWatch("\nPASS: "), []string{"GPUCOMM_DEVICE=host"}, args...)
			if (j.Err != nil && !j.Lingered) || !strings.Contains(j.Output, "PASS") || strings.Contains(j.Output, "FAIL") {
				t.Fatalf("gpucomm check -backend %s across %d nodes × %d ranks: %v; output:\n%s", backend, multinodeNodes, multinodePerNode, j.Err, j.Output)
			}
			for _, want := range []string{
				"agree: rank 0 of 4",
				"buffer opened by the node's 2 ranks through IPC handles", // one node's ranks, not all 4
			} {
				if !strings.Contains(j.Output, want) {
					t.Errorf("gpucomm check -backend %s across nodes does not say %q; output:\n%s", backend, want, j.Output)
				}
			}
		})
	}
}
