package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm/local"
)

// drillEnv gives a drill a trace directory of its own, no GPUCOMM_BACKEND
// or GPUCOMM_DEVICE from the caller's shell, and no launcher, and returns
// the directory.
func drillEnv(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("GPUCOMM_TRACE_DIR", dir)
	t.Setenv("GPUCOMM_BACKEND", "")
	t.Setenv("GPUCOMM_DEVICE", "")
	for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
		"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_STEP_ID", "SLURM_STEPID", "PMIX_NAMESPACE", "PMIX_RANK"} {
		unsetenv(t, k)
	}
	return dir
}

// unsetenv unsets k for the test (the launchers are told apart by which
// variables are set, not by their values).
func unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "") // restores the old value at the end
	os.Unsetenv(k)
}

// noRecords fails the test when the drill wrote any flight record in dir.
func noRecords(t *testing.T, dir string) {
	t.Helper()
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the refused drill wrote records: %v", entries)
	}
}

// drill ran -np 0 and -backend bogus into exit 1, and -ops 0 into a
// complaint about -at: each is a usage error (2) naming the flag at fault.
func TestDrillFlagMisuseIsAUsageErrorNamingTheFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-np", "0"}, "-np 0: want 1 or more ranks"},
		{[]string{"-backend", "bogus"}, `unknown backend "bogus"`},
		{[]string{"-ops", "0"}, "-ops 0: want 1 or more"},
		{[]string{"-backend", "mpi", "-np", "3"}, "-np applies to the local backend only"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			dir := drillEnv(t)
			code, out, errOut := runCLI(t, append([]string{"drill", "-timeout", "200ms"}, c.args...)...)
			if code != exitUsage || !strings.Contains(errOut, c.says) || out != "" {
				t.Errorf("drill %v: exit %d, stdout %q, stderr:\n%s\nwant 2 saying %q", c.args, code, out, errOut, c.says)
			}
			if strings.Contains(errOut, "-at ") {
				t.Errorf("drill %v blames -at:\n%s", c.args, errOut)
			}
			noRecords(t, dir)
		})
	}
}

// GPUCOMM_BACKEND applies to every program: drill ran a local drill under
// GPUCOMM_BACKEND=bogus; it names the backend and the variable now, and a
// GPUCOMM_BACKEND=local over -backend mpi meets local's refusal of a kill.
func TestDrillHonoursGPUCOMMBackend(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		says []string
	}{
		{"bogus", nil, []string{`unknown backend "bogus"`, "the backend came from GPUCOMM_BACKEND=bogus in the environment"}},
		{"local", []string{"-backend", "mpi", "-mode", "kill"}, []string{"-mode kill needs one process a rank",
			"GPUCOMM_BACKEND=local in the environment, which overrides -backend mpi"}},
	} {
		t.Run(c.env, func(t *testing.T) {
			dir := drillEnv(t)
			code, errOut := runWithBackendEnv(t, c.env, append([]string{"drill", "-timeout", "200ms"}, c.args...)...)
			if code != exitUsage {
				t.Errorf("GPUCOMM_BACKEND=%s drill %v: exit %d, want 2\nstderr:\n%s", c.env, c.args, code, errOut)
			}
			for _, want := range c.says {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr does not say %q:\n%s", want, errOut)
				}
			}
			noRecords(t, dir)
		})
	}
}

// Under mpirun -np 2 every process ran a 4-rank local drill of its own,
// and their records overwrote each other: local refuses the launcher's job,
// as heat's does, before any rank runs or writes.
func TestDrillOnLocalUnderALauncherOfSeveralRanksIsRefused(t *testing.T) {
	dir := drillEnv(t)
	t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
	t.Setenv("OMPI_COMM_WORLD_RANK", "1")
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
	code, out, errOut := runCLI(t, "drill", "-timeout", "200ms")
	if code != exitFail || out != "" {
		t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
	}
	for _, want := range []string{"gpucomm drill: ", "backend local keeps every rank in one process", "Open MPI mpirun", "of 2 ranks"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "rank 0:") || strings.Contains(errOut, "timed out") {
		t.Errorf("the ranks ran:\n%s", errOut)
	}
	noRecords(t, dir)
}

// drill -backend auto -mode kill, where auto picks local, SIGKILLed the
// whole process (every rank) without a word or a record: the kill guard
// applies to what auto picks. In a child process, so that a kill does not
// take the test binary with it.
func TestDrillKillOnAutoPickingLocalIsAUsageError(t *testing.T) {
	if os.Getenv("GPUCOMM_DRILL_TEST_CHILD") == "1" {
		var out, errOut bytes.Buffer
		code := run([]string{"drill", "-backend", "auto", "-mode", "kill", "-rank", "0", "-at", "1", "-ops", "1", "-timeout", "200ms"}, &out, &errOut)
		os.Stdout.Write(out.Bytes())
		os.Stderr.Write(errOut.Bytes())
		os.Exit(code)
	}
	dir := drillEnv(t)
	if name, err := resolveBackend("auto"); err != nil || name != local.Name {
		t.Skipf("auto picks %q (%v) here, not local", name, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDrillKillOnAutoPickingLocalIsAUsageError$")
	cmd.Env = append(os.Environ(), "GPUCOMM_DRILL_TEST_CHILD=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitUsage {
		t.Fatalf("drill -backend auto -mode kill: %v (%v); want exit 2\nstdout:\n%s\nstderr:\n%s", err, cmd.ProcessState, out.String(), errOut.String())
	}
	for _, want := range []string{"-mode kill needs one process a rank", "-backend auto picked local", "Run 'gpucomm drill -h' for usage."} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut.String())
		}
	}
	noRecords(t, dir)
}
