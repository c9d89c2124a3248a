package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm/driver"
)

// writeRecord writes a synthetic record of rank r: collectives given as
// signatures' parts (op, count), each done unless states says otherwise.
func writeRecord(t *testing.T, dir string, rank, size int, reason string, ops []driver.TraceEntry) {
	t.Helper()
	f := driver.TraceFile{ID: "mpi-n4-c0", Backend: "mpi", Rank: rank, Size: size, Reason: reason}
	var coll uint64
	for i, e := range ops {
		e.Seq = uint64(i + 1)
		if e.Op != "Send" && e.Op != "Recv" {
			coll++
			e.Coll = coll
		}
		if e.State == "" {
			e.State = driver.StateDone
		}
		f.Entries = append(f.Entries, e)
	}
	f.Operations, f.Collectives = uint64(len(ops)), coll
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, driver.FileName(f.ID, rank)), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func ar(count int, state string) driver.TraceEntry {
	return driver.TraceEntry{Op: "AllReduce", DType: "float32", Count: count, Reduce: "sum", State: state}
}

func traceOf(t *testing.T, dir string) (int, string, []traceFinding) {
	t.Helper()
	code, out, errOut := runCLI(t, "trace", dir)
	if errOut != "" {
		t.Errorf("stderr: %s", errOut)
	}
	_, js, _ := runCLI(t, "trace", "-json", dir)
	var fs []traceFinding
	if err := json.Unmarshal([]byte(js), &fs); err != nil {
		t.Fatalf("-json: %v\n%s", err, js)
	}
	return code, out, fs
}

func TestTraceNamesTheRankThatNeverEnteredACollective(t *testing.T) {
	dir := t.TempDir()
	for r := range 4 {
		ops := []driver.TraceEntry{ar(8, ""), {Op: "Send", DType: "uint8", Count: 3}, ar(16, "")}
		if r == 2 {
			writeRecord(t, dir, r, 4, "drill", ops)
			continue
		}
		writeRecord(t, dir, r, 4, "timeout", append(ops, ar(32, driver.StateFailed)))
	}
	code, out, fs := traceOf(t, dir)
	if code != exitFail || len(fs) != 1 || fs[0].OK || fs[0].Coll != 3 {
		t.Fatalf("exit %d, findings %+v; want 1 and collective 3\n%s", code, fs, out)
	}
	want := "first divergence: collective 3 (AllReduce(count=32 dtype=float32 op=sum)): rank 2 never entered it"
	if fs[0].Summary != want || !strings.Contains(out, want) || !strings.Contains(out, "rank 2: its last collective was collective 2, AllReduce(count=16") {
		t.Errorf("summary %q, want %q\n%s", fs[0].Summary, want, out)
	}
}

func TestTraceNamesTheRanksThatEnteredWithAnotherCall(t *testing.T) {
	dir := t.TempDir()
	for r := range 4 {
		last := ar(64, driver.StateStarted)
		switch r {
		case 1:
			last = driver.TraceEntry{Op: "Barrier", State: driver.StateStarted}
		case 3:
			last = ar(65, driver.StateStarted)
		}
		writeRecord(t, dir, r, 4, "signal", []driver.TraceEntry{ar(8, ""), last})
	}
	code, out, fs := traceOf(t, dir)
	if code != exitFail || len(fs) != 1 || fs[0].Coll != 2 {
		t.Fatalf("exit %d, findings %+v\n%s", code, fs, out)
	}
	for _, w := range []string{"collective 2: the ranks entered it with different calls", "ranks 0, 2 entered it as AllReduce(count=64",
		"rank 1 entered it as Barrier()", "rank 3 entered it as AllReduce(count=65"} {
		if !strings.Contains(fs[0].Summary, w) {
			t.Errorf("summary %q lacks %q", fs[0].Summary, w)
		}
	}
}

func TestTraceNamesARankWithoutARecord(t *testing.T) {
	dir := t.TempDir()
	for _, r := range []int{0, 1, 3} {
		writeRecord(t, dir, r, 4, "signal terminated", []driver.TraceEntry{ar(8, ""), ar(8, driver.StateStarted)})
	}
	code, out, fs := traceOf(t, dir)
	if code != exitFail || len(fs) != 1 || len(fs[0].Missing) != 1 || fs[0].Missing[0] != 2 ||
		!strings.HasPrefix(fs[0].Summary, "rank 2 wrote no record") || !strings.Contains(out, "none from rank 2") {
		t.Fatalf("exit %d, findings %+v\n%s", code, fs, out)
	}
}

