// The loaders' kit: what the tests of the run-time loaders (internal/cuda,
// internal/nvrtc, internal/nccl) share: pointing a package's Load at a fake
// library for one test, building that fake with a stub for each symbol the
// test does not write, and the checks every loader must pass (its symbol
// table names each slot once; an absent library is ErrLibraryNotFound).
//
// Fakes are built with BuildLib.

package dltest

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// Library is how one package loads its vendor library, as its tests see it.
type Library struct {
	Env      string       // the variable naming the library's file, e.g. cuda.EnvLib
	File     string       // the name Load tries first, which fakes are built under
	Defaults []string     // the names Load tries when Env is empty
	Reset    func()       // forgets the loaded library, so that the next call loads again
	Load     func() error // the package's Load
}

// Use points Load at path (through Env) for the rest of the test and forgets
// the library before and after.
func (l Library) Use(t testing.TB, path string) {
	t.Helper()
	t.Setenv(l.Env, path)
	l.Reset()
	t.Cleanup(l.Reset)
}

// Build compiles src into a fake of the library (gcc; the test is skipped
// without it) and returns the fake's path.
func (l Library) Build(t testing.TB, src string, cflags ...string) string {
	t.Helper()
	return BuildLib(t, l.File, src, cflags...)
}

// CheckMissingFile checks that, with Env naming a file that does not exist,
// firstUse (a call that loads the library on first use) and then Load fail
// with ErrLibraryNotFound, and that Load's error names the file and says
// that Env named it.
func (l Library) CheckMissingFile(t testing.TB, firstUse func() error) {
	t.Helper()
	l.Use(t, filepath.Join(t.TempDir(), l.File))
	if err := firstUse(); !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Errorf("the first call without a library = %v, want ErrLibraryNotFound", err)
	}
	err := l.Load()
	if !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("Load = %v, want ErrLibraryNotFound", err)
	}
	if !strings.Contains(err.Error(), l.File) {
		t.Errorf("error %q does not name the library %s", err, l.File)
	}
	// The variable is what the user can change: the error must name it.
	if !strings.Contains(err.Error(), "named by "+l.Env) {
		t.Errorf("error %q does not say that %s named the file", err, l.Env)
	}
}

// CheckDefaultsAbsent checks that, with Env empty, Load fails with
// ErrLibraryNotFound and an error that says to set Env; it skips the test
// where one of Defaults is installed.
func (l Library) CheckDefaultsAbsent(t testing.TB) {
	t.Helper()
	if lib, err := dl.Open(l.Defaults...); err == nil {
		lib.Close()
		t.Skipf("a real %s is installed here", l.File)
	}
	l.Use(t, "")
	err := l.Load()
	if !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("Load with the default names %q = %v, want ErrLibraryNotFound", l.Defaults, err)
	}
	// The variable that points gpucomm at the library is the fix: the
	// error must name it.
	if !strings.Contains(err.Error(), "set "+l.Env+" to its path") {
		t.Errorf("error %q does not say to set %s", err, l.Env)
	}
}

// EverySlotOnce checks a loader's symbol table: slots[i] is the C table slot
// its entry i fills; no slot may be filled twice and the table's count slots
// must each be filled.
func EverySlotOnce(t testing.TB, slots []int, count int) {
	t.Helper()
	seen := map[int]bool{}
	for i, s := range slots {
		if seen[s] {
			t.Errorf("slot %d (entry %d) appears twice", s, i)
		}
		seen[s] = true
	}
	if len(seen) != count {
		t.Errorf("%d slots named, table has %d", len(seen), count)
	}
}

// WithStubs is src followed by a stub, stub formatted with the name, for each
// name of need that src does not define and omit does not hold; defined
// matches a definition in src with the name as its first group.
func WithStubs(src string, defined *regexp.Regexp, stub string, need []string, omit ...string) string {
	skip := map[string]bool{}
	for _, m := range defined.FindAllStringSubmatch(src, -1) {
		skip[m[1]] = true
	}
	for _, n := range omit {
		skip[n] = true
	}
	var b strings.Builder
	b.WriteString(src)
	for _, n := range need {
		if !skip[n] {
			fmt.Fprintf(&b, stub, n)
		}
	}
	return b.String()
}
