package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// routesLine is the line info -mpi prints under its routes heading.
var routesLine = regexp.MustCompile(`(?m)^Routes of the mpi backend.*\n  (.*)$`)

// probeMPILine is check's probe line about MPI in a binary without it.
var probeMPILine = regexp.MustCompile(`(?m)^  mpi +info +MPI is not in this binary: (.*)$`)

// checkBuildAdvice checks what a binary without MPI says of building it in:
// tagged says whether the binary was built with an MPI tag but without cgo.
func checkBuildAdvice(t *testing.T, line string, tagged bool) {
	t.Helper()
	if tagged {
		for _, want := range []string{"with an MPI tag", "without cgo", "CGO_ENABLED=0", "no C compiler", "MPI needs cgo"} {
			if !strings.Contains(line, want) {
				t.Errorf("%q does not say %q", line, want)
			}
		}
		if strings.Contains(line, "rebuild with -tags") {
			t.Errorf("%q advises the tag the binary was built with", line)
		}
		return
	}
	if !strings.Contains(line, "rebuild with -tags mpi (Open MPI) or -tags mpich (MPICH and its ABI), with cgo enabled") {
		t.Errorf("%q does not say which tag builds MPI in", line)
	}
}

// go build -tags mpi with cgo off builds, silently, a binary without MPI:
// its info -mpi must say that cgo was off, not to add the tag it has.
func TestABinaryTaggedMPIWithoutCgoSaysCgoWasOff(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build the binary with")
	}
	for _, tag := range []string{"mpi", "mpich"} {
		t.Run(tag, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "gpucomm")
			build := exec.Command(goTool, "build", "-tags", tag, "-o", bin, ".")
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("CGO_ENABLED=0 go build -tags %s: %v\n%s", tag, err, out)
			}
			cmd := exec.Command(bin, "info", "-mpi")
			cmd.Env = append(os.Environ(), "GPUCOMM_BACKEND=", "GPUCOMM_DEVICE=")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("info -mpi: %v\n%s", err, out)
			}
			m := routesLine.FindStringSubmatch(string(out))
			if m == nil {
				t.Fatalf("info -mpi prints no routes line:\n%s", out)
			}
			checkBuildAdvice(t, m[1], true)
			cmd = exec.Command(bin, "check", "-probe-only", "-np", "1")
			cmd.Env = append(os.Environ(), "GPUCOMM_BACKEND=", "GPUCOMM_DEVICE=")
			if out, err = cmd.CombinedOutput(); err != nil {
				t.Fatalf("check -probe-only: %v\n%s", err, out)
			}
			if m = probeMPILine.FindStringSubmatch(string(out)); m == nil {
				t.Fatalf("check -probe-only prints no mpi line:\n%s", out)
			}
			checkBuildAdvice(t, m[1], true)
		})
	}
}
