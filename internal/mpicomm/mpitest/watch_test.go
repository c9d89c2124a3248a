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
