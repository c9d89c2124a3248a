package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// childEnv makes the test binary, run again by a test, run ipcshare itself
// with the arguments it holds, so that a crash ends the child, not the tests.
const childEnv = "GPUCOMM_IPCSHARE_TEST_CHILD"

// runChild runs ipcshare with args in a child process and returns its exit
// code (-1 when a signal or the runtime killed it) and output.
func runChild(t *testing.T, test string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args, " "), "GPUCOMM_BACKEND=", "GPUCOMM_DEVICE=")
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// inChild runs ipcshare and exits when this is the child runChild started.
func inChild() {
	if args, ok := os.LookupEnv(childEnv); ok {
		os.Exit(run(strings.Fields(args), os.Stdout, os.Stderr))
	}
}

// -np 2 -n 100000000000 died of "fatal error: runtime: out of memory" in
// make: the ranks refuse it before allocating, with one line that says how
// much the host would need and has.
func TestAJobTooLargeForTheHostIsRefusedBeforeItAllocates(t *testing.T) {
	inChild()
	code, out := runChild(t, "TestAJobTooLargeForTheHostIsRefusedBeforeItAllocates", "-np", "2", "-n", "100000000000")
	if code != 1 || strings.Contains(out, "fatal error") || strings.Contains(out, "matches") {
		t.Fatalf("ipcshare -np 2 -n 100000000000: exit %d; want 1 and a refusal\n%s", code, out)
	}
	line := "ipcshare: -n 100000000000: the ranks of a host need 9600.0 GB of its memory for u and v, but it has "
	if strings.Count(out, line) != 1 || !strings.Contains(out, "use a smaller -n") {
		t.Errorf("output does not say once %q...:\n%s", line, out)
	}
}

// A count beyond what any machine holds is a usage error, before a rank
// is made.
func TestAnImpossibleCountIsAUsageError(t *testing.T) {
	inChild()
	code, out := runChild(t, "TestAnImpossibleCountIsAUsageError", "-np", "2", "-n", "2000000000000")
	if code != 2 || strings.Contains(out, "fatal error") ||
		!strings.Contains(out, "ipcshare: -n 2000000000000: at most 1099511627776 elements a rank") {
		t.Fatalf("ipcshare -np 2 -n 2000000000000: exit %d; want 2 and the bound\n%s", code, out)
	}
}

// "ipcshare -np 2 extra" ran and exited 0: an argument is a usage error.
func TestAnArgumentIsAUsageError(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-np", "2", "extra"}, &out, &errb); code != 2 || out.Len() != 0 ||
		!strings.Contains(errb.String(), `ipcshare: unexpected argument "extra"`) || !strings.Contains(errb.String(), "-nodes") {
		t.Fatalf("ipcshare -np 2 extra: exit %d, stdout %q, stderr %q; want 2, the argument named and the usage", code, out.String(), errb.String())
	}
}
