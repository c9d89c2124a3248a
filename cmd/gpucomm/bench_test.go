package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/bench"
)

func benchCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("GPUCOMM_BACKEND", "")
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestBenchCommandRunsThePackageBench(t *testing.T) {
	c := commands["bench"]
	if c == nil || c.summary != bench.CommandSummary {
		t.Fatalf("bench command %+v, want it registered with bench's summary", c)
	}
	code, out, errOut := benchCLI(t, "bench", "-np", "2", "-op", "allreduce,pingpong", "-b", "8", "-e", "64", "-f", "8", "-n", "2", "-w", "0")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"# allreduce", "# pingpong", "#wrong", "Wrong elements : 0 OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The package's exit statuses are the CLI's.
	if bench.ExitOK != exitOK || bench.ExitFail != exitFail || bench.ExitUsage != exitUsage {
		t.Error("bench's exit statuses differ from the CLI's")
	}
	if code, _, _ := benchCLI(t, "bench", "-b", "lots"); code != exitUsage {
		t.Errorf("bad -b: exit %d, want %d", code, exitUsage)
	}
	if code, out, _ := benchCLI(t, "help", "bench"); code != exitOK || !strings.Contains(out, "osu") && !strings.Contains(out, "OSU") {
		t.Errorf("help bench: exit %d\n%s", code, out)
	}
}
