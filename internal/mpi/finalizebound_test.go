package mpi

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestFinalizeBoundFrom(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "0": 0, "off": 0, "0s": 0, "10s": 10 * time.Second, "1.5s": 1500 * time.Millisecond} {
		if got, err := finalizeBoundFrom(v); err != nil || got != want {
			t.Errorf("finalizeBoundFrom(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"10", "-1s", "soon", "1h-"} {
		if got, err := finalizeBoundFrom(v); !errors.Is(err, errs.ErrInvalidArgument) || got != 0 {
			t.Errorf("finalizeBoundFrom(%q) = %v, %v; want ErrInvalidArgument", v, got, err)
		}
	}
}

// Open MPI runs without the bound and says why; MPICH keeps it; an invalid
// value is an error under either.
func TestFinalizeBoundInFamily(t *testing.T) {
	for _, c := range []struct {
		fam, v string
		want   time.Duration
		said   bool
	}{
		{"mpich", "5s", 5 * time.Second, false},
		{"openmpi", "5s", 0, true},
		{"openmpi", "off", 0, false},
		{"openmpi", "", 0, false},
		{"mpich", "", 0, false},
	} {
		got, note, err := finalizeBoundIn(c.fam, c.v)
		if err != nil || got != c.want || (note != "") != c.said {
			t.Errorf("finalizeBoundIn(%q, %q) = %v, %q, %v; want %v, a note %v", c.fam, c.v, got, note, err, c.want, c.said)
		}
		if c.said && (!strings.Contains(note, FinalizeBoundEnv+"="+c.v) || !strings.Contains(note, "ignored under Open MPI")) {
			t.Errorf("finalizeBoundIn(%q, %q) said %q, want the variable, its value and why", c.fam, c.v, note)
		}
	}
	for _, fam := range []string{"mpich", "openmpi"} {
		if got, _, err := finalizeBoundIn(fam, "soon"); !errors.Is(err, errs.ErrInvalidArgument) || got != 0 {
			t.Errorf("finalizeBoundIn(%q, soon) = %v, %v; want ErrInvalidArgument", fam, got, err)
		}
	}
}

// Hydra's status 1 for a rank the finalize bound ended is recognised only
// under MPICH, with exit status 1, and with both its lines in the output.
func TestHydraFinalizeStatus(t *testing.T) {
	both := "gpucomm: rank 2: " + FinalizeLeftLine + " 5s after every rank passed the barrier\n" + HydraProvisionalStatus + "\n"
	for _, c := range []struct {
		name, family, output string
		code                 int
		want                 bool
	}{
		{"MPICH, status 1, both lines", "mpich", both, 1, true},
		{"Open MPI", "openmpi", both, 1, false},
		{"status 2", "mpich", both, 2, false},
		{"no finalize line", "mpich", HydraProvisionalStatus + "\n", 1, false},
		{"no Hydra line", "mpich", "gpucomm: rank 2: MPI_Finalize had not returned 5s\n", 1, false},
	} {
		if got := HydraFinalizeStatus(c.family, c.output, c.code); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A launcher dead of SIGPIPE after the bound ended a rank is judged by the
// ranks' output under MPICH only, and only with the bound's line there.
func TestHydraFinalizeBrokenPipe(t *testing.T) {
	piped := exec.Command("sh", "-c", "kill -PIPE $$").Run()
	failed := exec.Command("sh", "-c", "exit 1").Run()
	if piped == nil || failed == nil {
		t.Fatalf("the shells did not fail: %v, %v", piped, failed)
	}
	left := "gpucomm: rank 1: " + FinalizeLeftLine + " 5s after every rank passed the barrier"
	for _, tc := range []struct {
		family, output string
		err            error
		want           bool
	}{
		{"mpich", left, piped, true},
		{"openmpi", left, piped, false},
		{"mpich", "rank 1: done", piped, false},
		{"mpich", left, failed, false},
		{"mpich", left, nil, false},
	} {
		if got := HydraFinalizeBrokenPipe(tc.family, tc.output, tc.err); got != tc.want {
			t.Errorf("HydraFinalizeBrokenPipe(%s, %q, %v) = %v, want %v", tc.family, tc.output, tc.err, got, tc.want)
		}
	}
}
