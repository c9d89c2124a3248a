package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/bench"
)

func TestBenchLayoutSaysWhichPairsAndCollectivesCrossNodes(t *testing.T) {
	for _, tc := range []struct {
		hosts  []string
		header []string
		pair   bool // p2p pair inter-node
		colls  bool // collectives inter-node
	}{
		{[]string{"a", "a", "a", "a"}, []string{"# nodes: 1: a (ranks 0-3)", "# pingpong, bw: ranks 0 (a) and 1 (a): intra-node", "# collectives: 4 ranks on 1 node(s): intra-node"}, false, false},
		{[]string{"a", "a", "b", "b"}, []string{"# nodes: 2: a (ranks 0-1), b (ranks 2-3)", "# pingpong, bw: ranks 0 (a) and 1 (a): intra-node", "# collectives: 4 ranks on 2 node(s): inter-node"}, false, true},
		{[]string{"a", "b", "a", "b", "c"}, []string{"# nodes: 3: a (ranks 0,2), b (ranks 1,3), c (ranks 4)", "# pingpong, bw: ranks 0 (a) and 1 (b): inter-node", "# collectives: 5 ranks on 3 node(s): inter-node"}, true, true},
	} {
		l := nodeLayout{hosts: tc.hosts}
		h := l.header()
		if got := strings.Split(strings.TrimSuffix(h, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(tc.header, "\n") {
			t.Errorf("hosts %v: header\n%s\nwant\n%s", tc.hosts, h, strings.Join(tc.header, "\n"))
		}
		p := l.placement()
		if p.Pair == nil || p.Pair.InterNode != tc.pair || p.InterNodeCollectives != tc.colls {
			t.Errorf("hosts %v: placement %+v, pair %+v; want pair inter-node %v, collectives %v", tc.hosts, p, p.Pair, tc.pair, tc.colls)
		}
	}
	if p := (nodeLayout{hosts: []string{"a"}}).placement(); p.Pair != nil || p.InterNodeCollectives {
		t.Errorf("one rank: %+v, want no pair and no inter-node collectives", p)
	}
}

func TestBenchFlagsAreReadAsBenchReadsThem(t *testing.T) {
	args := []string{"-np", "3", "-op", "pingpong", "--json", "-csv=false", "-backend=mpi"}
	if benchFormat(args) != "json" || flagValue(args, "np", "4") != "3" || flagValue(args, "backend", "local") != "mpi" || flagValue(args, "b", "8") != "8" {
		t.Errorf("format %s, np %s, backend %s", benchFormat(args), flagValue(args, "np", "4"), flagValue(args, "backend", "local"))
	}
	if benchFormat([]string{"-csv"}) != "csv" || benchFormat([]string{"-json=false"}) != "table" || !benchWantsHelp([]string{"-np", "2", "-h"}) {
		t.Error("-csv, -json=false or -h misread")
	}
}

// On one host every pair is intra-node: the table says so above bench's
// own header, and -json carries it in "placement" (which -compare ignores).
func TestBenchOnOneHostMarksEveryPairIntraNode(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := benchCLI(t, "bench", "-np", "3", "-op", "pingpong,allreduce", "-b", "8", "-e", "64", "-n", "2", "-w", "0")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	want := "# nodes: 1: " + host + " (ranks 0-2)\n# pingpong, bw: ranks 0 (" + host + ") and 1 (" + host + "): intra-node\n# collectives: 3 ranks on 1 node(s): intra-node\n# gpucomm bench:"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "Wrong elements : 0 OK") {
		t.Fatalf("output does not start with %q:\n%s", want, out)
	}
	code, out, errOut = benchCLI(t, "bench", "-np", "2", "-op", "pingpong", "-b", "8", "-e", "16", "-n", "2", "-w", "0", "-json")
	if code != exitOK {
		t.Fatalf("-json: exit %d\n%s", code, errOut)
	}
	var rep struct {
		Placement benchPlacement `json:"placement"`
		bench.Report
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-json output is no JSON: %v\n%s", err, out)
	}
	p := rep.Placement
	if len(p.Nodes) != 1 || p.Nodes[0].Host != host || len(p.Nodes[0].Ranks) != 2 || p.Pair == nil || p.Pair.InterNode || p.InterNodeCollectives {
		t.Errorf("placement %+v (pair %+v), want one node %s of ranks 0, 1, all intra-node", p, p.Pair, host)
	}
	if rep.Ranks != 2 || len(rep.Results) != 2 || rep.Results[0].Wrong != 0 {
		t.Errorf("the report itself: %d ranks, %d results: %+v", rep.Ranks, len(rep.Results), rep.Results)
	}
	if _, err := bench.ReadReport(writeTemp(t, out)); err != nil {
		t.Errorf("-compare cannot read the annotated report: %v", err)
	}
}

func writeTemp(t *testing.T, s string) string {
	t.Helper()
	p := t.TempDir() + "/report.json"
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
