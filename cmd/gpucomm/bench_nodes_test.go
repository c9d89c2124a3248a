package main

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"strconv"
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
		pairs := []rankPair{{0, 1}}
		h := l.header(pairs, true)
		if got := strings.Split(strings.TrimSuffix(h, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(tc.header, "\n") {
			t.Errorf("hosts %v: header\n%s\nwant\n%s", tc.hosts, h, strings.Join(tc.header, "\n"))
		}
		p := l.placement(pairs, nil)
		if len(p.Pairs) != 1 || p.Pairs[0].InterNode != tc.pair || p.InterNodeCollectives != tc.colls {
			t.Errorf("hosts %v: placement %+v; want pair inter-node %v, collectives %v", tc.hosts, p, tc.pair, tc.colls)
		}
	}
	if p := (nodeLayout{hosts: []string{"a"}}).placement(nil, nil); p.Pairs != nil || p.InterNodeCollectives {
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
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "Wrong elements : 0 OK") || !strings.Contains(out, "Wrong elements of the pairs : 0 OK") {
		t.Fatalf("output does not start with %q:\n%s", want, out)
	}
	// One host: every line of the pairs' table is ranks 0-1, intra-node.
	lines := pairLines(t, out)
	checkPairLines(t, lines, map[string]string{"0-1": host + "," + host + " intra-node"}, []string{"pingpong"}, 4)
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
	if len(p.Nodes) != 1 || p.Nodes[0].Host != host || len(p.Nodes[0].Ranks) != 2 || len(p.Pairs) != 1 || p.Pairs[0].Ranks != [2]int{0, 1} || p.Pairs[0].InterNode || p.InterNodeCollectives {
		t.Errorf("placement %+v, want one node %s of ranks 0, 1, all intra-node", p, host)
	}
	if pr := p.Pairs[0]; len(pr.Results) != 2 || pr.Results[0] != rep.Results[0] || pr.Results[1] != rep.Results[1] {
		t.Errorf("pair 0-1's results %+v, the report's %+v", pr.Results, rep.Results)
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

// pairLine is one line of the pairs' table.
type pairLine struct {
	op, ranks, hosts, where string
	size                    int64
	time, p10, p90, algbw   float64
	wrong                   int64
}

// pairLines reads the pairs' table out of bench's output.
func pairLines(t *testing.T, out string) []pairLine {
	t.Helper()
	start := strings.Index(out, "# pingpong and bw by pair")
	end := strings.Index(out, "# Wrong elements of the pairs : ")
	if start < 0 || end < start {
		t.Fatalf("no pairs' table in:\n%s", out)
	}
	var lines []pairLine
	for _, l := range strings.Split(out[start:end], "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 14 {
			t.Fatalf("pairs' line %q: %d fields, want 14", l, len(f))
		}
		var pl pairLine
		pl.op, pl.ranks, pl.hosts, pl.where = f[0], f[1], f[2], f[3]
		var err error
		nums := []*float64{&pl.time, &pl.p10, &pl.p90, &pl.algbw}
		for i, s := range []string{f[7], f[8], f[9], f[10]} {
			if *nums[i], err = strconv.ParseFloat(s, 64); err != nil {
				t.Fatalf("pairs' line %q: %v", l, err)
			}
		}
		if pl.size, err = strconv.ParseInt(f[4], 10, 64); err != nil {
			t.Fatalf("pairs' line %q: %v", l, err)
		}
		if pl.wrong, err = strconv.ParseInt(f[11], 10, 64); err != nil {
			t.Fatalf("pairs' line %q: unchecked or unreadable #wrong: %v", l, err)
		}
		lines = append(lines, pl)
	}
	return lines
}

// checkPairLines holds the pairs' lines to: each pair of want (ranks to
// "hosts where") on each op, at each of sizes sizes, nothing else; times
// finite and positive, p10 <= median <= p90, no wrong element.
func checkPairLines(t *testing.T, lines []pairLine, want map[string]string, ops []string, sizes int) {
	t.Helper()
	seen := map[string]int{}
	for _, l := range lines {
		label, ok := want[l.ranks]
		if !ok || l.hosts+" "+l.where != label || !slices.Contains(ops, l.op) {
			t.Errorf("line %+v: not a pair, op or label asked for (%v, %v)", l, want, ops)
		}
		if !(l.time > 0) || math.IsInf(l.time, 0) || !(l.p10 <= l.time && l.time <= l.p90) || math.IsInf(l.p90, 0) || l.algbw < 0 || math.IsInf(l.algbw, 0) || l.size <= 0 {
			t.Errorf("line %+v: figures not finite, positive and ordered", l)
		}
		if l.wrong != 0 {
			t.Errorf("line %+v: wrong elements", l)
		}
		seen[l.op+" "+l.ranks]++
	}
	for r := range want {
		for _, op := range ops {
			if seen[op+" "+r] != sizes {
				t.Errorf("%s on ranks %s: %d lines, want %d", op, r, seen[op+" "+r], sizes)
			}
		}
	}
}
