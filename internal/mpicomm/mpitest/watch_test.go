package mpitest

import (
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// The watchdog ends a launcher that outlives every process it started
// (here a shell that became "sleep 60" and never reaps its child), and
// leaves alone one that ends by itself or that never started any.
func TestWatchLauncher(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	defer func(g time.Duration) { orphanGrace = g }(orphanGrace)
	orphanGrace = time.Second
	cases := []struct {
		name, script string
		orphaned     bool
		within       time.Duration
	}{
		{"child left unreaped", "sleep 0.2 & exec sleep 60", true, 20 * time.Second},
		{"ends by itself", "sleep 0.2; sleep 2", false, 20 * time.Second},
		{"child still running", "sleep 3 & exec sleep 3", false, 20 * time.Second},
	}
	for _, c := range cases {
		cmd := exec.Command("sh", "-c", c.script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		orphaned, err := watchLauncher(cmd)
		took := time.Since(start)
		if orphaned != c.orphaned || took > c.within {
			t.Errorf("%s: orphaned %v after %v (%v); want %v within %v", c.name, orphaned, took, err, c.orphaned, c.within)
		}
		if !c.orphaned && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// Hydra's status 1 for a rank the finalize bound ended is recognised only
// under MPICH, with exit status 1, and with both its lines in the output.
func TestHydraFinalizeStatus(t *testing.T) {
	exitWith := func(code string) error { return exec.Command("sh", "-c", "exit "+code).Run() }
	both := "gpucomm: rank 2: MPI_Finalize had not returned 5s after every rank passed the barrier\n" +
		"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Hangup (signal 1)\n"
	for _, c := range []struct {
		name, family, output string
		err                  error
		want                 bool
	}{
		{"MPICH, status 1, both lines", "mpich", both, exitWith("1"), true},
		{"Open MPI", "openmpi", both, exitWith("1"), false},
		{"status 2", "mpich", both, exitWith("2"), false},
		{"no finalize line", "mpich", "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Hangup (signal 1)\n", exitWith("1"), false},
		{"no Hydra line", "mpich", "gpucomm: rank 2: MPI_Finalize had not returned 5s\n", exitWith("1"), false},
		{"not an exit", "mpich", both, exec.ErrNotFound, false},
	} {
		if got := hydraFinalizeStatus(c.family, Job{Output: c.output, Err: c.err}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
