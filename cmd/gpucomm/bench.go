package main

import (
	"bytes"
	"context"
	"io"

	"github.com/gpucomm/gpucomm/bench"
)

// The bench command lives in package bench; this file names it and adds
// where the ranks ran (bench_nodes.go): which node each rank is on, and
// whether the point-to-point pair and the collectives cross nodes.
func init() {
	register(&command{name: "bench", summary: bench.CommandSummary, run: runBench})
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if benchWantsHelp(args) {
		return bench.Main(ctx, args, stdout, stderr)
	}
	// Every rank gathers the host names before the benchmark, as all must.
	layout, ok := gatherLayout(args)
	if !ok {
		return bench.Main(ctx, args, stdout, stderr)
	}
	var out bytes.Buffer
	code := bench.Main(ctx, args, &out, stderr)
	if out.Len() > 0 {
		stdout.Write(layout.annotate(out.Bytes(), benchFormat(args)))
	}
	return code
}
