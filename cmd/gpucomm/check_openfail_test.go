package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// A backend that does not open (here: a CUDA driver that is not there)
// still gives rank 0's stdout the report that was asked for, with the
// failure in it, where stdout was empty and only stderr spoke: -probe-only
// -json the probe's JSON with an error finding and a verdict, -json the
// check's JSON with ok false and the error, -probe-only the probe's table.
// The exit status says the failure in every case.
func TestCheckReportsABackendThatDidNotOpenOnStdout(t *testing.T) {
	bin := launcherCommand(t)
	path, args, err := mpitest.Launcher(2)
	if err != nil {
		t.Skip(err)
	}
	run := func(flags ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, append(append(args, bin, "check", "-backend", "mpi"), flags...)...)
		cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
			"GPUCOMM_DEVICE=cuda", "GPUCOMM_CUDA_LIB=/nonexistent/libcuda.so.1", "GPUCOMM_BACKEND=")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	const cause = "backend mpi did not open: "

	out, errOut, err := run("-probe-only", "-json")
	var p probeReport
	if err == nil {
		t.Errorf("-probe-only -json: exit 0; want a failure")
	}
	if jerr := json.Unmarshal([]byte(out), &p); jerr != nil {
		t.Fatalf("-probe-only -json: stdout is not the probe's JSON: %v\nstdout:\n%s\nstderr:\n%s", jerr, out, errOut)
	}
	found := false
	for _, f := range p.Findings {
		if f.Level == levelError && strings.HasPrefix(f.Detail, cause) && strings.Contains(f.Detail, "/nonexistent/libcuda.so.1") {
			found = true
		}
	}
	if !found || p.Verdict != "mpi: NOT usable: it did not open" || !p.failed() {
		t.Errorf("-probe-only -json: findings %+v, verdict %q; want the open's failure and its verdict", p.Findings, p.Verdict)
	}

	out, errOut, err = run("-json", "-short")
	var c checkJSON
	if err == nil {
		t.Errorf("-json: exit 0; want a failure")
	}
	if jerr := json.Unmarshal([]byte(out), &c); jerr != nil {
		t.Fatalf("-json: stdout is not the check's JSON: %v\nstdout:\n%s\nstderr:\n%s", jerr, out, errOut)
	}
	if c.OK || c.Backend != "mpi" || c.Ranks != 2 || len(c.Results) != 0 || !strings.HasPrefix(c.Error, cause) || c.Probe == nil || !c.Probe.failed() {
		t.Errorf("-json: %+v; want ok false, the job's 2 ranks, no results, the error and the probe", c)
	}

	out, errOut, err = run("-probe-only")
	if err == nil || !strings.Contains(out, "verdict: mpi: NOT usable: it did not open") || !strings.Contains(out, cause) {
		t.Errorf("-probe-only: exit %v; want a failure and the probe's table with the open's failure\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	// The cause is on stderr as before.
	if strings.Count(errOut, "gpucomm check: "+cause[:len(cause)-2]) < 1 {
		t.Errorf("-probe-only: stderr does not say the backend did not open:\n%s", errOut)
	}
}

// launcherCommand skips unless MPI is built in and the tests may launch
// jobs (not -short), and returns the gpucomm binary the jobs run, built
// for this test binary's MPI family.
func launcherCommand(t *testing.T) string {
	t.Helper()
	if !mpi.Built() {
		t.Skip("MPI is not built in: run with -tags mpi or -tags mpich")
	}
	if testing.Short() {
		t.Skip("launches MPI jobs")
	}
	return mpitest.BuildCommand(t)
}
