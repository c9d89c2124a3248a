package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm/local"
)

// The bench command lives in package bench; this file names it and adds
// where the ranks ran (bench_nodes.go): which node each rank is on, and
// whether the collectives cross nodes, and the point-to-point tests on
// more pairs than bench's ranks 0 and 1 (bench_pairs.go): by default, across
// nodes, one pair within a node and one across nodes.
func init() {
	register(&command{name: "bench", summary: bench.CommandSummary, run: runBench})
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if benchWantsHelp(args) {
		code := bench.Main(ctx, args, stdout, stderr)
		io.WriteString(stderr, pairsUsage)
		return code
	}
	spec, given, args, err := takePairsFlag(args)
	if err != nil {
		return benchUsage(stderr, "%v", err)
	}
	if given {
		// bench's own flags are checked where bench.Main runs; with -pairs
		// it may not run at all (point-to-point pairs without 0:1).
		if code := bench.CheckArgs(args, stderr); code != exitOK {
			return code
		}
	}
	format := benchFormat(args)
	if given && format == "csv" {
		return benchUsage(stderr, "-pairs and -csv: CSV has no column for the pair; use the table or -json")
	}
	// Every rank gathers the host names before the benchmark, as all must.
	layout, ok := gatherLayout(args)
	if !ok {
		if given {
			return benchUsage(stderr, "-pairs: where the ranks run is unknown here (a launcher without MPI built in?), so no pair can be chosen")
		}
		return bench.Main(ctx, args, stdout, stderr)
	}
	if format == "csv" { // as bench writes it: CSV has no place for the layout
		return bench.Main(ctx, args, stdout, stderr)
	}
	p2p, others, ok := splitOps(flagValue(args, "op", "all"), len(layout.hosts))
	if !ok { // bench says what is wrong with -op
		return bench.Main(ctx, args, stdout, stderr)
	}
	pairs, err := layout.choosePairs(spec)
	if err != nil {
		return benchUsage(stderr, "%v", err)
	}
	if len(p2p) == 0 {
		if given {
			return benchUsage(stderr, "-pairs %s: -op %s has no point-to-point test (pingpong, bw) to run on them", spec, flagValue(args, "op", "all"))
		}
		pairs = nil
	}
	var extra []rankPair
	for _, p := range pairs {
		if p != firstPair {
			extra = append(extra, p)
		}
	}

	// Bench's own run: the collectives, and the point-to-point tests on
	// ranks 0 and 1 where they are a pair. Its report comes back as JSON.
	mainArgs := withFlag(args, "json", "")
	runMain := true
	if len(pairs) > 0 && !slices.Contains(pairs, firstPair) {
		mainArgs = withFlag(mainArgs, "op", opList(others))
		runMain = len(others) > 0
	}
	for _, f := range []struct{ name, what string }{{"plot", "draws"}, {"cpuprofile", "profiles"}} {
		if !runMain && flagValue(args, f.name, "") != "" {
			return benchUsage(stderr, "-%s %s bench's own run, and -pairs %s with only point-to-point tests leaves it none: add the pair 0:1 or a collective, or leave -%s out",
				f.name, f.what, spec, f.name)
		}
	}
	code := exitOK
	var out bytes.Buffer
	var mainRep *bench.Report
	if runMain {
		code = bench.Main(ctx, mainArgs, &out, stderr)
		if code == exitUsage {
			stdout.Write(out.Bytes())
			return code
		}
		var rep bench.Report
		if out.Len() > 0 && json.Unmarshal(out.Bytes(), &rep) == nil {
			mainRep = &rep
		}
	}
	res := pairResults{}
	if mainRep != nil && slices.Contains(pairs, firstPair) {
		for _, r := range mainRep.Results {
			if r.Operation.PointToPoint() {
				res[firstPair] = append(res[firstPair], r)
			}
		}
	}
	printer := out.Len() > 0 // rank 0, under a launcher
	window := bench.DefaultConfig().Window
	if mainRep != nil {
		window = mainRep.Window
	}
	if len(extra) > 0 {
		r, err := pairConfig(args, p2p)
		if err != nil {
			return benchUsage(stderr, "%v", err)
		}
		// As bench resolves it: Open("auto") would open one local rank.
		r.backend = layout.backend
		window = r.cfg.Window
		failed := runMain && code != exitOK && (mainRep == nil || mainRep.Wrong() == 0)
		reps, rank, err := measurePairs(ctx, r, extra, failed)
		switch {
		case err != nil && failed:
			// Bench's own run has said what is wrong (opening the
			// backend again, say, fails as it did there).
		case err != nil && rank >= 0:
			fmt.Fprintf(stderr, "gpucomm bench: rank %d: point-to-point pairs: %v\n", rank, err)
			code = exitFail
		case err != nil:
			fmt.Fprintf(stderr, "gpucomm bench: point-to-point pairs: %v\n", err)
			code = exitFail
		}
		var wrong int64
		for i, rep := range reps {
			res[extra[i]] = rep.Results
			wrong += rep.Wrong()
		}
		if wrong > 0 && rank == 0 {
			fmt.Fprintf(stderr, "gpucomm bench: %d wrong elements between the pairs: the backend returned incorrect results\n", wrong)
			code = exitFail
		}
		printer = printer || rank == 0
	}
	if !printer {
		return code
	}
	place := layout.placement(pairs, res)
	if format == "json" {
		if mainRep == nil && out.Len() > 0 {
			stdout.Write(out.Bytes()) // no report bench could finish
			return code
		}
		stdout.Write(withPlacement(out.Bytes(), place))
		return code
	}
	io.WriteString(stdout, layout.header(pairs, len(others) > 0))
	switch {
	case mainRep != nil:
		table := *mainRep
		if len(pairs) > 0 { // they are in the pairs' table
			table.Results = slices.DeleteFunc(slices.Clone(table.Results), func(r bench.Result) bool { return r.Operation.PointToPoint() })
		}
		if err := table.WriteTable(stdout); err != nil {
			fmt.Fprintf(stderr, "gpucomm bench: %v\n", err)
			code = exitFail
		}
	case out.Len() > 0:
		stdout.Write(out.Bytes())
	}
	if len(pairs) > 0 {
		layout.pairTable(stdout, pairs, res, window, pairsBaseline(layout.backend, args, mainRep, pairs, len(extra) > 0))
	}
	return code
}

// pairsBaseline is the pairs' table's note on the baseline: which pairs the
// C loop timed, or why none has one. Only an MPI backend's C loop times
// anything, and only ranks 0 and 1 of MPI_COMM_WORLD; the local backend has
// no library underneath (the table said the C loop and MPI_COMM_WORLD for
// it too), and -nobaseline has none.
func pairsBaseline(backend string, args []string, mainRep *bench.Report, pairs []rankPair, extra bool) string {
	switch {
	case mainRep != nil && strings.HasPrefix(mainRep.Baseline, "none"):
		return mainRep.Baseline // bench's own line: "none: -nobaseline", say
	case flagSet(args, "nobaseline"):
		return "none: -nobaseline"
	case backend == local.Name:
		return "none: the local backend has no library underneath"
	case !slices.Contains(pairs, firstPair):
		return "none: the C loop times ranks 0 and 1 of MPI_COMM_WORLD only"
	case !extra:
		return "no other pair"
	}
	return "the others none: the C loop times ranks 0 and 1 of MPI_COMM_WORLD only"
}

// benchUsage says what is wrong with gpucomm bench's own flags.
func benchUsage(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "gpucomm bench: %s\nRun 'gpucomm bench -h' for usage.\n", fmt.Sprintf(format, args...))
	return exitUsage
}
