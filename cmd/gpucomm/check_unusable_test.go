package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// asRank0 clears the launcher's variables, so that this process reports
// as rank 0 whoever launched the test.
func asRank0(t *testing.T) {
	t.Helper()
	for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
		"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_STEP_ID", "SLURM_STEPID", "PMIX_NAMESPACE", "PMIX_RANK", "SLURM_PROCID"} {
		unsetenv(t, k)
	}
}

// A backend that its probe finds unusable here (not built, no NCCL,
// GPUCOMM_CUDA_AWARE=0, the other family's launcher) printed nothing on
// stdout under -json and -probe-only, where a backend that passed the probe
// and failed to open got its report: a script running check -json on each
// backend got no JSON exactly when the backend was unusable. Both now get
// rank 0's report, with the reason as an error finding and, under -json,
// "ok": false and an "error"; the plain table stays off stdout, as no case
// ran (TestCheckUnusableBackendSaysWhy).
func TestCheckUnusableBackendStillReportsOnStdout(t *testing.T) {
	asRank0(t)
	const cause = "backend " + unusableBackend + " cannot run here: " + unusableReason

	code, out, errOut := runCLI(t, "check", "-backend", unusableBackend, "-json")
	var c checkJSON
	if err := json.Unmarshal([]byte(out), &c); code != exitFail || err != nil || c.OK || c.Backend != unusableBackend || c.Ranks != 1 ||
		len(c.Results) != 0 || c.Error != cause || c.Probe == nil || !c.Probe.failed() || c.Probe.Verdict != unusableBackend+": NOT usable: it cannot run here" {
		t.Errorf("-json: exit %d, %v, %+v; want 1, ok false, no results, the error %q and the probe\nstdout:\n%s\nstderr:\n%s", code, err, c, cause, out, errOut)
	}
	if strings.Count(errOut, cause) != 1 {
		t.Errorf("-json: stderr should say %q once:\n%s", cause, errOut)
	}

	code, out, errOut = runCLI(t, "check", "-backend", unusableBackend, "-probe-only", "-json")
	var p probeReport
	if err := json.Unmarshal([]byte(out), &p); code != exitFail || err != nil || !p.failed() || p.Verdict != unusableBackend+": NOT usable: it cannot run here" {
		t.Errorf("-probe-only -json: exit %d, %v, %+v\nstdout:\n%s\nstderr:\n%s", code, err, p, out, errOut)
	}
	found := false
	for _, f := range p.Findings {
		found = found || f.Level == levelError && f.Area == "backend" && f.Detail == cause
	}
	if !found {
		t.Errorf("-probe-only -json: no error finding %q: %+v", cause, p.Findings)
	}

	code, out, _ = runCLI(t, "check", "-backend", unusableBackend, "-probe-only")
	if code != exitFail || !regexp.MustCompile(`(?m)^  backend +error +`+regexp.QuoteMeta(cause)+`$`).MatchString(out) || !strings.Contains(out, "verdict: "+unusableBackend+": NOT usable: it cannot run here") {
		t.Errorf("-probe-only: exit %d; want 1 and the probe's table with the reason\nstdout:\n%s", code, out)
	}

	// -probe=false -json: the report, without a probe.
	code, out, _ = runCLI(t, "check", "-backend", unusableBackend, "-probe=false", "-json")
	c = checkJSON{}
	if err := json.Unmarshal([]byte(out), &c); code != exitFail || err != nil || c.OK || c.Error != cause || c.Probe != nil {
		t.Errorf("-probe=false -json: exit %d, %v, %+v\nstdout:\n%s", code, err, c, out)
	}
}

// Under the launcher, with NCCL absent (this machine has neither NCCL nor
// a GPU): rank 0 alone prints the report, one JSON object on stdout, and
// every rank says why on stderr.
func TestCheckUnusableBackendUnderLauncherReportsOnceOnStdout(t *testing.T) {
	bin := launcherCommand(t)
	path, args, err := mpitest.Launcher(2)
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, bin, "check", "-backend", "nccl", "-device", "host", "-probe-only", "-json")...)
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "GPUCOMM_BACKEND=",
		"GPUCOMM_NCCL_LIB=/nonexistent/libnccl.so.2")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("still running after 2 minutes\nstderr:\n%s", stderr.String())
	}
	if err == nil {
		t.Fatalf("exit 0; want a failure\nstdout:\n%s", stdout.String())
	}
	dec := json.NewDecoder(strings.NewReader(stdout.String()))
	var p probeReport
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("stdout is not the probe's JSON: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if dec.More() {
		t.Errorf("stdout holds more than one report (every rank printed?):\n%s", stdout.String())
	}
	found := false
	for _, f := range p.Findings {
		found = found || f.Level == levelError && strings.HasPrefix(f.Detail, "backend nccl cannot run here: ")
	}
	if !found || p.Verdict != "nccl: NOT usable: it cannot run here" {
		t.Errorf("findings %+v, verdict %q; want the probe's reason as an error and its verdict", p.Findings, p.Verdict)
	}
	if n := strings.Count(stderr.String(), "gpucomm check: backend nccl cannot run here: "); n != 2 {
		t.Errorf("stderr says the reason %d times, want once a rank:\n%s", n, stderr.String())
	}
}
