package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// benchArgs is a short gpucomm bench on the mpi backend.
var benchArgs = []string{"bench", "-backend", "mpi", "-op", "pingpong,bw,allreduce", "-b", "8", "-e", "4K", "-f", "8", "-n", "3", "-w", "1", "-nobaseline", "-noprogress"}

// benchJob runs gpucomm bench on np ranks of the mpi backend (host device)
// under this binary's launcher, on this host.
func benchJob(t *testing.T, np int, extra ...string) mpitest.Job {
	t.Helper()
	bin := launcherCommand(t)
	argv := append(append([]string{bin}, benchArgs...), extra...)
	j := mpitest.Launch(t, np, 90*time.Second, []string{"GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND="}, argv...)
	if j.Err != nil && !j.Orphaned {
		t.Fatalf("gpucomm bench on %d ranks: %v\n%s", np, j.Err, j.Output)
	}
	return j
}

// On one host the default pair is ranks 0 and 1, intra-node, and no line
// of the pairs' table says inter-node.
func TestBenchUnderLauncherOnOneHostIsIntraNode(t *testing.T) {
	j := benchJob(t, 4)
	host, _ := os.Hostname()
	want := "# nodes: 1: " + host + " (ranks 0-3)\n# pingpong, bw: ranks 0 (" + host + ") and 1 (" + host + "): intra-node\n# collectives: 4 ranks on 1 node(s): intra-node\n"
	if !strings.Contains(j.Output, want) || strings.Count(j.Output, "# nodes:") != 1 || !strings.Contains(j.Output, "Wrong elements : 0 OK") || !strings.Contains(j.Output, "Wrong elements of the pairs : 0 OK") {
		t.Fatalf("want rank 0's table under %q, once:\n%s", want, j.Output)
	}
	checkPairLines(t, pairLines(t, j.Output), map[string]string{"0-1": host + "," + host + " intra-node"}, []string{"pingpong", "bw"}, 4)
}

// Across 2 simulated nodes (GPUCOMM_MULTINODE=1, root; scripts/multinode/
// ci.sh runs it under both MPIs): with 2 ranks a node the default pairs are
// 0-1 inside nodeA and 0-2 from nodeA to nodeB, both in one run, each line
// labelled; with one rank a node the one pair 0-1 crosses nodes; pairs
// given with -pairs, rank 0 in none of them, are measured as asked.
func TestMultinodeBenchMeasuresIntraAndInterNodePairs(t *testing.T) {
	nodes, bin := multinodeCommand(t)
	launch := func(perNode int, extra ...string) string {
		t.Helper()
		last := "# Wrong elements of the pairs : "
		if slices.Contains(extra, "-json") {
			last = "\n}"
		}
		j := nodes.LaunchUntil(t, mpi.Family(), perNode, 3*time.Minute, finalizeWatch(last), []string{"GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND="},
			append(append([]string{bin}, benchArgs...), extra...)...)
		if j.Err != nil && !j.Lingered {
			t.Fatalf("gpucomm bench %v on 2 nodes × %d ranks: %v\n%s", extra, perNode, j.Err, j.Output)
		}
		return j.Output
	}

	out := launch(2)
	for _, want := range []string{
		"# nodes: 2: nodeA (ranks 0-1), nodeB (ranks 2-3)\n",
		"# pingpong, bw: ranks 0 (nodeA) and 1 (nodeA): intra-node\n# pingpong, bw: ranks 0 (nodeA) and 2 (nodeB): inter-node\n",
		"# collectives: 4 ranks on 2 node(s): inter-node\n",
		"# Wrong elements : 0 OK",
		"# Wrong elements of the pairs : 0 OK",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("2 ranks a node: the output lacks %q:\n%s", want, out)
		}
	}
	checkPairLines(t, pairLines(t, out), map[string]string{"0-1": "nodeA,nodeA intra-node", "0-2": "nodeA,nodeB inter-node"}, []string{"pingpong", "bw"}, 4)
	t.Logf("2 ranks a node:\n%s", out)

	rep := benchJSON(t, launch(1, "-json"))
	p := rep.Placement
	if len(p.Nodes) != 2 || len(p.Pairs) != 1 || p.Pairs[0].Ranks != [2]int{0, 1} || !p.Pairs[0].InterNode || p.Pairs[0].Hosts != [2]string{"nodeA", "nodeB"} || !p.InterNodeCollectives {
		t.Fatalf("1 rank a node: placement %+v; want the one pair 0-1 inter-node, nodeA and nodeB", p)
	}
	checkPairResults(t, p.Pairs[0], 4)
	if len(rep.Results) != 12 || rep.Wrong() != 0 {
		t.Fatalf("1 rank a node: %d results, %d wrong elements; want 12, none", len(rep.Results), rep.Wrong())
	}

	rep = benchJSON(t, launch(2, "-json", "-pairs", "2:0,1:3"))
	p = rep.Placement
	if len(p.Pairs) != 2 || p.Pairs[0].Ranks != [2]int{2, 0} || p.Pairs[0].Hosts != [2]string{"nodeB", "nodeA"} || p.Pairs[1].Ranks != [2]int{1, 3} ||
		p.Pairs[1].Hosts != [2]string{"nodeA", "nodeB"} || !p.Pairs[0].InterNode || !p.Pairs[1].InterNode {
		t.Fatalf("-pairs 2:0,1:3: placement %+v", p)
	}
	for _, pr := range p.Pairs {
		checkPairResults(t, pr, 4)
	}
	// Bench's own run measured the collectives only.
	for _, r := range rep.Results {
		if r.Operation.PointToPoint() {
			t.Errorf("-pairs without 0:1: bench's report has %v of %d bytes", r.Operation, r.Size)
		}
	}
}

type benchJSONReport struct {
	Placement benchPlacement `json:"placement"`
	bench.Report
}

// benchJSON reads the -json report in a job's output.
func benchJSON(t *testing.T, out string) benchJSONReport {
	t.Helper()
	start := strings.Index(out, "{\n")
	end := strings.LastIndex(out, "\n}")
	if start < 0 || end < start {
		t.Fatalf("no JSON report in the output:\n%s", out)
	}
	var rep benchJSONReport
	if err := json.Unmarshal([]byte(out[start:end+2]), &rep); err != nil {
		t.Fatalf("the report is no JSON: %v\n%s", err, out)
	}
	return rep
}

// checkPairResults holds a pair's results to: pingpong and bw at sizes
// sizes each, checked, none wrong, times finite and positive.
func checkPairResults(t *testing.T, pr benchPair, sizes int) {
	t.Helper()
	n := map[bench.Operation]int{}
	for _, r := range pr.Results {
		n[r.Operation]++
		if r.Wrong != 0 || !(r.Time.Median > 0) || r.Time.Median > 1e9 || !(r.AlgBW > 0) || r.AlgBW > 1e6 {
			t.Errorf("pair %v: %v of %d bytes: %d wrong, %v us, %v GB/s", pr.Ranks, r.Operation, r.Size, r.Wrong, r.Time.Median, r.AlgBW)
		}
	}
	if len(n) != 2 || n[bench.PingPong] != sizes || n[bench.Bandwidth] != sizes {
		t.Errorf("pair %v: results %v, want pingpong and bw at %d sizes", pr.Ranks, n, sizes)
	}
}
