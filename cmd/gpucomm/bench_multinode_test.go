package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
	"github.com/gpucomm/gpucomm/internal/multinode"
)

// benchJob runs gpucomm bench on np ranks of the mpi backend (host device)
// under this binary's launcher, or across the simulated nodes once
// UseForMPITests pointed it there.
func benchJob(t *testing.T, np int, extra ...string) mpitest.Job {
	t.Helper()
	if !mpi.Built() {
		t.Skip("MPI is not built in: run with -tags mpi or -tags mpich")
	}
	if testing.Short() {
		t.Skip("launches MPI jobs")
	}
	bin := mpitest.BuildCommand(t)
	argv := append([]string{bin, "bench", "-backend", "mpi", "-op", "pingpong,allreduce", "-b", "8", "-e", "4K", "-f", "8", "-n", "3", "-w", "1", "-nobaseline", "-noprogress"}, extra...)
	j := mpitest.Launch(t, np, 90*time.Second, []string{"GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND="}, argv...)
	if j.Err != nil && !j.Orphaned {
		t.Fatalf("gpucomm bench on %d ranks: %v\n%s", np, j.Err, j.Output)
	}
	return j
}

func TestBenchUnderLauncherOnOneHostIsIntraNode(t *testing.T) {
	j := benchJob(t, 2)
	host, _ := os.Hostname()
	want := "# nodes: 1: " + host + " (ranks 0-1)\n# pingpong, bw: ranks 0 (" + host + ") and 1 (" + host + "): intra-node\n# collectives: 2 ranks on 1 node(s): intra-node\n"
	if !strings.Contains(j.Output, want) || strings.Count(j.Output, "# nodes:") != 1 || !strings.Contains(j.Output, "Wrong elements : 0 OK") {
		t.Fatalf("want rank 0's table under %q, once:\n%s", want, j.Output)
	}
}

// Across 2 simulated nodes (GPUCOMM_MULTINODE=1): one rank a node puts the
// pingpong pair on two nodes; two a node keep it on nodeA while the
// collectives cross nodes.
func TestBenchMultinodeMarksInterNodePairs(t *testing.T) {
	if !mpi.Built() {
		t.Skip("MPI is not built in: run with -tags mpi or -tags mpich")
	}
	nodes := multinode.Up(t, 2)
	nodes.UseForMPITests(t, mpi.Family())

	j := benchJob(t, 2, "-json")
	start := strings.Index(j.Output, "{\n")
	end := strings.LastIndex(j.Output, "\n}")
	if start < 0 || end < start {
		t.Fatalf("no JSON report in the output:\n%s", j.Output)
	}
	var rep struct {
		Placement benchPlacement `json:"placement"`
		bench.Report
	}
	if err := json.Unmarshal([]byte(j.Output[start:end+2]), &rep); err != nil {
		t.Fatalf("the report is no JSON: %v\n%s", err, j.Output)
	}
	p := rep.Placement
	if len(p.Nodes) != 2 || p.Pair == nil || !p.Pair.InterNode || p.Pair.Hosts != [2]string{"nodeA", "nodeB"} || !p.InterNodeCollectives {
		t.Fatalf("1 rank a node: placement %+v (pair %+v); want the pair inter-node, nodeA and nodeB\n%s", p, p.Pair, j.Output)
	}
	if len(rep.Results) == 0 || rep.Wrong() != 0 {
		t.Fatalf("1 rank a node: %d results, %d wrong elements", len(rep.Results), rep.Wrong())
	}

	j = benchJob(t, 4)
	for _, want := range []string{
		"# nodes: 2: nodeA (ranks 0-1), nodeB (ranks 2-3)\n",
		"# pingpong, bw: ranks 0 (nodeA) and 1 (nodeA): intra-node\n",
		"# collectives: 4 ranks on 2 node(s): inter-node\n",
		"Wrong elements : 0 OK",
	} {
		if !strings.Contains(j.Output, want) {
			t.Fatalf("2 ranks a node: the output lacks %q:\n%s", want, j.Output)
		}
	}
	t.Logf("2 ranks a node:\n%s", j.Output)
}
