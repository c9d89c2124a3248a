package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// invalidBackend passes its probe, and its Open refuses a malformed
// setting, as the mpi backend refuses GPUCOMM_MPI_THREAD_LEVEL=x.
const (
	invalidBackend = "test-invalid-setting"
	invalidReason  = "GPUCOMM_TEST_SETTING=\"x\": want y"
)

func init() {
	comm.Register(invalidBackend, driver.Driver{
		Rank: -1,
		Open: func(comm.Options) (driver.Conn, error) {
			return nil, fmt.Errorf("%s: %w", invalidReason, comm.ErrInvalidArgument)
		},
		Probe: func() comm.Verdict { return comm.Verdict{Usable: true, Reason: "claims it can run"} },
	})
}

// check took -probe=false -probe-only and probed anyway, took -run and
// -short with -probe-only and ignored them, and gave -np 100000 exit 1
// from the local group's refusal: each is a usage error (2) naming the
// flags, as bench gives.
func TestCheckContradictoryFlagsAreUsageErrors(t *testing.T) {
	asRank0(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-np", "2", "-probe=false", "-probe-only"}, "-probe=false and -probe-only: pick one"},
		{[]string{"-np", "2", "-probe-only", "-run", "AllReduce"}, "-run and -short choose the conformance suite's cases, which -probe-only skips"},
		{[]string{"-np", "2", "-probe-only", "-short"}, "-run and -short choose the conformance suite's cases, which -probe-only skips"},
		{[]string{"-np", "2", "-probe-only", "-short", "-run", "Split"}, "-run and -short choose the conformance suite's cases, which -probe-only skips"},
		{[]string{"-np", "100000", "-probe-only"}, "-np 100000: want 1 to 65536 ranks"},
		{[]string{"-np", "0"}, "-np 0: want 1 to 65536 ranks"},
	} {
		code, out, errOut := runCLI(t, append([]string{"check"}, c.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "gpucomm check: "+c.want) || !strings.Contains(errOut, "Run 'gpucomm check -h' for usage.") {
			t.Errorf("check %v: exit %d, stdout %q, stderr %q; want 2, nothing on stdout, %q and the usage hint", c.args, code, out, errOut, c.want)
		}
	}
	// What stays allowed: the probe alone, and the suite with the probe off.
	if code, _, errOut := runCLI(t, "check", "-np", "2", "-probe=true", "-probe-only", "-timeout", "1m"); code != exitOK {
		t.Errorf("-probe=true -probe-only: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "check", "-np", "2", "-probe=false", "-short", "-run", "^Identity$"); code != exitOK {
		t.Errorf("-probe=false -short -run: exit %d\n%s", code, errOut)
	}
}

// A malformed variable that a backend reads at Open (GPUCOMM_MPI_THREAD_LEVEL,
// GPUCOMM_NODE_IPC, ...) made check exit 1 while bench and heat exit 2 for
// it: an Open refused with ErrInvalidArgument is a usage error in check too,
// and the report on stdout stays.
func TestCheckOpenRefusingASettingIsAUsageError(t *testing.T) {
	asRank0(t)
	code, out, errOut := runCLI(t, "check", "-backend", invalidBackend, "-short")
	if code != exitUsage || out != "" || !strings.Contains(errOut, invalidReason) {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and the setting named", code, out, errOut)
	}
	code, out, _ = runCLI(t, "check", "-backend", invalidBackend, "-json")
	if code != exitUsage || !strings.Contains(out, `"error": "backend `+invalidBackend+` did not open: `) {
		t.Errorf("-json: exit %d; want 2 and the report\n%s", code, out)
	}
}

// The same under the launcher, with the variable the review used: every
// rank stops with 2, as heat does for it.
func TestCheckMalformedMPIVariableExitsAsHeatDoes(t *testing.T) {
	bin := launcherCommand(t)
	path, args, err := mpitest.Launcher(2)
	if err != nil {
		t.Skip(err)
	}
	for _, argv := range [][]string{
		{"check", "-backend", "mpi", "-device", "host", "-short"},
		{"heat", "-backend", "mpi", "-device", "host", "-n", "16", "-steps", "1"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, path, append(append(args, bin), argv...)...)
		cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "GPUCOMM_BACKEND=",
			"GPUCOMM_MPI_THREAD_LEVEL=x")
		out, err := cmd.CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitUsage || !strings.Contains(string(out), `GPUCOMM_MPI_THREAD_LEVEL="x"`) {
			t.Errorf("%v with GPUCOMM_MPI_THREAD_LEVEL=x: %v; want exit 2 naming the variable\n%s", argv, err, out)
		}
	}
}
