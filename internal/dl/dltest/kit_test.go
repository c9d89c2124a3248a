package dltest

import (
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// recorder is a testing.TB that keeps what a check reports instead of
// failing the test; Fatalf and Skipf end the check's goroutine, as they do a
// test's.
type recorder struct {
	testing.TB
	failures []string
	skipped  bool
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatalf(format string, a ...any) { r.Errorf(format, a...); runtime.Goexit() }
func (r *recorder) Skipf(string, ...any)           { r.skipped = true; runtime.Goexit() }

// run runs check on a recorder for t in a goroutine of its own.
func run(t *testing.T, check func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r
}

func TestEverySlotOnceReportsARepeatAndAGap(t *testing.T) {
	if r := run(t, func(tb testing.TB) { EverySlotOnce(tb, []int{2, 0, 1}, 3) }); len(r.failures) != 0 {
		t.Errorf("a table with each slot once: %q", r.failures)
	}
	r := run(t, func(tb testing.TB) { EverySlotOnce(tb, []int{0, 1, 1}, 3) })
	want := []string{"slot 1 (entry 2) appears twice", "2 slots named, table has 3"}
	if strings.Join(r.failures, "|") != strings.Join(want, "|") {
		t.Errorf("a table with slot 1 twice and none 2: %q, want %q", r.failures, want)
	}
}

func TestWithStubsStubsWhatIsNeitherDefinedNorOmitted(t *testing.T) {
	src := "int a(int x) { return x; }\nstatic int b(void);\n"
	got := WithStubs(src, regexp.MustCompile(`(?m)^int (\w+)\(`), "int %s(void) { return 0; }\n", []string{"a", "b", "c", "d"}, "d")
	want := src + "int b(void) { return 0; }\nint c(void) { return 0; }\n"
	if got != want {
		t.Errorf("WithStubs = %q, want %q", got, want)
	}
}

func TestLibraryChecksFailOnALoaderThatFindsNothingMissing(t *testing.T) {
	resets := 0
	found := Library{Env: "GPUCOMM_DLTEST_LIB", File: "libdltest.so.1", Defaults: []string{"libgpucomm-absent.so.9"},
		Reset: func() { resets++ }, Load: func() error { return nil }}
	r := run(t, func(tb testing.TB) { found.CheckMissingFile(tb, found.Load) })
	if len(r.failures) != 2 || !strings.Contains(r.failures[1], "Load = <nil>") {
		t.Errorf("CheckMissingFile of a loader that always loads: %q, want the first call's and Load's failures", r.failures)
	}
	if resets != 1 {
		t.Errorf("Use reset the loader %d times before the check, want 1", resets)
	}
	if r := run(t, found.CheckDefaultsAbsent); r.skipped || len(r.failures) != 1 {
		t.Errorf("CheckDefaultsAbsent of a loader that always loads: skipped %v, %q", r.skipped, r.failures)
	}

	absent := found
	absent.Load = func() error {
		return fmt.Errorf("%w: %s%s", errs.ErrLibraryNotFound, "somewhere/else.so", dl.EnvHint(absent.Env))
	}
	r = run(t, func(tb testing.TB) { absent.CheckMissingFile(tb, absent.Load) })
	if len(r.failures) != 1 || !strings.Contains(r.failures[0], "does not name the library libdltest.so.1") {
		t.Errorf("CheckMissingFile of an error that names another file: %q", r.failures)
	}
	// An error that names the file but not the variable that points at it.
	absent.Load = func() error { return fmt.Errorf("%w: libdltest.so.1", errs.ErrLibraryNotFound) }
	r = run(t, func(tb testing.TB) { absent.CheckMissingFile(tb, absent.Load) })
	if len(r.failures) != 1 || !strings.Contains(r.failures[0], "does not say that GPUCOMM_DLTEST_LIB named the file") {
		t.Errorf("CheckMissingFile of an error that does not name the variable: %q", r.failures)
	}
	r = run(t, absent.CheckDefaultsAbsent)
	if len(r.failures) != 1 || !strings.Contains(r.failures[0], "does not say to set GPUCOMM_DLTEST_LIB") {
		t.Errorf("CheckDefaultsAbsent of an error that does not name the variable: %q", r.failures)
	}
	absent.Load = func() error {
		return fmt.Errorf("%w: libdltest.so.1%s", errs.ErrLibraryNotFound, dl.EnvHint(absent.Env))
	}
	for name, check := range map[string]func(testing.TB){
		"CheckMissingFile":    func(tb testing.TB) { absent.CheckMissingFile(tb, absent.Load) },
		"CheckDefaultsAbsent": absent.CheckDefaultsAbsent,
	} {
		if r := run(t, check); r.skipped || len(r.failures) != 0 {
			t.Errorf("%s of a loader that finds nothing: skipped %v, %q", name, r.skipped, r.failures)
		}
	}
}
