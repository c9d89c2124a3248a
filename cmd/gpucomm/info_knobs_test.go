package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/mpi"
)

// info lists every GPUCOMM_ variable the scripts read (${GPUCOMM_X...} or
// $GPUCOMM_X: nodes.sh's and ci.sh's settings among them), as
// TestInfoListsEveryVariableTheCodeReads holds it to the Go code's. A
// variable a script only sets (export GPUCOMM_X=...) is not a setting of
// the user's, and the test harness's own GPUCOMM_*_TEST_* are left out.
func TestInfoListsEveryVariableTheScriptsRead(t *testing.T) {
	root := filepath.Join("..", "..")
	read := regexp.MustCompile(`\$\{?(GPUCOMM_[A-Z0-9_]+)`)
	found := map[string]string{}
	scan := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range read.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(m[1], "_TEST_") {
				found[m[1]] = path
			}
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "scripts"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.HasSuffix(path, ".go") {
			scan(path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"test.sh", filepath.Join(".ci", "run")} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			scan(filepath.Join(root, f))
		}
	}
	// Those the scripts are known to read: the walk found the scripts.
	for _, name := range []string{"GPUCOMM_MULTINODE_LAUNCHER_ARGS", "GPUCOMM_MPI_FINALIZE_BOUND", "GPUCOMM_MULTINODE_DIR"} {
		if found[name] == "" {
			t.Fatalf("no script read %s: is the walk rooted right? found %v", name, found)
		}
	}
	listed := map[string]bool{}
	for _, k := range knobs {
		listed[k] = true
	}
	for name, path := range found {
		if !listed[name] {
			t.Errorf("%s (read in %s) is not among info's knobs", name, path)
		}
	}
}

// info reads GPUCOMM_MPI_FINALIZE_BOUND as internal/mpi does when MPI
// starts (its TestFinalizeBoundFrom and TestFinalizeBoundInFamily have the
// same values): a malformed one is a problem naming the variable, and exit
// 1; under Open MPI a bound is ignored, and info says so.
func TestInfoJudgesTheFinalizeBoundAsMPIDoes(t *testing.T) {
	for _, fam := range []string{"mpich", "openmpi"} {
		for _, v := range []string{"", "0", "off", "0s"} {
			if effect, problem := finalizeBoundEffectIn(fam, v); problem != "" || !strings.Contains(effect, "unbounded") {
				t.Errorf("%s, %q: %q, %q; want no bound and no problem", fam, v, effect, problem)
			}
		}
		for v, want := range map[string]string{"10s": "10s", "1.5s": "1.5s", "5m": "5m0s"} {
			effect, problem := finalizeBoundEffectIn(fam, v)
			says := "returned " + want + " after"
			if fam == "openmpi" {
				says = "ignored: this binary's MPI is Open MPI"
			}
			if problem != "" || !strings.Contains(effect, says) || !strings.Contains(effect, want) {
				t.Errorf("%s, %q: %q, %q; want %q and the bound %s", fam, v, effect, problem, says, want)
			}
		}
		for _, v := range []string{"10", "-1s", "soon", "1h-"} {
			if effect, problem := finalizeBoundEffectIn(fam, v); effect != "invalid" || !strings.Contains(problem, "GPUCOMM_MPI_FINALIZE_BOUND") {
				t.Errorf("%s, %q: %q, %q; want invalid, naming the variable", fam, v, effect, problem)
			}
		}
	}

	withSections(t)
	t.Setenv("GPUCOMM_MPI_FINALIZE_BOUND", "5s")
	code, out, errOut := runCLI(t, "info")
	line := `(?m)^  GPUCOMM_MPI_FINALIZE_BOUND\s+5s\s+MPICH: .* 5s after the barrier`
	if mpi.Family() == "openmpi" {
		line = `(?m)^  GPUCOMM_MPI_FINALIZE_BOUND\s+5s\s+ignored: this binary's MPI is Open MPI.*5s is for MPICH`
	}
	if code != exitOK || !regexp.MustCompile(line).MatchString(out) {
		t.Errorf("GPUCOMM_MPI_FINALIZE_BOUND=5s: exit %d, stderr %q; want 0 and the bound in its line:\n%s", code, errOut, out)
	}
	t.Setenv("GPUCOMM_MPI_FINALIZE_BOUND", "soon")
	code, out, errOut = runCLI(t, "info")
	if code != exitFail || !strings.Contains(errOut, `GPUCOMM_MPI_FINALIZE_BOUND="soon"`) ||
		!regexp.MustCompile(`(?m)^  GPUCOMM_MPI_FINALIZE_BOUND\s+soon\s+invalid`).MatchString(out) {
		t.Errorf("GPUCOMM_MPI_FINALIZE_BOUND=soon: exit %d, stderr %q; want 1 naming it, and its line invalid:\n%s", code, errOut, out)
	}
}
