package main

import (
	"context"
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
			argv := []string{bin, "drill", "-backend", "mpi", "-mode", tc.mode, "-rank", "2", "-at", "3", "-count", "256", "-timeout", "3s"}
			j := launchDrill(t, env, argv...)
			if j.err == nil {
				t.Fatalf("the drill's job succeeded; output:\n%s", j.out)
			}
			if tc.mode == "kill" && mpi.Family() == "mpich" {
				// MPICH's library ends every rank as soon as it sees a peer's
				// connection close (errors are fatal), even under
				// -disable-auto-cleanup: no rank lives to write a record. The
				// launcher's report is the diagnosis there.
				if !strings.Contains(j.out, "signal 9") {
					t.Fatalf("the launcher did not report the killed rank; output:\n%s", j.out)
				}
				t.Logf("MPICH: the killed rank is named by the launcher only:\n%s", j.out)
				return
			}
			out, err := exec.Command(bin, "trace", dir).CombinedOutput()
			var exit *exec.ExitError
			if !strings.Contains(string(out), tc.want) || err == nil || !asExit(err, &exit) || exit.ExitCode() != 1 {
				entries, _ := os.ReadDir(dir)
				t.Fatalf("gpucomm trace: %v; want exit 1 and %q\n%s\nrecords: %v\njob output:\n%s", err, tc.want, out, entries, j.out)
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

type drillJob struct {
	out string
	err error
}

// launchDrill runs argv on 4 ranks under this binary's launcher. MPICH's
// Hydra kills every rank with SIGKILL as soon as one dies, before any can
// write its record; -disable-auto-cleanup leaves the others to time out,
// write, and end the job with MPI_Abort (Open MPI's mpirun sends TERM
// first, which GPUCOMM_TRACE_SIGNAL=TERM turns into a write).
func launchDrill(t *testing.T, env []string, argv ...string) drillJob {
	t.Helper()
	path, args, err := mpitest.Launcher(4)
	if err != nil {
		t.Skip(err)
	}
	if mpi.Family() == "mpich" {
		args = append([]string{"-disable-auto-cleanup"}, args...)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, argv...)...)
	cmd.Env = append(append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"), env...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the drill's job still ran after 2 minutes; output:\n%s", out)
	}
	return drillJob{out: string(out), err: err}
}
