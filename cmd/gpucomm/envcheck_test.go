package main

import (
	"bytes"
	"strings"
	"testing"
)

// A malformed variable that only node-shared memory reads (GPUCOMM_IPC)
// stops check, bench and heat with usage status 2 before anything runs, as a
// malformed GPUCOMM_TIMEOUT does; check ran with it and failed its
// NodeShared case (exit 1) behind a placement hint about GPUs.
func TestMalformedIPCModeStopsTheCommandsUpFront(t *testing.T) {
	for _, k := range []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"} {
		t.Setenv(k, "")
	}
	t.Setenv("GPUCOMM_IPC", "bogus")
	for _, args := range [][]string{
		{"check", "-np", "2", "-short"},
		{"bench", "-np", "2", "-op", "allreduce", "-b", "8", "-e", "8", "-noprogress"},
		{"heat", "-np", "2", "-n", "16", "-steps", "1"},
	} {
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), `GPUCOMM_IPC="bogus"`) {
			t.Errorf("gpucomm %s with GPUCOMM_IPC=bogus: status %d, stderr %q; want 2 and a message naming the variable", strings.Join(args, " "), code, errOut.String())
		}
	}
}
