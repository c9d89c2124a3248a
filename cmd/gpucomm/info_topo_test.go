package main

import (
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

func TestInfoTopologySection(t *testing.T) {
	var b strings.Builder
	if err := writeTopology(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if _, err := devmem.Topology(); err != nil {
		// Without NVML: exactly one line, saying why.
		if strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "GPU topology: not available (") {
			t.Fatalf("section without NVML:\n%s", out)
		}
		return
	}
	if !strings.HasPrefix(out, "GPU topology (NVML):\n") || !strings.Contains(out, "CPU Affinity") || !strings.Contains(out, "Legend:") {
		t.Fatalf("section with NVML:\n%s", out)
	}
}

func TestInfoPrintsTopologySection(t *testing.T) {
	var out, errb strings.Builder
	if code := run([]string{"info"}, &out, &errb); code != exitOK {
		t.Fatalf("gpucomm info exited %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "GPU topology") {
		t.Fatalf("gpucomm info has no topology section:\n%s", out.String())
	}
}
