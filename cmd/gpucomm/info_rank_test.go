package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/launcher"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// With only GPUCOMM_TRACE_SIGNAL set the recorder is on and writes into
// ./gpucomm-trace, but info said "GPUCOMM_TRACE_DIR (unset) no flight
// recorder" just above the signal's "(recording on)": its line now says
// where the records go.
func TestInfoSaysWhereRecordsGoWithOnlyTheSignalSet(t *testing.T) {
	withSections(t)
	asRank0(t)
	line := regexp.MustCompile(`(?m)^  GPUCOMM_TRACE_DIR\s.*$`)
	unsetenv(t, "GPUCOMM_TRACE_DIR")
	t.Setenv("GPUCOMM_TRACE_SIGNAL", "USR1")
	code, out, errOut := runCLI(t, "info")
	got := line.FindString(out)
	if code != exitOK || !strings.Contains(got, "(unset)") || !strings.Contains(got, "records go to ./gpucomm-trace") || strings.Contains(got, "no flight recorder") {
		t.Errorf("exit %d, line %q; want the records' directory, ./gpucomm-trace\nstderr:\n%s", code, got, errOut)
	}
	t.Setenv("GPUCOMM_TRACE_SIGNAL", "")
	if _, out, _ = runCLI(t, "info"); !strings.Contains(line.FindString(out), "no flight recorder") {
		t.Errorf("neither set: %q; want no flight recorder", line.FindString(out))
	}
}

// Where MPI did not start (a binary without MPI, a malformed variable, the
// other family's launcher), info -mpi took every process for rank 0 and
// printed the whole report once a rank; the launcher's rank 0 alone prints
// it now.
func TestInfoMPIPrintsOnceWhereMPIDidNotStart(t *testing.T) {
	bin := launcherCommand(t)
	if _, ok := launcher.FromEnv(); ok {
		t.Skip("this test is itself under a launcher; it starts its own")
	}
	reports := func(out string) int { return strings.Count(out, "Backends (best first):") }

	j := mpitest.Launch(t, 3, time.Minute, []string{"GPUCOMM_DEVICE=bogus", "GPUCOMM_BACKEND="}, bin, "info", "-mpi")
	if n := reports(j.Output); n != 1 || j.Err == nil || strings.Count(j.Output, "Placement:") > 1 {
		t.Errorf("GPUCOMM_DEVICE=bogus: %v, %d reports; want a failure and one report\n%s", j.Err, n, j.Output)
	}

	plain := buildWithoutMPI(t)
	j = mpitest.Launch(t, 3, time.Minute, []string{"GPUCOMM_DEVICE=", "GPUCOMM_BACKEND="}, plain, "info", "-mpi")
	if n := reports(j.Output); n != 1 {
		t.Errorf("a binary without MPI: %v, %d reports; want one\n%s", j.Err, n, j.Output)
	}

	path, args := mpitest.OtherLauncher(t, 2)
	code, out := launch(t, path, args, bin, "info", "-mpi")
	if n := reports(out); n != 1 {
		t.Errorf("under %s: exit %d, %d reports; want one\n%s", path, code, n, out)
	}
}

// On one rank the route of reductions and Broadcast said "the node path is
// off", which the README ties to GPUCOMM_NODE_BYTES=off: with one rank
// there is no peer.
func TestInfoMPIOnOneRankSaysThereIsNoPeer(t *testing.T) {
	bin := launcherCommand(t)
	j := mpitest.Launch(t, 1, time.Minute, []string{"GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND=", "GPUCOMM_NODE_BYTES="}, bin, "info", "-mpi")
	if j.Err != nil || !strings.Contains(j.Output, "rank 0: reductions and Broadcast: one rank: no peer") || strings.Contains(j.Output, "node path is off") {
		t.Errorf("mpirun -np 1 gpucomm info -mpi: %v; want the route to say one rank, no peer\n%s", j.Err, j.Output)
	}
}
