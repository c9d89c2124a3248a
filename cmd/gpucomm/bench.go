package main

import "github.com/gpucomm/gpucomm/bench"

// The bench command lives in package bench; this file only names it.
func init() {
	register(&command{name: "bench", summary: bench.CommandSummary, run: bench.Main})
}
