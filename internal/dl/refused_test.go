//go:build cgo

package dl_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// A file that is there but that the loader refuses (not ELF, or needing a
// library that is not found) is not "library not found": the error says it
// exists but could not be loaded, with dlerror's reason, and still wraps
// errs.ErrLibraryNotFound for errors.Is. A variable that named it is said.
func TestAFileThatExistsButDoesNotLoadIsNotNotFound(t *testing.T) {
	const env = "GPUCOMM_DLTEST_LIB"
	notELF := filepath.Join(t.TempDir(), "libnotelf.so")
	if err := os.WriteFile(notELF, []byte(strings.Repeat("root:x:0:0:root:/root:/bin/sh\n", 8)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(env, notELF)
	_, err := dl.OpenEnv(env, "libgpucomm-absent.so.9")
	if !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("OpenEnv with %s=%s = %v, want an error wrapping ErrLibraryNotFound", env, notELF, err)
	}
	s := err.Error()
	if want := "dl: cannot open " + notELF + " (" + notELF + ": invalid ELF header): " + notELF + " exists but could not be loaded (named by " + env + ")"; s != want {
		t.Errorf("OpenEnv with %s=%s:\n%q\nwant\n%q", env, notELF, s, want)
	}
	if strings.Contains(s, "not found") {
		t.Errorf("a file that is there is said not found: %q", s)
	}

	// Found, but a library it needs is not: dlerror names only that one.
	dep := dltest.BuildLib(t, "libgpucommdep.so", "int gpucomm_dep(void) { return 1; }\n")
	needsDep := dltest.BuildLib(t, "libneedsdep.so", "int gpucomm_dep(void);\nint gpucomm_f(void) { return gpucomm_dep(); }\n",
		"-L"+filepath.Dir(dep), "-lgpucommdep")
	if err := os.Remove(dep); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "libabsent.so")
	_, err = dl.Open(missing, needsDep)
	if !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("Open(%s, %s) = %v, want an error wrapping ErrLibraryNotFound", missing, needsDep, err)
	}
	s = err.Error()
	for _, want := range []string{"dl: cannot open " + missing + ", " + needsDep + " (", missing + ": cannot open shared object file: No such file or directory; ",
		"libgpucommdep.so", "): " + needsDep + " exists but could not be loaded"} {
		if !strings.Contains(s, want) {
			t.Errorf("Open(%s, %s) = %q; lacks %q", missing, needsDep, s, want)
		}
	}
	if strings.Contains(s, "library not found") {
		t.Errorf("a file that is there is said not found: %q", s)
	}

	// Nothing there, by path or by name: still not found.
	for _, names := range [][]string{{missing}, {"libgpucomm-absent.so.9"}, {missing, "libgpucomm-absent.so.9"}} {
		_, err := dl.Open(names...)
		if !errors.Is(err, errs.ErrLibraryNotFound) || !strings.HasSuffix(err.Error(), "): library not found") || strings.Contains(err.Error(), "exists") {
			t.Errorf("Open(%v) = %v; want it to end \"library not found\"", names, err)
		}
	}
}
