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

// A launcher's failure is put down to the finalize bound under MPICH only,
// with the bound's line in the output, and only for Hydra's status 1 (with
// its own line there too) or a death by SIGPIPE.
func TestHydraFinalizeBounded(t *testing.T) {
	piped := exec.Command("sh", "-c", "kill -PIPE $$").Run()
	failed := exec.Command("sh", "-c", "exit 1").Run()
	failed2 := exec.Command("sh", "-c", "exit 2").Run()
	if piped == nil || failed == nil || failed2 == nil {
		t.Fatalf("the shells did not fail: %v, %v, %v", piped, failed, failed2)
	}
	left := "gpucomm: rank 2: " + FinalizeLeftLine + " 5s after every rank passed the barrier\n"
	both := left + HydraProvisionalStatus + "\n"
	for _, c := range []struct {
		name, family, output string
		err                  error
		want                 bool
	}{
		{"MPICH, status 1, both lines", "mpich", both, failed, true},
		{"Open MPI, status 1", "openmpi", both, failed, false},
		{"status 2", "mpich", both, failed2, false},
		{"status 1, no finalize line", "mpich", HydraProvisionalStatus + "\n", failed, false},
		{"status 1, no Hydra line", "mpich", left, failed, false},
		{"MPICH, SIGPIPE, the bound's line", "mpich", left, piped, true},
		{"Open MPI, SIGPIPE", "openmpi", left, piped, false},
		{"SIGPIPE, no finalize line", "mpich", "rank 1: done", piped, false},
		{"no error", "mpich", both, nil, false},
		{"not an exit error", "mpich", both, errors.New("exec: not started"), false},
	} {
		if got := HydraFinalizeBounded(c.family, c.output, c.err); got != c.want {
			t.Errorf("%s: HydraFinalizeBounded(%s, %q, %v) = %v, want %v", c.name, c.family, c.output, c.err, got, c.want)
		}
	}
}
