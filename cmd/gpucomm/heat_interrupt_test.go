package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// Ctrl-C (the context's cancellation) stops heat within about a second,
// whatever -steps is, with the report of the steps done and a failure
// status: it ran on for 1% of the steps (here minutes) and then exited 0.
func TestHeatStopsSoonAfterAnInterruptAndFails(t *testing.T) {
	t.Setenv("GPUCOMM_BACKEND", "")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runHeat(ctx, []string{"-np", "2", "-n", "256", "-steps", "100000000", "-noprogress"}, &out, &errOut)
	}()
	time.Sleep(500 * time.Millisecond)
	cancel()
	start := time.Now()
	var code int
	select {
	case code = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("heat still ran 10 s after the interrupt") // its goroutine runs on until the test binary ends
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("heat stopped %v after the interrupt; want about a second at most", took)
	}
	if code != exitFail {
		t.Errorf("exit %d after an interrupt, want %d", code, exitFail)
	}
	if !strings.Contains(out.String(), "interrupted after ") || !strings.Contains(out.String(), "checksum: ") {
		t.Errorf("no report of the steps done:\n%s", out.String())
	}
	if !strings.HasPrefix(errOut.String(), "gpucomm heat: interrupted after ") {
		t.Errorf("stderr does not say the run was interrupted: %q", errOut.String())
	}
}

// Chunks grow while they take under half heatChunkTime and shrink when
// they take longer, never below one step.
func TestHeatChunksFollowTheirTime(t *testing.T) {
	for _, tc := range []struct {
		chunk int
		took  time.Duration
		want  int
	}{
		{1, time.Microsecond, 2},
		{64, heatChunkTime / 4, 128},
		{64, heatChunkTime * 3 / 4, 64},
		{64, 3 * heatChunkTime, 32},
		{1, time.Hour, 1},
	} {
		if got := nextChunk(tc.chunk, tc.took); got != tc.want {
			t.Errorf("nextChunk(%d, %v) = %d, want %d", tc.chunk, tc.took, got, tc.want)
		}
	}
}
