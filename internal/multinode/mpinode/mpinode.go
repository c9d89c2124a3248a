// Package mpinode runs an MPI backend's test ranks across the simulated
// nodes of internal/multinode: the launcher side (UnderLauncher, called from
// a backend's TestMultinode... test) and the rank side (OnItsNode, a
// TestRank... test that checks the job really spans the nodes). Only tests
// may import it; it needs GPUCOMM_MULTINODE=1 and root, and skips without.
package mpinode

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/launcher"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
	"github.com/gpucomm/gpucomm/internal/multinode"
)

// PerNodeEnv tells the ranks of a job across the nodes how many ranks each
// node holds (unset in any other job).
const PerNodeEnv = "GPUCOMM_MULTINODE_PER_NODE"

// Nodes and ranks a node of the CI runs (issue 19: 2 nodes x 2 ranks).
const (
	Nodes   = 2
	PerNode = 2
)

// Limit bounds the ranks' tests of one job across the nodes. Open MPI's job
// takes about 1.5 minutes on an idle 2-core machine; the bound leaves room
// for a loaded one.
const Limit = 9 * time.Minute

// UnderLauncher brings Nodes nodes up and runs, PerNode ranks a node, this
// test binary's TestRankConformance (the whole conformance suite on
// backend), TestRankSolver (the heat solver's field bit for bit against one
// rank) and TestRankOnItsNode, under the launcher of the binary's MPI
// family. Under go test -short the ranks run -short too.
func UnderLauncher(t *testing.T, backend string) {
	t.Helper()
	if mpitest.InRanks() {
		t.Skip("a rank of a launched job")
	}
	if !mpi.Built() {
		t.Skip("MPI is not built in: build with -tags mpi or -tags mpich")
	}
	nodes := multinode.Up(t, Nodes)
	nodes.UseForMPITests(t, mpi.Family())
	np := Nodes * PerNode
	j := mpitest.RunRanks(t, np, "^TestRank(Conformance|Solver|OnItsNode)$", Limit,
		PerNodeEnv+"="+strconv.Itoa(PerNode))
	mpitest.ExpectPass(t, np, j)
	t.Logf("%s across %d nodes × %d ranks passed in %v", backend, Nodes, PerNode, j.Elapsed.Round(time.Millisecond))
}

// OnItsNode is the rank side: outside a job across the nodes it skips; in
// one it fails unless this rank runs on the node the placement gives it
// (rank r on node r / PerNode, nodeA first) and the launcher's local rank
// is its rank among that node's ranks.
func OnItsNode(t *testing.T) {
	mpitest.RankOnly(t)
	per, err := strconv.Atoi(os.Getenv(PerNodeEnv))
	if err != nil || per < 1 {
		t.Skipf("runs in a job across simulated nodes (%s unset)", PerNodeEnv)
	}
	rank := mpi.World().Rank()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if want := multinode.Name(rank / per); host != want {
		t.Errorf("rank %d runs on %s; want %s (%d ranks a node, nodeA first)", rank, host, want, per)
	}
	job, ok := launcher.FromEnv()
	if !ok || job.Rank != rank || job.LocalRank != rank%per {
		t.Errorf("rank %d: the launcher announced %+v (found: %v); want rank %d, local rank %d", rank, job, ok, rank, rank%per)
	}
	fmt.Printf("rank %d on %s, local rank %d\n", rank, host, job.LocalRank)
}
