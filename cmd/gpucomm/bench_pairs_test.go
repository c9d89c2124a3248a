package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
)

func TestTakePairsFlagLeavesBenchItsFlags(t *testing.T) {
	for _, tc := range []struct {
		args, rest []string
		spec       string
		given      bool
	}{
		{[]string{"-op", "pingpong", "-pairs", "0:2", "-json"}, []string{"-op", "pingpong", "-json"}, "0:2", true},
		{[]string{"--pairs=1:3,0:1", "-nobaseline", "-n", "5"}, []string{"-nobaseline", "-n", "5"}, "1:3,0:1", true},
		{[]string{"-label", "-pairs", "-b", "8"}, []string{"-label", "-pairs", "-b", "8"}, "auto", false}, // -pairs is -label's value
		{[]string{"-np", "2"}, []string{"-np", "2"}, "auto", false},
	} {
		spec, given, rest, err := takePairsFlag(tc.args)
		if err != nil || spec != tc.spec || given != tc.given || !slices.Equal(rest, tc.rest) {
			t.Errorf("%q: spec %q given %v rest %q (%v); want %q %v %q", tc.args, spec, given, rest, err, tc.spec, tc.given, tc.rest)
		}
	}
	if _, _, _, err := takePairsFlag([]string{"-n", "3", "-pairs"}); err == nil {
		t.Error("-pairs without a value: no error")
	}
}

func TestPairsAreCheckedAndChosenPerLayout(t *testing.T) {
	four := nodeLayout{hosts: []string{"a", "a", "b", "b"}}
	for _, spec := range []string{"0:0", "0:4", "-1:2", "a:b", "0-1", "0:1,0:1", "", "0:1,"} {
		if p, err := four.choosePairs(spec); err == nil {
			t.Errorf("-pairs %q on 4 ranks: %v, no error", spec, p)
		}
	}
	if p, err := four.choosePairs(" 2:0, 1:3"); err != nil || !slices.Equal(p, []rankPair{{2, 0}, {1, 3}}) {
		t.Errorf("-pairs 2:0,1:3: %v %v", p, err)
	}
	for _, tc := range []struct {
		hosts []string
		want  []rankPair
	}{
		{[]string{"a", "a", "b", "b"}, []rankPair{{0, 1}, {0, 2}}},
		{[]string{"a", "b", "a", "b"}, []rankPair{{0, 2}, {0, 1}}},
		{[]string{"a", "b", "c"}, []rankPair{{0, 1}}},
		{[]string{"a", "b"}, []rankPair{{0, 1}}},
		{[]string{"a", "a", "a"}, []rankPair{{0, 1}}},
		{[]string{"a"}, nil},
	} {
		if p, err := (nodeLayout{hosts: tc.hosts}).choosePairs("auto"); err != nil || !slices.Equal(p, tc.want) {
			t.Errorf("hosts %v: auto pairs %v (%v), want %v", tc.hosts, p, err, tc.want)
		}
	}
	if _, err := (nodeLayout{hosts: []string{"a"}}).choosePairs("0:1"); err == nil {
		t.Error("-pairs 0:1 on one rank: no error")
	}
	if got := withFlag([]string{"-op=bw", "-json", "-n", "3", "-op", "pingpong"}, "op", "allreduce"); !slices.Equal(got, []string{"-json", "-n", "3", "-op", "allreduce"}) {
		t.Errorf("withFlag: %q", got)
	}
	if got := withFlag([]string{"-json=false", "-b", "8"}, "json", ""); !slices.Equal(got, []string{"-b", "8", "-json"}) {
		t.Errorf("withFlag json: %q", got)
	}
}

// The pairs read bench's flags as bench does: every flag bench has is
// known (so none of them stops the pairs), and the values are bench's.
func TestPairConfigReadsEveryBenchFlag(t *testing.T) {
	t.Setenv("GPUCOMM_BACKEND", "")
	var out, usage bytes.Buffer
	bench.Main(context.Background(), []string{"-h"}, &out, &usage)
	names := regexp.MustCompile(`(?m)^  -(\w+)`).FindAllStringSubmatch(usage.String(), -1)
	if len(names) < 20 {
		t.Fatalf("bench -h lists %d flags:\n%s", len(names), usage.String())
	}
	fs := pairFlagSet()
	for _, m := range names {
		if fs.Lookup(m[1]) == nil {
			t.Errorf("bench's flag -%s is unknown to the pairs' flag set", m[1])
		}
	}
	ops := []bench.Operation{bench.PingPong}
	r, err := pairConfig([]string{"-backend", "mpi", "-b", "16", "-e", "1K", "-f", "4", "-i", "2K", "-d", "double", "-n", "7", "-w", "3", "-c", "1",
		"-window", "8", "-wall", "-nostream", "-timeout", "5s", "-device", "host", "-json", "-compare", "x", "-compare", "y"}, ops)
	if err != nil {
		t.Fatal(err)
	}
	c := r.cfg
	if r.backend != "mpi" || len(r.opts) != 2 || c.MinBytes != 16 || c.MaxBytes != 1024 || c.StepFactor != 4 || c.StepBytes != 2048 || c.DType != comm.Float64 ||
		c.Iters != 7 || c.Warmup != 3 || c.Checks != 1 || c.Window != 8 || !c.Wall || !c.NoStream || !c.NoBaseline || !slices.Equal(c.Ops, ops) {
		t.Errorf("pairConfig: %+v, %d options", r, len(r.opts))
	}
	r, err = pairConfig(nil, ops)
	def := bench.DefaultConfig()
	if err != nil || r.backend != "local" || r.np != 4 || r.cfg.MinBytes != def.MinBytes || r.cfg.MaxBytes != def.MaxBytes || r.cfg.Iters != def.Iters || r.cfg.DType != def.DType || len(r.opts) != 0 {
		t.Errorf("pairConfig of no flags: %+v (%v), want bench's defaults", r, err)
	}
	t.Setenv("GPUCOMM_BACKEND", "cudaaware") // overrides -backend, as in bench
	if r, err := pairConfig([]string{"-backend", "mpi"}, ops); err != nil || r.backend != "cudaaware" {
		t.Errorf("GPUCOMM_BACKEND=cudaaware -backend mpi: backend %q (%v)", r.backend, err)
	}
}

