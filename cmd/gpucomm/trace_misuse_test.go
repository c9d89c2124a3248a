package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// traceWithin runs gpucomm trace and fails the test, rather than hang it,
// when trace does not return within d.
func traceWithin(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("GPUCOMM_BACKEND", "")
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run(append([]string{"trace"}, args...), &out, &errOut)
		done <- result{code, out.String(), errOut.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.out, r.err
	case <-time.After(d):
		t.Fatalf("gpucomm trace %v still running after %v", args, d)
		return 0, "", ""
	}
}

// rawRecord writes a record with no entries, as the reproducer does.
func rawRecord(t *testing.T, dir, id string, rank int, size, collectives string) {
	t.Helper()
	s := fmt.Sprintf(`{"id":%q,"backend":"local","rank":%d,"size":%s,"collectives":%s,"entries":[]}`, id, rank, size, collectives)
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.rank%d.json", id, rank)), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A record's collective count is a number the ranks' entries need not
// reach: trace walks the collectives the records hold, not every number
// up to the count, so a huge or corrupt count neither loops nor wraps.
func TestTraceOfAHugeCollectiveCountEnds(t *testing.T) {
	for _, n := range []string{"18446744073709551615", "20000000000"} {
		dir := t.TempDir()
		rawRecord(t, dir, "x", 0, "2", n)
		rawRecord(t, dir, "x", 1, "2", "1")
		code, out, errOut := traceWithin(t, 10*time.Second, dir)
		if code == exitUsage || out+errOut == "" {
			t.Errorf("collectives %s: exit %d, stdout %q, stderr %q", n, code, out, errOut)
		}
		if n == "18446744073709551615" && !(strings.Contains(errOut, "x.rank0.json") && strings.Contains(errOut, `"collectives"`)) {
			t.Errorf("collectives %s: stderr %q does not name the file and the field", n, errOut)
		}
	}
}

// A record claiming more ranks than any job holds is refused, naming the
// file and the field, before trace lists the ranks that wrote none.
func TestTraceRefusesAnImplausibleSize(t *testing.T) {
	dir := t.TempDir()
	rawRecord(t, dir, "big", 0, "300000000", "1")
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	code, _, errOut := traceWithin(t, 10*time.Second, dir)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if code != exitFail || !strings.Contains(errOut, "big.rank0.json") || !strings.Contains(errOut, `"size"`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("trace allocated %d MB for one record", grew>>20)
	}
}

// At the largest size trace takes, the ranks without a record are told as
// ranges, not a line each.
func TestTraceTellsMissingRanksAsRanges(t *testing.T) {
	dir := t.TempDir()
	size := fmt.Sprint(maxTraceRanks)
	rawRecord(t, dir, "big", 0, size, "0")
	rawRecord(t, dir, "big", 5, size, "0")
	code, out, errOut := traceWithin(t, 30*time.Second, dir)
	want := fmt.Sprintf("ranks 1-4, 6-%d", maxTraceRanks-1)
	if code != exitFail || !strings.Contains(out, want) || len(out) > 4096 {
		t.Errorf("exit %d, stderr %q, stdout (%d bytes) %.2000q", code, errOut, len(out), out)
	}
}

// A directory whose name holds glob meta characters is read as named.
func TestTraceReadsADirectoryWithGlobCharacters(t *testing.T) {
	for _, name := range []string{"br[1]", "a*b", "q?", `back\slash`} {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		rawRecord(t, dir, "x", 0, "2", "0")
		rawRecord(t, dir, "x", 1, "2", "0")
		code, out, errOut := traceWithin(t, 10*time.Second, dir)
		if code != exitOK || !strings.Contains(out, "agree on all 0 collectives") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
	}
}

// A glob in the directory's name picks no other directory's records.
func TestTraceReadsOnlyTheNamedDirectory(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"r*", "run1"} {
		if err := os.Mkdir(filepath.Join(root, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rawRecord(t, filepath.Join(root, "run1"), "x", 0, "2", "0")
	code, _, errOut := traceWithin(t, 10*time.Second, filepath.Join(root, "r*"))
	if code != exitFail || !strings.Contains(errOut, "holds no flight record") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
