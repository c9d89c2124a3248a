//go:build cgo

package dl_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestOpenMissingLibraryWrapsErrLibraryNotFound(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libabsent.so")
	_, err := dl.Open(missing, "libgpucomm-absent.so.9")
	if !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("Open = %v, want ErrLibraryNotFound", err)
	}
	// Both names and dlerror's reason are in the message.
	for _, want := range []string{missing, "libgpucomm-absent.so.9", "No such file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestOpenWithNoNamesFails(t *testing.T) {
	if _, err := dl.Open(); !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("Open() = %v, want ErrLibraryNotFound", err)
	}
}

func TestSymFindsExportedAndNamesMissing(t *testing.T) {
	path := dltest.BuildLib(t, "libfake.so", "int gpucomm_answer(void) { return 42; }\n")
	lib, err := dl.Open(filepath.Join(t.TempDir(), "nothere.so"), path)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	if lib.Name != path {
		t.Errorf("Name = %q, want the second candidate %q", lib.Name, path)
	}
	if p, err := lib.Sym("gpucomm_answer"); err != nil || p == nil {
		t.Fatalf("Sym(gpucomm_answer) = %v, %v", p, err)
	}
	_, err = lib.Sym("gpucomm_question")
	if !errors.Is(err, errs.ErrLibraryNotFound) || !strings.Contains(err.Error(), "gpucomm_question") {
		t.Fatalf("Sym(missing) = %v, want ErrLibraryNotFound naming the symbol", err)
	}
	_, name, err := lib.SymAny("gpucomm_answer_v2", "gpucomm_answer")
	if err != nil || name != "gpucomm_answer" {
		t.Fatalf("SymAny = %q, %v; want the unversioned fallback", name, err)
	}
	_, _, err = lib.SymAny("a_v2", "a")
	if err == nil || !strings.Contains(err.Error(), "a_v2, a") {
		t.Fatalf("SymAny(missing) = %v, want both names in the error", err)
	}
	if err := lib.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := lib.Sym("gpucomm_answer"); !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("Sym after Close = %v, want an error", err)
	}
}

func TestCandidatesOverrideReplacesDefaults(t *testing.T) {
	t.Setenv("GPUCOMM_DLTEST_LIB", "")
	if got := dl.Candidates("GPUCOMM_DLTEST_LIB", "a.so.1", "a.so"); strings.Join(got, ",") != "a.so.1,a.so" {
		t.Errorf("unset: %v", got)
	}
	t.Setenv("GPUCOMM_DLTEST_LIB", "/opt/x/a.so")
	if got := dl.Candidates("GPUCOMM_DLTEST_LIB", "a.so.1", "a.so"); strings.Join(got, ",") != "/opt/x/a.so" {
		t.Errorf("set: %v", got)
	}
}