// The split communicator a pair runs on has the pair as its ranks 0 and 1,
// so that bench's point-to-point tests run between them.
func TestPairKeyPutsThePairFirst(t *testing.T) {
	cs, err := local.NewGroup(4)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(cs)
	for _, p := range []rankPair{{3, 1}, {0, 2}, {2, 0}} {
		subs := make([]comm.Communicator, 4)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Add(1)
			go func() { defer wg.Done(); subs[i], errs[i] = c.Split(0, pairKey(p, i)) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if subs[p[0]].Rank() != 0 || subs[p[1]].Rank() != 1 {
			t.Errorf("pair %v: ranks %d and %d of the split, want 0 and 1", p, subs[p[0]].Rank(), subs[p[1]].Rank())
		}
		closeAll(subs)
	}
}

func TestBenchPairsBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-pairs", "0:4"},
		{"-pairs", "1:1"},
		{"-pairs", "0:1", "-csv"},
		{"-pairs", "0:2", "-op", "allreduce"},
		{"-np", "1", "-pairs", "0:1"},
		{"-n", "2", "-pairs"},
	} {
		code, out, errOut := benchCLI(t, append([]string{"bench", "-np", "4", "-b", "8", "-e", "8", "-n", "1", "-w", "0"}, args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "-pairs") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and a message on -pairs", args, code, out, errOut)
		}
	}
	code, _, errOut := benchCLI(t, "bench", "-h")
	if code != exitOK || !strings.Contains(errOut, "-pairs LIST") {
		t.Errorf("bench -h: exit %d, no -pairs in\n%s", code, errOut)
	}
}

// With -pairs that leave bench's own run nothing to do (point-to-point
// tests on pairs without 0:1), bench's flags are still checked, and -plot
// and -cpuprofile, which only its run writes, are refused: each of these
// ran, exit 0, where a stray argument, a bad -plot or -timeout were ignored
// and the plot or profile silently never written.
func TestBenchPairsWithoutBenchsRunStillCheckItsFlags(t *testing.T) {
	base := []string{"bench", "-np", "3", "-op", "pingpong", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-noprogress", "-pairs", "0:2"}
	dir := t.TempDir()
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-plot", "x.jpg"}, "want a .png or .svg file"},
		{[]string{"-timeout", "-1s"}, "-timeout -1s"},
		{[]string{"-plot", filepath.Join(dir, "p.png")}, "-plot draws bench's own run"},
		{[]string{"-cpuprofile", filepath.Join(dir, "c.prof")}, "-cpuprofile profiles bench's own run"},
	} {
		code, out, errOut := benchCLI(t, append(slices.Clone(base), tc.extra...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.extra, code, out, errOut, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused runs wrote %d files", len(entries))
	}
	if code, _, errOut := benchCLI(t, base...); code != exitOK {
		t.Errorf("the same run with good flags: exit %d, stderr %q", code, errOut)
	}
}

// On the local backend, pairs other than 0-1 are measured as asked: the
// table labels each line, the JSON carries each pair's checked results.
func TestBenchPairsOnLocalRanks(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := benchCLI(t, "bench", "-np", "4", "-op", "allreduce,pingpong,bw", "-b", "8", "-e", "64", "-f", "8", "-n", "3", "-w", "1", "-window", "4",
		"-pairs", "0:1,2:3,3:0")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	hh := host + "," + host + " intra-node"
	checkPairLines(t, pairLines(t, out), map[string]string{"0-1": hh, "2-3": hh, "3-0": hh}, []string{"pingpong", "bw"}, 2)
	for _, want := range []string{"# pingpong, bw: ranks 2 (" + host + ") and 3 (" + host + "): intra-node\n", "# allreduce (", "windows of 4 sends"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "# pingpong (") || strings.Contains(out, "# bw (") {
		t.Errorf("pingpong or bw in bench's own table too:\n%s", out)
	}

	// Without 0:1 and with only point-to-point tests, bench's own run has
	// nothing to do: the JSON is the placement with the pairs' results.
	code, out, errOut = benchCLI(t, "bench", "-np", "3", "-op", "pingpong,bw", "-b", "8", "-e", "64", "-f", "8", "-n", "3", "-w", "1", "-pairs", "2:1", "-json")
	if code != exitOK {
		t.Fatalf("-json: exit %d\n%s%s", code, out, errOut)
	}
	var rep struct {
		Placement benchPlacement `json:"placement"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("no JSON: %v\n%s", err, out)
	}
	if p := rep.Placement.Pairs; len(p) != 1 || p[0].Ranks != [2]int{2, 1} || p[0].InterNode {
		t.Fatalf("pairs %+v, want 2-1 intra-node", p)
	}
	checkPairResults(t, rep.Placement.Pairs[0], 2)
}

// A cancelled run stops the pairs too, with an error and not a hang.
func TestBenchPairsStopWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runBench(ctx, []string{"-np", "3", "-op", "pingpong", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-pairs", "1:2"}, &out, &errOut)
	}()
	select {
	case code := <-done:
		if code != exitFail || !strings.Contains(errOut.String(), "canceled") {
			t.Errorf("cancelled: exit %d, stderr %q", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cancelled bench -pairs still running after 30 s")
	}
}
