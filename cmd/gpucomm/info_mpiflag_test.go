package main

import (
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/mpi"
)

// info -mpi in a binary without MPI is a usage error that says how to build
// MPI in; it printed the plain report, exit 0, as if MPI had been asked.
func TestInfoMPIFlagWithoutMPIIsRefused(t *testing.T) {
	if mpi.Built() {
		t.Skip("MPI is built into this test binary: info -mpi runs it")
	}
	code, out, errOut := runCLI(t, "info", "-mpi")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "-mpi starts MPI, and this binary has none") || !strings.Contains(errOut, "-tags mpi") {
		t.Errorf("info -mpi without MPI: exit %d, stdout %q, stderr %q; want exit %d, nothing printed, and how to build MPI in", code, out, errOut, exitUsage)
	}
}
