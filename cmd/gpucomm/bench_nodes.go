package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/internal/launcher"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// nodeLayout is where the ranks of a bench run are: the host name of each
// rank, in rank order.
type nodeLayout struct {
	hosts []string
	// backend is the backend the ranks run, "auto" resolved as bench
	// resolves it.
	backend string
}

// Nodes of the layout: each host with its ranks, in order of first rank.
type benchNode struct {
	Host  string `json:"host"`
	Ranks []int  `json:"ranks"`
}

// benchPair is a pair the point-to-point tests (pingpong, bw) ran on, with
// its results (those of ranks 0 and 1 are also in the report's own).
type benchPair struct {
	Ranks     [2]int         `json:"ranks"`
	Hosts     [2]string      `json:"hosts"`
	InterNode bool           `json:"inter_node"`
	Results   []bench.Result `json:"results,omitempty"`
}

// benchPlacement is what -json adds to bench's report.
type benchPlacement struct {
	Nodes []benchNode `json:"nodes"`
	// Pairs are the point-to-point pairs; absent without a point-to-point
	// test or with fewer than 2 ranks.
	Pairs []benchPair `json:"p2p_pairs,omitempty"`
	// InterNodeCollectives: the collectives' ranks span more than one node.
	InterNodeCollectives bool `json:"inter_node_collectives"`
}

// placement is the layout with pairs and their results.
func (l nodeLayout) placement(pairs []rankPair, res pairResults) benchPlacement {
	var p benchPlacement
	for r, h := range l.hosts {
		i := slices.IndexFunc(p.Nodes, func(n benchNode) bool { return n.Host == h })
		if i < 0 {
			p.Nodes = append(p.Nodes, benchNode{Host: h})
			i = len(p.Nodes) - 1
		}
		p.Nodes[i].Ranks = append(p.Nodes[i].Ranks, r)
	}
	for _, pr := range pairs {
		h := [2]string{l.hosts[pr[0]], l.hosts[pr[1]]}
		p.Pairs = append(p.Pairs, benchPair{Ranks: pr, Hosts: h, InterNode: h[0] != h[1], Results: res[pr]})
	}
	p.InterNodeCollectives = len(p.Nodes) > 1
	return p
}

// where says intra-node or inter-node.
func where(inter bool) string {
	if inter {
		return "inter-node"
	}
	return "intra-node"
}

// header is the table's lines on the layout, each starting with "#" as
// bench's own header lines do; the collectives' line only where a
// collective runs (collectives).
func (l nodeLayout) header(pairs []rankPair, collectives bool) string {
	p := l.placement(pairs, nil)
	var b strings.Builder
	nodes := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		nodes[i] = fmt.Sprintf("%s (ranks %s)", n.Host, rankRanges(n.Ranks))
	}
	fmt.Fprintf(&b, "# nodes: %d: %s\n", len(p.Nodes), strings.Join(nodes, ", "))
	for _, pr := range p.Pairs {
		fmt.Fprintf(&b, "# pingpong, bw: ranks %d (%s) and %d (%s): %s\n", pr.Ranks[0], pr.Hosts[0], pr.Ranks[1], pr.Hosts[1], where(pr.InterNode))
	}
	if collectives {
		fmt.Fprintf(&b, "# collectives: %d ranks on %d node(s): %s\n", len(l.hosts), len(p.Nodes), where(p.InterNodeCollectives))
	}
	return b.String()
}

// rankRanges writes ranks as ranges: 0-3,8,10-11.
func rankRanges(ranks []int) string {
	return strings.Join(runTexts(rankRuns(ranks)), ",")
}

// rankRuns splits sorted ranks into runs of consecutive ones: {r} for a
// rank alone, {first, last} for a run of two or more.
func rankRuns(rs []int) [][]int {
	var runs [][]int
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j == i {
			runs = append(runs, []int{rs[i]})
		} else {
			runs = append(runs, []int{rs[i], rs[j]})
		}
		i = j + 1
	}
	return runs
}

// runTexts writes each run of rankRuns as "r" or "first-last".
func runTexts(runs [][]int) []string {
	parts := make([]string, len(runs))
	for i, run := range runs {
		parts[i] = strconv.Itoa(run[0])
		if len(run) == 2 {
			parts[i] = fmt.Sprintf("%d-%d", run[0], run[1])
		}
	}
	return parts
}

