package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// The drills under a real launcher, on the host device, for the MPI backend
// of this binary's family (-tags mpi: Open MPI, -tags mpich: MPICH): a rank
// that skips a collective, and a rank killed in one, are each named by
// "gpucomm trace" from the records the ranks wrote (on their timeouts, or
// on the TERM the launcher sends when a rank dies).
func TestDrillUnderLauncherIsDiagnosedByTrace(t *testing.T) {
	if !mpi.Built() {
		t.Skip("MPI is not built in: run with -tags mpi or -tags mpich")
	}
	if testing.Short() {
		t.Skip("launches MPI jobs")
	}
	bin := mpitest.BuildCommand(t)
	for _, tc := range []struct {
		mode, want string
	}{
		{"skip", "first divergence: collective 3 (AllReduce(count=256 dtype=float32 op=sum)): rank 2 never entered it"},
		{"kill", "rank 2 wrote no record"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			env := []string{"GPUCOMM_TRACE_DIR=" + dir, "GPUCOMM_TRACE_SIGNAL=TERM", "GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND="}
			j := mpitest.Launch(t, 4, 2*time.Minute, env, bin, "drill", "-backend", "mpi", "-mode", tc.mode, "-rank", "2", "-at", "3",
				"-count", "256", "-timeout", "3s")
			if j.Err == nil {
				t.Fatalf("the drill's job succeeded; output:\n%s", j.Output)
			}
			out, err := exec.Command(bin, "trace", dir).CombinedOutput()
			var exit *exec.ExitError
			if !strings.Contains(string(out), tc.want) || err == nil || !asExit(err, &exit) || exit.ExitCode() != 1 {
				entries, _ := os.ReadDir(dir)
				t.Fatalf("gpucomm trace: %v; want exit 1 and %q\n%s\nrecords: %v\njob output:\n%s", err, tc.want, out, entries, j.Output)
			}
			t.Logf("gpucomm trace:\n%s", out)
		})
	}
}

func asExit(err error, exit **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*exit = e
	return ok
}
