package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// Under mpirun -np N every rank printed each usage error and its "Run ...
// -h" line, N times over. The launcher's rank 0 alone prints it now; every
// rank exits 2.
func TestUsageErrorsUnderLauncherArePrintedOnce(t *testing.T) {
	bin := launcherCommand(t)
	path, args, err := mpitest.Launcher(3)
	if err != nil {
		t.Skip(err)
	}
	const hint = "for usage."
	for _, c := range []struct {
		argv       []string
		says, then string
	}{
		{[]string{"bench", "-backend", "mpi", "-device", "host", "-b", "64", "-e", "8"}, "gpucomm bench: -e 8 is below -b 64", hint},
		{[]string{"bench", "-backend", "mpi", "-nosuchflag"}, "flag provided but not defined: -nosuchflag", "usage: gpucomm bench "},
		{[]string{"check", "-backend", "mpi", "-probe=false", "-probe-only"}, "gpucomm check: -probe=false and -probe-only: pick one", hint},
		{[]string{"check", "-backend", "mpi", "-np", "4"}, "gpucomm check: -np applies to the local backend only", hint},
		{[]string{"check", "-nosuchflag"}, "flag provided but not defined: -nosuchflag", "usage: gpucomm check "},
		{[]string{"heat", "-backend", "mpi", "-dtype", "int8"}, `gpucomm heat: -dtype "int8": want float64 or float32`, hint},
		{[]string{"drill", "-backend", "mpi", "-mode", "bogus"}, `gpucomm drill: -mode "bogus": want skip, wrong or kill`, hint},
		{[]string{"nosuchcommand"}, `gpucomm: unknown command "nosuchcommand"`, hint},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := exec.CommandContext(ctx, path, append(append(args, bin), c.argv...)...)
		cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "GPUCOMM_BACKEND=", "GPUCOMM_DEVICE=host")
		out, err := cmd.CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitUsage {
			t.Errorf("%v: %v; want exit 2\n%s", c.argv, err, out)
		}
		if n := strings.Count(string(out), c.says); n != 1 {
			t.Errorf("%v: %q said %d times, want once (rank 0)\n%s", c.argv, c.says, n, out)
		}
		if n := strings.Count(string(out), c.then); n != 1 {
			t.Errorf("%v: %q %d times, want once\n%s", c.argv, c.then, n, out)
		}
	}
}
