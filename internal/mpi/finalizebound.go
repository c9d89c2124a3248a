package mpi

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// FinalizeBoundEnv, when set to a positive duration ("10s"), bounds
// MPI_Finalize: before it every rank passes a barrier on MPI_COMM_WORLD,
// and a rank whose MPI_Finalize has not returned that long after the
// barrier says so on stderr and returns from Finalize (or from the last
// Release) as if it had, leaving the call running on its thread, so that
// the program goes on to exit with its own status. It is for Debian's MPICH
// 4.0.2 with UCX 1.13, which now and then leaves a rank in MPI_Finalize for
// good (a UCX endpoint-close bug, seen between simulated nodes and on one
// host with UCX_TLS=tcp,self); scripts/multinode/ci.sh sets it for its
// MPICH jobs. A rank that never reaches the barrier is not bounded: that is
// a rank missing, for the launcher's own bound. Run the job under Hydra
// with -disable-auto-cleanup: the first rank to end without finishing
// MPI_Finalize otherwise has Hydra SIGKILL the others (and the job exits
// 9). From the barrier on, SIGUSR1 is ignored: Hydra sends it to every rank
// when one ends with MPI_Finalize unfinished, and arriving on one of
// MPICH's or UCX's threads it would end a Go program. Hydra 4.0.2 may still
// report status 1 for such a rank, whatever status it ended with (its proxy
// gives the rank a provisional 1 when its PMI connection closes before
// PMI's finalize, and keeps it when it reaped the rank first; mpiexec then
// says "Hangup (signal 1)"): the ranks' output decides such a job. Under
// Open MPI the variable is ignored (rank 0 says so on stderr): its mpirun
// fails a job whose rank ended before MPI_Finalize returned, whatever its
// status, and Open MPI 4.1's mpirun can itself hang in its teardown when
// ranks leave so, which would turn a bounded hang into an unbounded one.
// Unset, "0", "0s" or "off": no barrier and no bound.
const FinalizeBoundEnv = "GPUCOMM_MPI_FINALIZE_BOUND"

// FinalizeLeftLine starts what a rank prints on stderr when the bound
// leaves its MPI_Finalize running; HydraProvisionalStatus is what MPICH
// 4.0.2's mpiexec prints when it reports the provisional status 1 for such
// a rank.
const (
	FinalizeLeftLine       = "MPI_Finalize had not returned"
	HydraProvisionalStatus = "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Hangup (signal 1)"
)

// HydraFinalizeBounded reports whether a job of family's launcher that
// failed with err (from os/exec) failed only because the bound ended a rank
// with MPI_Finalize unfinished (MPICH only, the bound's line in output):
// either Hydra's status 1 for such a rank (exit status 1, its line in
// output too), or mpiexec dead of SIGPIPE, MPICH 4.0.2's launcher writing
// to such a rank's closed PMI connection (seen twice on 2026-12-05 across
// simulated nodes). The ranks' own output then decides the job.
func HydraFinalizeBounded(family, output string, err error) bool {
	var exit *exec.ExitError
	if family != "mpich" || !errors.As(err, &exit) || !strings.Contains(output, FinalizeLeftLine) {
		return false
	}
	if exit.ExitCode() == 1 && strings.Contains(output, HydraProvisionalStatus) {
		return true
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGPIPE
}

// finalizeBoundFrom reads FinalizeBoundEnv's value v.
func finalizeBoundFrom(v string) (time.Duration, error) {
	switch v {
	case "", "0", "off":
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("mpi: %s=%q: want a positive duration such as 10s, or 0 or off for none: %w", FinalizeBoundEnv, v, errs.ErrInvalidArgument)
	}
	return d, nil
}

// finalizeBoundIn is the bound MPI family fam runs with for
// FinalizeBoundEnv's value v, and what to say when it ignores the value:
// Open MPI runs with none (see FinalizeBoundEnv).
func finalizeBoundIn(fam, v string) (bound time.Duration, ignored string, err error) {
	bound, err = finalizeBoundFrom(v)
	if err != nil || bound == 0 || fam != "openmpi" {
		return bound, "", err
	}
	return 0, fmt.Sprintf("gpucomm: %s=%s ignored under Open MPI: its mpirun fails a job whose rank ends before MPI_Finalize returns, "+
		"and can hang in its own teardown when one does; the bound is for MPICH's finalize hang\n", FinalizeBoundEnv, v), nil
}
