package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// argsEnv makes the test binary, run again by a test, run the program's
// main with the arguments it holds.
const argsEnv = "GPUCOMM_HEAT_TEST_ARGS"

// runMain runs main with args in a child process (the test binary again)
// and returns its exit code and output.
func runMain(t *testing.T, test string, args ...string) (int, string) {
	t.Helper()
	if a, ok := os.LookupEnv(argsEnv); ok {
		os.Args = append([]string{"heat"}, strings.Fields(a)...)
		main()
		os.Exit(0) // main returned: the run succeeded
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$")
	cmd.Env = append(os.Environ(), argsEnv+"="+strings.Join(args, " "), "GPUCOMM_BACKEND=local", "GPUCOMM_DEVICE=")
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// "heat extra" ran the solver and exited 0, the argument unread: the
// program takes none, and says so with the usage, before it opens a backend.
func TestAnArgumentIsAUsageError(t *testing.T) {
	code, out := runMain(t, "TestAnArgumentIsAUsageError", "extra")
	if code != 2 || !strings.Contains(out, `heat: unexpected argument "extra"`) || !strings.Contains(out, "usage: heat") ||
		strings.Contains(out, "residual") {
		t.Fatalf("heat extra: exit %d; want 2, the argument named and the usage, and no run\n%s", code, out)
	}
}

// -h prints the usage and is no failure.
func TestHelpExitsZeroAndPrintsUsage(t *testing.T) {
	code, out := runMain(t, "TestHelpExitsZeroAndPrintsUsage", "-h")
	if code != 0 || !strings.Contains(out, "usage: heat") || strings.Contains(out, "residual") {
		t.Fatalf("heat -h: exit %d; want 0 and the usage, and no run\n%s", code, out)
	}
}
