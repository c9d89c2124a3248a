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

// OpenEnv's error names the variable that points gpucomm at the library: to
// set it when it is unset, and that it named the file when it is set; the
// sentinel stays for errors.Is.
func TestOpenEnvNamesTheVariable(t *testing.T) {
	const env = "GPUCOMM_DLTEST_LIB"
	t.Setenv(env, "")
	_, err := dl.OpenEnv(env, "libgpucomm-absent.so.9")
	if !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("OpenEnv with %s unset = %v, want ErrLibraryNotFound", env, err)
	}
	if want := "libgpucomm-absent.so.9: cannot open shared object file"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks the loader's reason %q", err, want)
	}
	if want := "(set " + env + " to its path)"; !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error %q does not end with %q", err, want)
	}

	missing := filepath.Join(t.TempDir(), "libabsent.so")
	t.Setenv(env, missing)
	_, err = dl.OpenEnv(env, "libgpucomm-absent.so.9")
	if !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("OpenEnv with %s=%s = %v, want ErrLibraryNotFound", env, missing, err)
	}
	if strings.Contains(err.Error(), "libgpucomm-absent.so.9") {
		t.Errorf("error %q names a default although %s names the only file to try", err, env)
	}
	if want := "dl: cannot open " + missing + " "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not begin with %q", err, want)
	}
	if want := "(named by " + env + ")"; !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error %q does not end with %q", err, want)
	}

	path := dltest.BuildLib(t, "libfake.so", "int gpucomm_answer(void) { return 42; }\n")
	t.Setenv(env, path)
	lib, err := dl.OpenEnv(env, "libgpucomm-absent.so.9")
	if err != nil || lib.Name != path {
		t.Fatalf("OpenEnv with %s=%s = %v, %v", env, path, lib, err)
	}
	lib.Close()
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
