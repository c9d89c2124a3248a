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
	bin := launcherCommand(t)
	for _, tc := range []struct {
		mode, want string
	}{
		{"skip", "first divergence: collective 3 (AllReduce(count=256 dtype=float32 op=sum)): rank 2 never entered it"},
		{"kill", "rank 2 wrote no record"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			// Open MPI's mpirun follows its TERM with KILL a second later
			// (odls_base_sigkill_timeout): on a loaded machine a survivor
			// missed that second and wrote no record, so it gets ten.
			env := []string{"GPUCOMM_TRACE_DIR=" + dir, "GPUCOMM_TRACE_SIGNAL=TERM", "GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND=",
				"OMPI_MCA_odls_base_sigkill_timeout=10"}
			argv := []string{bin, "drill", "-backend", "mpi", "-mode", tc.mode, "-rank", "2", "-at", "3", "-count", "256", "-timeout", "3s"}
			j := launchDrill(t, env, argv...)
			if j.err == nil {
				t.Fatalf("the drill's job succeeded; output:\n%s", j.out)
			}
			if tc.mode == "kill" && mpi.Family() == "mpich" {
				// Under Hydra every rank of a node hangs off one proxy, which
				// ends them all when one dies, even under
				// -disable-auto-cleanup: no rank lives to write a record, and
				// the launcher's report, the only diagnosis, names the killed
				// rank ("signal 9") in most runs, but in about one in six
				// (Debian's MPICH 4.0.2, 2026-12-04) the proxy fails forwarding
				// a PMI response to the dead rank and the job ends with exit
				// 255 naming no one. So under MPICH a killed rank is diagnosed
				// by the node-kill drill across simulated nodes instead
				// (internal/mpicomm/multinodetest, run by scripts/multinode/ci.sh
				// under both MPIs), where the survivors live and name it.
				t.Skipf("MPICH: a killed rank takes its node's proxy and every rank on it; the multinode node-kill drill diagnoses it (launcher output: %q)", lastLine(j.out))
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

// lastLine is out's last non-empty line.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
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
