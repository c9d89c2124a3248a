package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// timedRecord writes rank r's record of communicator mpi-n3-c0 on host,
// written at written: AllReduces done, the n-th queued at start+n s and
// ended half a second later, and, when open, one more entered and left
// unfinished.
func timedRecord(t *testing.T, dir, host string, r int, start time.Time, done int, open bool, written time.Time) {
	t.Helper()
	f := driver.TraceFile{ID: "mpi-n3-c0", Backend: "mpi", Rank: r, Size: 3, Host: host, PID: 1000 + r,
		Written: written.UnixNano(), Reason: driver.SignalReasonPrefix + "terminated"}
	n := done
	if open {
		n++
	}
	for i := 1; i <= n; i++ {
		q := start.Add(time.Duration(i) * time.Second)
		e := driver.TraceEntry{Seq: uint64(i), Coll: uint64(i), Op: "AllReduce", DType: "float32", Count: 256, Reduce: "sum",
			Queued: q.UnixNano(), Started: q.UnixNano(), State: driver.StateStarted}
		if i <= done {
			e.Ended, e.State = q.Add(500*time.Millisecond).UnixNano(), driver.StateDone
		}
		f.Entries = append(f.Entries, e)
	}
	f.Operations, f.Collectives = uint64(n), uint64(n)
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, driver.FileName(f.ID, r)), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A communicator's id is the same in every job of its backend and size:
// after a skip drill and then a kill drill into one directory, the killed
// rank's record of the skip job was read as the kill job's, and trace
// diagnosed a rank "a collective behind" instead of "wrote no record". A
// record whose rank finished a collective before another record's rank
// entered it is an earlier job's: trace leaves it out and says so.
func TestTraceLeavesOutAnEarlierJobsRecord(t *testing.T) {
	old := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	now := old.Add(10 * time.Second)
	for _, host := range []string{"nodeA", ""} {
		t.Run("host="+host, func(t *testing.T) {
			dir := t.TempDir()
			// The earlier job: rank 1 finished collectives 1 and 2, then sat in 3.
			timedRecord(t, dir, host, 1, old, 2, true, old.Add(4*time.Second))
			// This job: ranks 0 and 2 finished 1-2 and wait in 3; rank 1 was killed.
			timedRecord(t, dir, host, 0, now, 2, true, now.Add(6*time.Second))
			timedRecord(t, dir, host, 2, now, 2, true, now.Add(6*time.Second))
			code, out, fs := traceOf(t, dir)
			if code != exitFail || len(fs) != 1 {
				t.Fatalf("exit %d, %d findings; want 1 and one\n%s", code, len(fs), out)
			}
			f := fs[0]
			if !strings.HasPrefix(f.Summary, "rank 1 wrote no record: it died, was killed, or could not write") ||
				len(f.Missing) != 1 || f.Missing[0] != 1 || len(f.Ranks) != 2 {
				t.Errorf("finding %+v; want rank 1 missing, its earlier job's record left out\n%s", f, out)
			}
			stale := filepath.Join(dir, "mpi-n3-c0.rank1.json")
			if len(f.Stale) != 1 || !strings.HasPrefix(f.Stale[0], stale+" (rank 1, written 12:00:04.000000), an earlier job's: its rank finished collective 1") ||
				!strings.Contains(out, "  left out: "+stale) {
				t.Errorf("stale %q; want rank 1's file named with why\n%s", f.Stale, out)
			}
		})
	}

	// Records of one job whose clocks differ by less than the skew a host's
	// clock allows, or that never had to meet, are all kept.
	dir := t.TempDir()
	timedRecord(t, dir, "nodeA", 0, now, 2, true, now.Add(6*time.Second))
	timedRecord(t, dir, "nodeB", 1, now.Add(time.Second), 2, true, now.Add(6*time.Second)) // 1 s off: within another host's skew
	timedRecord(t, dir, "nodeA", 2, now.Add(50*time.Millisecond), 2, true, now.Add(6*time.Second))
	_, out, fs := traceOf(t, dir)
	if len(fs) != 1 || len(fs[0].Stale) != 0 || len(fs[0].Missing) != 0 {
		t.Errorf("one job's records: %+v; want every record kept\n%s", fs, out)
	}
}

// clearLaunchers makes this process no rank of a launcher's job.
func clearLaunchers(t *testing.T) {
	t.Helper()
	asRank0(t)
}

