package main

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the program in-process as a shell would, with
// GPUCOMM_BACKEND cleared so the caller's environment cannot steer it.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("GPUCOMM_BACKEND", "")
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageListsCommandsSortedAndExitsZeroWhenAsked(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"--help"}} {
		code, out, errOut := runCLI(t, args...)
		if code != exitOK {
			t.Errorf("%v: exit %d, want 0; stderr:\n%s", args, code, errOut)
		}
		ci, ii := strings.Index(out, " check "), strings.Index(out, " info ")
		if ci < 0 || ii < 0 || ci > ii {
			t.Errorf("%v: usage should list check then info:\n%s", args, out)
		}
		for name, c := range commands {
			if !strings.Contains(out, c.summary) {
				t.Errorf("%v: usage lacks %s's summary %q", args, name, c.summary)
			}
		}
	}
}

func TestNoArgumentsIsUsageErrorOnStderr(t *testing.T) {
	code, out, errOut := runCLI(t)
	if code != exitUsage || out != "" || !strings.Contains(errOut, "check") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing, usage", code, out, errOut)
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	code, out, errOut := runCLI(t, "frobnicate", "-x")
	if code != exitUsage {
		t.Errorf("exit %d, want 2", code)
	}
	if out != "" || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("stdout %q, stderr %q: want the complaint on stderr only", out, errOut)
	}
	if code, _, _ := runCLI(t, "help", "frobnicate"); code != exitUsage {
		t.Errorf("help frobnicate: exit %d, want 2", code)
	}
}

func TestSubcommandHelpExitsZeroWithItsFlags(t *testing.T) {
	code, out, errOut := runCLI(t, "check", "-h")
	if code != exitOK || out != "" || !strings.Contains(errOut, "-backend") || !strings.Contains(errOut, "-np") {
		t.Errorf("check -h: exit %d, stdout %q, stderr %q; want 0 and flags on stderr", code, out, errOut)
	}
	// "help check" is asked for, so its answer goes to stdout.
	code, out, _ = runCLI(t, "help", "check")
	if code != exitOK || !strings.Contains(out, "-timeout") {
		t.Errorf("help check: exit %d, stdout %q; want 0 and flags", code, out)
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"check", "-nosuch"},
		{"check", "-np", "x"},
		{"check", "-np", "0"},
		{"check", "-run", "("},
		{"check", "-timeout", "-1s"},
		{"check", "-device", "gpu0"},
		{"check", "-device", "cuda"}, // local runs on host devices only
		{"check", "extra"},
		{"info", "-nosuch"},
		{"info", "extra"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want 2; stderr:\n%s", args, code, errOut)
		}
		if out != "" || errOut == "" {
			t.Errorf("%v: stdout %q, stderr %q: want a message on stderr only", args, out, errOut)
		}
	}
}

func TestRegisterRejectsDuplicatesAndIncompleteCommands(t *testing.T) {
	noop := func(context.Context, []string, io.Writer, io.Writer) int { return 0 }
	for _, c := range []*command{nil, {name: "x"}, {run: noop}, {name: "check", run: noop}, {name: "help", run: noop}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("register(%+v) did not panic", c)
				}
			}()
			register(c)
		}()
	}
	if _, ok := commands["x"]; ok {
		t.Error("an incomplete command was registered")
	}
}

// TestBuiltBinaryChecksLocalBackend is README's first command, run as a real
// process: the build, flag parsing, exit status and output together.
func TestBuiltBinaryChecksLocalBackend(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build the binary with")
	}
	bin := filepath.Join(t.TempDir(), "gpucomm")
	build := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Setenv("GPUCOMM_BACKEND", "")
	cmd := exec.Command(bin, "check", "-np", "4", "-short")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpucomm check -np 4 -short: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	if n := len(resultLines(out.String(), "PASS")); n == 0 {
		t.Errorf("no PASS lines in:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "4 ranks") {
		t.Errorf("report does not say it ran 4 ranks:\n%s", out.String())
	}
}

// resultLines are the table rows whose RESULT column is verdict.
func resultLines(table, verdict string) []string {
	var rows []string
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[len(f)-2] == verdict {
			rows = append(rows, line)
		}
	}
	return rows
}
