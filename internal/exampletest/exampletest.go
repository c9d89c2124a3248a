// Package exampletest holds what the tests of the example programs share:
// running a program's main in a child process (the test binary again) with
// the arguments a test gives it, and the checks every example that takes no
// arguments must pass.
package exampletest

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// argsEnv carries, to the child process, the arguments its main runs with.
const argsEnv = "GPUCOMM_EXAMPLE_TEST_ARGS"

// RunMain runs main as program prog with args in a child process (the test
// binary again, running only the calling test) and returns its exit code
// and output. In the child it runs main itself and exits 0 when main
// returns. The child opens the local backend on the host device.
func RunMain(t *testing.T, prog string, main func(), args ...string) (int, string) {
	t.Helper()
	if a, ok := os.LookupEnv(argsEnv); ok {
		os.Args = append([]string{prog}, strings.Fields(a)...)
		main()
		os.Exit(0) // main returned: the run succeeded
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^"+strings.Split(t.Name(), "/")[0]+"$")
	cmd.Env = append(os.Environ(), argsEnv+"="+strings.Join(args, " "), "GPUCOMM_BACKEND=local", "GPUCOMM_DEVICE=")
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// NoArguments checks a program that takes no arguments: an argument (mpirun's
// -np given to the program, or a stray word) is a usage error, status 2,
// that names it and prints the usage; -h prints the usage with status 0;
// neither runs the program (its output never holds ran, a line only a run
// prints). checkArgs is the program's own check, which returns ok for no
// arguments and otherwise the status to exit with. Call it from one test
// function of the program's package: its children run that test again.
func NoArguments(t *testing.T, prog string, main func(), checkArgs func([]string, io.Writer) (int, bool), ran string) {
	t.Helper()
	usage := "usage: " + prog
	for _, tc := range []struct {
		args  []string
		code  int
		wants []string
	}{
		{[]string{"-np", "4"}, 2, []string{usage}},
		{[]string{"extra"}, 2, []string{prog + `: unexpected argument "extra"`, usage}},
		{[]string{"-h"}, 0, []string{usage}},
	} {
		code, out := RunMain(t, prog, main, tc.args...)
		ok := code == tc.code && !strings.Contains(out, ran)
		for _, w := range tc.wants {
			ok = ok && strings.Contains(out, w)
		}
		if !ok {
			t.Errorf("%s %s: exit %d; want %d, %q, and no run\n%s", prog, strings.Join(tc.args, " "), code, tc.code, tc.wants, out)
		}
	}
	var w bytes.Buffer
	if code, ok := checkArgs(nil, &w); !ok || code != 0 || w.Len() != 0 {
		t.Errorf("%s's checkArgs of no arguments: %d, %v, %q; want 0, true and no output", prog, code, ok, w.String())
	}
	for _, args := range [][]string{{"-np", "4"}, {"4"}, {"--", "x"}} {
		w.Reset()
		if code, ok := checkArgs(args, &w); ok || code != 2 || !strings.Contains(w.String(), usage) {
			t.Errorf("%s's checkArgs of %q: %d, %v, %q; want 2, false and the usage", prog, args, code, ok, w.String())
		}
	}
}