// withPlacement adds the "placement" member p to bench's JSON report out;
// output that is no JSON object is left as it is.
func withPlacement(out []byte, p benchPlacement) []byte {
	member, err := json.MarshalIndent(p, "  ", "  ")
	if err != nil {
		return out
	}
	trimmed := bytes.TrimLeft(out, " \t\r\n")
	if len(trimmed) == 0 {
		return append(append([]byte("{\n  \"placement\": "), member...), "\n}\n"...)
	}
	if trimmed[0] != '{' {
		return out
	}
	joined := append([]byte("{\n  \"placement\": "), member...)
	joined = append(joined, ',')
	joined = append(joined, trimmed[1:]...)
	if !json.Valid(joined) { // an empty report ({}), say: leave it whole
		return out
	}
	return joined
}

// benchFormat is the output format the arguments ask for: "json", "csv" or
// "table". Bench itself refuses both at once.
func benchFormat(args []string) string {
	switch {
	case flagSet(args, "json"):
		return "json"
	case flagSet(args, "csv"):
		return "csv"
	}
	return "table"
}

// benchWantsHelp reports whether the arguments ask for the usage.
func benchWantsHelp(args []string) bool {
	return flagSet(args, "h") || flagSet(args, "help")
}

// flagSet reports whether the boolean flag name is given true in args
// (-name, --name, -name=true). (Bench takes no arguments but flags, so
// every argument that starts with "-" is one.)
func flagSet(args []string, name string) bool {
	set := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		f := strings.TrimLeft(a, "-")
		k, v, hasV := strings.Cut(f, "=")
		if k != name {
			continue
		}
		set = !hasV
		if hasV {
			set, _ = strconv.ParseBool(v)
		}
	}
	return set
}

// flagValue is the last value args give the flag name (-name V or
// -name=V), or def.
func flagValue(args []string, name, def string) string {
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			break
		}
		if !strings.HasPrefix(args[i], "-") {
			continue
		}
		f := strings.TrimLeft(args[i], "-")
		k, v, hasV := strings.Cut(f, "=")
		if k != name {
			continue
		}
		if hasV {
			def = v
		} else if i+1 < len(args) {
			def = args[i+1]
			i++
		}
	}
	return def
}

// gatherLayout learns every rank's host: with the local backend, all of
// this process's -np ranks are on this host; under a launcher with MPI
// built in, the ranks gather their host names over MPI_COMM_WORLD (MPI then
// stays up for the benchmark, and main's Finalize ends it). It reports
// false where it cannot tell (bench then runs as it would, without the
// layout, and says what is wrong itself).
func gatherLayout(args []string) (nodeLayout, bool) {
	host, err := os.Hostname()
	if err != nil {
		return nodeLayout{}, false
	}
	backend := flagValue(args, "backend", local.Name)
	if env := os.Getenv("GPUCOMM_BACKEND"); env != "" {
		backend = env
	}
	if backend == "auto" || backend == "" {
		// As bench resolves it: where auto means local, -np ranks of
		// this process, not one.
		if backend, err = resolveBackend(backend); err != nil {
			return nodeLayout{}, false
		}
	}
	job, launched := launcher.FromEnv()
	multi := launched && job.MultiRank()
	if backend == local.Name {
		np, err := strconv.Atoi(flagValue(args, "np", "4"))
		if err != nil || np < 1 || multi {
			return nodeLayout{}, false
		}
		return nodeLayout{hosts: slices.Repeat([]string{host}, np), backend: backend}, true
	}
	if !multi {
		return nodeLayout{hosts: []string{host}, backend: backend}, true
	}
	if !mpi.Built() || mpi.Init() != nil {
		return nodeLayout{}, false
	}
	all, err := mpi.AllgatherBytes(mpi.World(), []byte(host))
	if err != nil {
		return nodeLayout{}, false
	}
	l := nodeLayout{hosts: make([]string, len(all)), backend: backend}
	for r, b := range all {
		l.hosts[r] = string(b)
	}
	return l, true
}
