package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// argsEnv makes the test binary, run again by a test, run the program's
// main with the arguments it holds.
const argsEnv = "GPUCOMM_HYBRID_TEST_ARGS"

// runMain runs main with args in a child process (the test binary again)
// and returns its exit code and output.
func runMain(t *testing.T, test string, args ...string) (int, string) {
	t.Helper()
	if a, ok := os.LookupEnv(argsEnv); ok {
		os.Args = append([]string{"hybrid"}, strings.Fields(a)...)
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

// "hybrid -np 4" (mpirun's flag given to the program) ran one rank and
// exited 0, the arguments unread: the program takes none, and says so with
// the usage, before it opens a backend.
func TestAnArgumentIsAUsageError(t *testing.T) {
	code, out := runMain(t, "TestAnArgumentIsAUsageError", "-np", "4")
	if code != 2 || !strings.Contains(out, "usage: hybrid") || strings.Contains(out, "ranks on") {
		t.Fatalf("hybrid -np 4: exit %d; want 2 and the usage, and no run\n%s", code, out)
	}
}

func TestAStrayArgumentIsNamed(t *testing.T) {
	code, out := runMain(t, "TestAStrayArgumentIsNamed", "extra")
	if code != 2 || !strings.Contains(out, `hybrid: unexpected argument "extra"`) || !strings.Contains(out, "usage: hybrid") ||
		strings.Contains(out, "ranks on") {
		t.Fatalf("hybrid extra: exit %d; want 2, the argument named and the usage, and no run\n%s", code, out)
	}
}

// -h prints the usage and is no failure.
func TestHelpExitsZeroAndPrintsUsage(t *testing.T) {
	code, out := runMain(t, "TestHelpExitsZeroAndPrintsUsage", "-h")
	if code != 0 || !strings.Contains(out, "usage: hybrid") || strings.Contains(out, "ranks on") {
		t.Fatalf("hybrid -h: exit %d; want 0 and the usage, and no run\n%s", code, out)
	}
}

func TestCheckArgsAcceptsNoneAndRefusesAny(t *testing.T) {
	var w bytes.Buffer
	if code, ok := checkArgs(nil, &w); !ok || code != 0 || w.Len() != 0 {
		t.Errorf("no arguments: %d, %v, %q; want 0, true and no output", code, ok, w.String())
	}
	for _, args := range [][]string{{"-np", "4"}, {"4"}, {"--", "x"}} {
		w.Reset()
		if code, ok := checkArgs(args, &w); ok || code != 2 || !strings.Contains(w.String(), "usage: hybrid") {
			t.Errorf("%q: %d, %v, %q; want 2, false and the usage", args, code, ok, w.String())
		}
	}
}