func TestTraceOfAgreeingFinishedRanksPasses(t *testing.T) {
	dir := t.TempDir()
	for r := range 2 {
		writeRecord(t, dir, r, 2, "asked", []driver.TraceEntry{ar(8, ""), {Op: "Recv", DType: "uint8", Count: 1}, ar(9, "")})
	}
	code, out, fs := traceOf(t, dir)
	if code != exitOK || len(fs) != 1 || !fs[0].OK || !strings.Contains(out, "agree on all 2 collectives") {
		t.Fatalf("exit %d, findings %+v\n%s", code, fs, out)
	}
}

func TestTraceOfNothingSaysWhatToSet(t *testing.T) {
	code, _, errOut := runCLI(t, "trace", t.TempDir())
	if code != exitFail || !strings.Contains(errOut, "GPUCOMM_TRACE_DIR") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := runCLI(t, "trace"); code != exitUsage {
		t.Errorf("trace without a directory: exit %d, want 2", code)
	}
}

// The drills on the local backend: a rank that skips a collective, and one
// that calls Barrier in its place, are named by trace from the records the
// ranks wrote on their timeouts.
func TestDrillOnLocalIsDiagnosedByTrace(t *testing.T) {
	for mode, want := range map[string]string{
		"skip":  "first divergence: collective 3 (AllReduce(count=256 dtype=float32 op=sum)): rank 2 never entered it",
		"wrong": "first divergence: collective 3: the ranks entered it with different calls: ranks 0, 1, 3 entered it as AllReduce(count=256 dtype=float32 op=sum); rank 2 entered it as Barrier()",
	} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("GPUCOMM_TRACE_DIR", dir)
			t.Setenv("GPUCOMM_BACKEND", "")
			code, _, errOut := runCLI(t, "drill", "-mode", mode, "-rank", "2", "-at", "3", "-count", "256", "-timeout", "300ms")
			if code != exitFail || !strings.Contains(errOut, "rank 0:") {
				t.Fatalf("drill: exit %d, want 1 with the ranks' errors\n%s", code, errOut)
			}
			code, out, fs := traceOf(t, dir)
			if code != exitFail || len(fs) != 1 || !strings.HasPrefix(fs[0].Summary, want) {
				t.Fatalf("trace: exit %d; want a finding starting %q\n%s", code, want, out)
			}
		})
	}
}

// A -rank outside the job is known only once the job is open: it is a
// usage error all the same, with the usage hint every other one gives.
func TestDrillOfARankOutsideTheJobIsAUsageError(t *testing.T) {
	t.Setenv("GPUCOMM_TRACE_DIR", t.TempDir())
	t.Setenv("GPUCOMM_BACKEND", "")
	code, out, errOut := runCLI(t, "drill", "-np", "3", "-rank", "5")
	if code != exitUsage || !strings.Contains(errOut, "-rank 5 is not a rank of a 3-rank job") ||
		!strings.Contains(errOut, "Run 'gpucomm drill -h' for usage.") || out != "" {
		t.Fatalf("drill -np 3 -rank 5: exit %d, stdout %q, stderr %q; want 2, the reason and the usage hint", code, out, errOut)
	}
}

// Records written on the trace signal are each rank's snapshot at its own
// moment: a rank one collective behind the others may only not have got
// there yet, and trace says so rather than that it never entered it
// (a USR1 to a healthy heat run read "rank 0 never entered collective
// 2449" beside rank 1's done one). Behind by a collective it has not
// finished, or with a record written on a timeout, it is the divergence.
func TestTraceOfASignalSnapshotDoesNotCallALaggingRankStuck(t *testing.T) {
	const usr1 = driver.SignalReasonPrefix + "user defined signal 1"
	for _, tc := range []struct {
		name, reason2, last2 string
		want                 string
	}{
		{"snapshot", usr1, driver.StateDone, "collective 3 (AllReduce(count=32 dtype=float32 op=sum)): rank 2 had not entered it when its record was written; " +
			"the records were written on a signal, each rank at its own moment, so a job still running shows this too: write them again (a second signal) and see whether rank 2 moved on"},
		{"timeout", "timeout", driver.StateDone, "first divergence: collective 3 (AllReduce(count=32 dtype=float32 op=sum)): rank 2 never entered it"},
		{"unfinished", usr1, driver.StateStarted, "first divergence: collective 3 (AllReduce(count=32 dtype=float32 op=sum)): rank 2 never entered it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for r := range 4 {
				if r == 2 {
					writeRecord(t, dir, r, 4, tc.reason2, []driver.TraceEntry{ar(8, ""), ar(16, tc.last2)})
					continue
				}
				writeRecord(t, dir, r, 4, usr1, []driver.TraceEntry{ar(8, ""), ar(16, ""), ar(32, "")})
			}
			code, out, fs := traceOf(t, dir)
			if code != exitFail || len(fs) != 1 || fs[0].OK || fs[0].Coll != 3 || fs[0].Summary != tc.want {
				t.Fatalf("exit %d, findings %+v; want 1, collective 3, %q\n%s", code, fs, tc.want, out)
			}
		})
	}
}
