// Package dltest builds small shared libraries from C source at test time, so
// that the loaders in internal/cuda, internal/nvrtc and internal/nccl can be
// tested against fakes on machines without a GPU.
//
// It is for tests only and must not be imported by non-test code.
package dltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildLib compiles src into t.TempDir()/name with gcc and returns its path.
// The test is skipped when gcc is not installed and fails when it errors.
func BuildLib(t testing.TB, name, src string, cflags ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot build a fake shared library")
	}
	dir := t.TempDir()
	cfile := filepath.Join(dir, name+".c")
	if err := os.WriteFile(cfile, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", out, cfile}, cflags...)
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}