// The drill wrote into ./gpucomm-trace, the recorder's default where a real
// job's records may lie, and never emptied it, so an earlier drill's
// records mixed into this one's; with GPUCOMM_TRACE_SIGNAL set it said
// "flight records in ; run: gpucomm trace ". Unless GPUCOMM_TRACE_DIR names
// one, it records into ./gpucomm-drill, its own, which it empties of
// records first, and says where they are.
func TestDrillRecordsIntoAnEmptyDirectoryOfItsOwn(t *testing.T) {
	for _, signal := range []string{"", "USR2"} {
		t.Run("GPUCOMM_TRACE_SIGNAL="+signal, func(t *testing.T) {
			clearLaunchers(t)
			wd := t.TempDir()
			t.Chdir(wd)
			unsetenv(t, "GPUCOMM_TRACE_DIR")
			t.Setenv("GPUCOMM_TRACE_SIGNAL", signal)
			t.Setenv("GPUCOMM_BACKEND", "")
			t.Setenv("GPUCOMM_DEVICE", "")
			// An earlier drill's record, another file, and a real job's record
			// in the recorder's default directory: only the first goes.
			for _, p := range []string{"gpucomm-drill/local-n9-c0.rank7.json", "gpucomm-drill/notes.txt", "gpucomm-trace/mpi-n2-c0.rank0.json"} {
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errOut := runCLI(t, "drill", "-np", "3", "-rank", "2", "-at", "2", "-ops", "2", "-count", "16", "-timeout", "300ms")
			if code != exitFail || !strings.Contains(out, "flight records in gpucomm-drill; run: gpucomm trace gpucomm-drill\n") {
				t.Fatalf("drill: exit %d; want 1 and where the records are\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			for p, want := range map[string]bool{"gpucomm-drill/local-n9-c0.rank7.json": false, "gpucomm-drill/notes.txt": true,
				"gpucomm-trace/mpi-n2-c0.rank0.json": true} {
				if _, err := os.Stat(p); (err == nil) != want {
					t.Errorf("%s: exists %v, want %v", p, err == nil, want)
				}
			}
			// Rank 2's record of this drill: its communicator's number
			// (c0, c1, ...) counts the communicators this process made
			// before, the first subtest's among them.
			if got, _ := filepath.Glob("gpucomm-drill/local-n3-c*.rank2.json"); len(got) == 0 {
				t.Errorf("no record of rank 2 in gpucomm-drill")
			}
			if os.Getenv("GPUCOMM_TRACE_DIR") != "gpucomm-drill" {
				t.Errorf("GPUCOMM_TRACE_DIR=%q after the drill", os.Getenv("GPUCOMM_TRACE_DIR"))
			}
			// (A second drill in this test process also finds the first
			// drill's communicators, which it writes too.)
			code, out, fs := traceOf(t, "gpucomm-drill")
			if code != exitFail || len(fs) == 0 {
				t.Errorf("trace: exit %d, %+v\n%s", code, fs, out)
			}
			for _, f := range fs {
				if !strings.Contains(f.Summary, "rank 2 never entered it") || len(f.Stale) > 0 {
					t.Errorf("trace: %+v; want rank 2 named, no record left out\n%s", f, out)
				}
			}
		})
	}
}

// The drills under a real launcher, run as a user would run them: with
// no GPUCOMM_TRACE_SIGNAL, a kill drill wrote nothing (mpirun TERMs the
// other ranks, which had no signal to write on, before they time out) and
// gave no hint; and a kill drill after a skip drill into one directory was
// diagnosed from the skip drill's record of the killed rank.
func TestKillDrillUnderLauncherAsAUserRunsIt(t *testing.T) {
	bin := launcherCommand(t)
	if mpi.Family() == "mpich" {
		// TestDrillUnderLauncherIsDiagnosedByTrace says why: Hydra's proxy
		// ends every rank of the node with the killed one.
		t.Skip("MPICH: a killed rank takes every rank of its node with it, and none writes a record")
	}
	path, args, err := mpitest.Launcher(3)
	if err != nil {
		t.Skip(err)
	}
	drill := func(wd string, env []string, mode string) string {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, append(args, bin, "drill", "-backend", "mpi", "-mode", mode, "-rank", "1", "-at", "3", "-count", "64", "-timeout", "3s")...)
		cmd.Dir = wd
		// A launcher option, not the drill's: mpirun's KILL a second after
		// its TERM is too soon for a loaded 2-core machine.
		cmd.Env = append(append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND=",
			"OMPI_MCA_odls_base_sigkill_timeout=10"), env...)
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil || err == nil {
			t.Fatalf("drill -mode %s: %v; want the job to fail, in time\n%s", mode, err, out)
		}
		return string(out)
	}
	trace := func(dir string) string {
		out, err := exec.Command(bin, "trace", dir).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitFail {
			t.Errorf("trace %s: %v, want exit 1\n%s", dir, err, out)
		}
		return string(out)
	}

	t.Run("NoTraceVariables", func(t *testing.T) {
		wd := t.TempDir()
		env := []string{"GPUCOMM_TRACE_DIR=", "GPUCOMM_TRACE_SIGNAL="}
		out := drill(wd, env, "kill")
		if !strings.Contains(out, "when the job has ended, run: gpucomm trace gpucomm-drill") {
			t.Errorf("the drill did not say where to look:\n%s", out)
		}
		if got := trace(filepath.Join(wd, "gpucomm-drill")); !strings.Contains(got, "rank 1 wrote no record") {
			t.Errorf("trace: want rank 1 named as writing no record:\n%s\njob output:\n%s", got, out)
		}
	})

	t.Run("AfterAnotherDrillInTheSameDirectory", func(t *testing.T) {
		wd := t.TempDir()
		dir := filepath.Join(wd, "trace")
		env := []string{"GPUCOMM_TRACE_DIR=" + dir, "GPUCOMM_TRACE_SIGNAL=TERM"}
		drill(wd, env, "skip")
		if _, err := os.Stat(filepath.Join(dir, "mpi-n3-c0.rank1.json")); err != nil {
			t.Fatalf("the skip drill left no record of rank 1: %v", err)
		}
		out := drill(wd, env, "kill")
		got := trace(dir)
		if !strings.Contains(got, "rank 1 wrote no record") || !strings.Contains(got, "left out: "+filepath.Join(dir, "mpi-n3-c0.rank1.json")) {
			t.Errorf("trace: want rank 1 named as writing no record, and the skip drill's record of it left out:\n%s\njob output:\n%s", got, out)
		}
	})
}
