package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/conformance"
)

// Two stand-ins for the MPI-launched backends, ranked below local so that
// "auto" still means local: one that cannot run here, and one whose process
// holds a single rank, as under mpirun -np 1.
const (
	unusableBackend = "test-unusable"
	singleBackend   = "test-single"
	unusableReason  = "no fabric in this test"
	brokenBackend   = "test-broken"
	brokenReason    = "link down in this test"
)

var (
	singleMu   sync.Mutex
	singleOpts []comm.Options // what each Open of singleBackend was given
)

func init() {
	comm.Register(unusableBackend, driver.Driver{
		Rank:  -1,
		Open:  func(comm.Options) (driver.Conn, error) { return nil, errors.New(unusableReason) },
		Probe: func() comm.Verdict { return comm.Verdict{Reason: unusableReason} },
	})
	comm.Register(brokenBackend, driver.Driver{
		Rank:  -1,
		Open:  func(comm.Options) (driver.Conn, error) { return nil, errors.New(brokenReason) },
		Probe: func() comm.Verdict { return comm.Verdict{Usable: true, Reason: "claims it can run"} },
	})
	comm.Register(singleBackend, driver.Driver{
		Rank: -1,
		Open: func(o comm.Options) (driver.Conn, error) {
			singleMu.Lock()
			singleOpts = append(singleOpts, o)
			singleMu.Unlock()
			cs, err := local.NewGroup(1, comm.WithTimeout(o.Timeout))
			if err != nil {
				return nil, err
			}
			return cs[0], nil
		},
		Probe: func() comm.Verdict { return comm.Verdict{Usable: true, Reason: "one rank in this process"} },
	})
}

func decodeCheckJSON(t *testing.T, out string) checkJSON {
	t.Helper()
	var rep checkJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than the JSON report:\n%s", out)
	}
	return rep
}

func TestCheckLocalPassesAndTabulatesEveryCase(t *testing.T) {
	code, table, errOut := runCLI(t, "check", "-np", "4", "-short")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, table, errOut)
	}
	if len(resultLines(table, "PASS")) == 0 || len(resultLines(table, "FAIL")) != 0 {
		t.Errorf("want PASS rows and no FAIL rows:\n%s", table)
	}
	if !strings.Contains(table, "backend local, 4 ranks") || !strings.Contains(table, "\nPASS: ") {
		t.Errorf("want the header and a PASS summary line:\n%s", table)
	}
	// The same run as JSON names the cases; the table must show each one.
	code, out, errOut := runCLI(t, "check", "-json", "-np", "4", "-short")
	if code != exitOK {
		t.Fatalf("-json: exit %d\nstderr:\n%s", code, errOut)
	}
	rows := strings.Split(table, "\n")
	for _, r := range decodeCheckJSON(t, out).Results {
		found := false
		for _, row := range rows {
			if f := strings.Fields(row); len(f) >= 3 && f[0] == r.Name && f[1] == r.Result {
				found = true
			}
		}
		if !found {
			t.Errorf("table has no row %s %s", r.Name, r.Result)
		}
	}
}

func TestCheckJSONIsAConsistentReport(t *testing.T) {
	code, out, errOut := runCLI(t, "check", "-json", "-np", "2", "-short")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, errOut)
	}
	rep := decodeCheckJSON(t, out)
	if rep.Backend != local.Name || rep.Ranks != 2 || !rep.OK || len(rep.Results) == 0 {
		t.Errorf("report %+v: want backend local, 2 ranks, ok, some results", rep)
	}
	var passed, skipped int
	for _, r := range rep.Results {
		switch r.Result {
		case "PASS":
			passed++
		case "SKIP":
			skipped++
		default:
			t.Errorf("case %s: result %q, want PASS or SKIP", r.Name, r.Result)
		}
		if r.Name == "" || r.Seconds < 0 {
			t.Errorf("case %+v: want a name and a duration", r)
		}
	}
	if rep.Passed != passed || rep.Skipped != skipped || rep.Failed != 0 {
		t.Errorf("counts %d/%d/%d do not match the results %d/0/%d", rep.Passed, rep.Failed, rep.Skipped, passed, skipped)
	}
}

func TestCheckUnknownBackendListsRegisteredOnes(t *testing.T) {
	code, out, errOut := runCLI(t, "check", "-backend", "nosuch")
	if code == exitOK || out != "" {
		t.Fatalf("exit %d, stdout %q; want an error and no report", code, out)
	}
	for _, want := range append([]string{`"nosuch"`}, comm.Backends()...) {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %s:\n%s", want, errOut)
		}
	}
}

// A GPUCOMM_BACKEND that overrides the -backend the command line gave is
// said at once, by each command that reads it (heat said nothing).
func TestCheckGPUCOMMBackendOverridesTheFlag(t *testing.T) {
	t.Setenv("GPUCOMM_BACKEND", "nosuch")
	for _, args := range [][]string{
		{"check", "-backend", "local", "-short"},
		{"bench", "-backend", "local", "-n", "1"},
		{"heat", "-backend", "local", "-n", "8", "-steps", "1"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code == exitOK {
			t.Fatalf("%v: exit 0: GPUCOMM_BACKEND=nosuch was ignored\n%s", args, out.String())
		}
		if want := "gpucomm " + args[0] + ": GPUCOMM_BACKEND=nosuch overrides -backend local\n"; !strings.Contains(errOut.String(), want) {
			t.Errorf("%v: stderr does not say the variable won (%q):\n%s", args, want, errOut.String())
		}
	}
}

func TestCheckUnusableBackendSaysWhy(t *testing.T) {
	code, out, errOut := runCLI(t, "check", "-backend", unusableBackend)
	if code != exitFail || out != "" || !strings.Contains(errOut, unusableReason) {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and the probe's reason", code, out, errOut)
	}
}

// A backend that cannot open stops the run at its first open, with the
// cause once, instead of failing every case with the same cause (or with
// "MPI was finalized", which an MPI backend's failed open leaves behind).
func TestCheckBackendThatCannotOpenStopsWithTheCause(t *testing.T) {
	for _, k := range []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"} {
		t.Setenv(k, "") // this process is rank 0, whoever launched the test
	}
	code, out, errOut := runCLI(t, "check", "-backend", brokenBackend, "-run", "^(Identity|Split)$")
	if code != exitFail {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if out != "" {
		t.Errorf("a report on stdout although no case ran:\n%s", out)
	}
	for _, want := range []string{brokenReason, "backend " + brokenBackend + " did not open: no case ran"} {
		if strings.Count(errOut, want) != 1 {
			t.Errorf("stderr should say %q once:\n%s", want, errOut)
		}
	}
	// Where stdout is the probe's or a machine's, it still gets its report,
	// with the failure in it.
	code, out, errOut = runCLI(t, "check", "-backend", brokenBackend, "-probe-only", "-json")
	var p probeReport
	if err := json.Unmarshal([]byte(out), &p); code != exitFail || err != nil || !p.failed() || p.Verdict != brokenBackend+": NOT usable: it did not open" {
		t.Errorf("-probe-only -json: exit %d, %v, %+v\nstdout:\n%s\nstderr:\n%s", code, err, p, out, errOut)
	}
	code, out, errOut = runCLI(t, "check", "-backend", brokenBackend, "-json")
	var c checkJSON
	if err := json.Unmarshal([]byte(out), &c); code != exitFail || err != nil || c.OK || c.Ranks != 1 || !strings.Contains(c.Error, brokenReason) || len(c.Results) != 0 {
		t.Errorf("-json: exit %d, %v, %+v\nstdout:\n%s\nstderr:\n%s", code, err, c, out, errOut)
	}
	code, out, _ = runCLI(t, "check", "-backend", brokenBackend, "-probe-only")
	if code != exitFail || !strings.Contains(out, "backend "+brokenBackend+" did not open: ") || !strings.Contains(out, "verdict: "+brokenBackend+": NOT usable") {
		t.Errorf("-probe-only: exit %d\nstdout:\n%s", code, out)
	}
}

func TestCheckNpAppliesToLocalOnly(t *testing.T) {
	code, _, errOut := runCLI(t, "check", "-backend", singleBackend, "-np", "4")
	if code != exitUsage || !strings.Contains(errOut, "mpirun") {
		t.Errorf("exit %d, stderr %q; want 2 and a pointer to mpirun -np", code, errOut)
	}
}

func TestCheckOtherBackendOpensWithTheFlags(t *testing.T) {
	singleMu.Lock()
	singleOpts = nil
	singleMu.Unlock()
	code, out, errOut := runCLI(t, "check", "-backend", singleBackend, "-np", "1", "-short", "-device", "host", "-timeout", "7s")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, ", 1 rank") || len(resultLines(out, "PASS")) == 0 {
		t.Errorf("rank 0 should print the table:\n%s", out)
	}
	singleMu.Lock()
	defer singleMu.Unlock()
	if len(singleOpts) == 0 {
		t.Fatal("the suite never opened the backend")
	}
	for _, o := range singleOpts {
		if o.Device != "host" || o.Timeout != 7*time.Second {
			t.Errorf("Open got device %q timeout %v, want host and 7s", o.Device, o.Timeout)
		}
	}
}

func TestCheckAutoPicksTheBestUsableBackend(t *testing.T) {
	want, _ := comm.Auto()
	name, err := resolveBackend("auto")
	if err != nil || name != want {
		t.Errorf("auto resolved to %q, %v; want %q, the best usable here", name, err, want)
	}
	if !mpiBuiltForTest && name != local.Name {
		t.Errorf("without MPI built in, auto must be local, got %q", name)
	}
}

func TestCheckRunMatchingNothingFails(t *testing.T) {
	code, _, errOut := runCLI(t, "check", "-np", "2", "-run", "^NoSuchCase$")
	if code != exitFail || !strings.Contains(errOut, "nothing was checked") {
		t.Errorf("exit %d, stderr %q; a check that checked nothing must not pass", code, errOut)
	}
}

// failingReport has a pass, a skip and a failure with a two-line detail.
var failingReport = conformance.Report{Backend: "mpi", Ranks: 8, Device: "host", Results: []conformance.Result{
	{Name: "AllReduce", Passed: true, Elapsed: 1500 * time.Microsecond},
	{Name: "Broadcast/float16", Skipped: true, Detail: "not on this device"},
	{Name: "Split", Detail: "rank 3: got 1\nwant 2", Elapsed: time.Second},
}}

func TestTableAlignsColumnsAndIndentsFailureDetails(t *testing.T) {
	var b bytes.Buffer
	writeCheckTable(&b, failingReport, 2*time.Second)
	out := b.String()
	col := -1
	for _, row := range append([]string{"CASE"}, failingReport.Results[0].Name, failingReport.Results[1].Name, failingReport.Results[2].Name) {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, row+" ") {
				i := strings.IndexAny(line[len(row):], "PFSR") + len(row)
				if col >= 0 && i != col {
					t.Errorf("RESULT column at %d in %q, %d above", i, line, col)
				}
				col = i
			}
		}
	}
	for _, want := range []string{"Failures:\n  Split\n      rank 3: got 1\n      want 2\n", "\nFAIL: 1 passed, 1 failed, 1 skipped of 3 cases on mpi in 2s\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestOtherRanksPrintOnlyTheirFailures(t *testing.T) {
	var b bytes.Buffer
	printRankFailures(&b, 3, failingReport)
	if got, want := b.String(), "rank 3: FAIL Split\n    rank 3: got 1\n    want 2\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	b.Reset()
	printRankFailures(&b, 3, conformance.Report{Results: failingReport.Results[:2]})
	if b.Len() != 0 {
		t.Errorf("a rank with no failures printed %q", b.String())
	}
}

func TestJSONReportOfAFailureIsNotOK(t *testing.T) {
	var b bytes.Buffer
	if err := writeCheckJSON(&b, failingReport, time.Second); err != nil {
		t.Fatal(err)
	}
	rep := decodeCheckJSON(t, b.String())
	if rep.OK || rep.Passed != 1 || rep.Failed != 1 || rep.Skipped != 1 || rep.Results[2].Detail != "rank 3: got 1\nwant 2" {
		t.Errorf("report %+v does not carry the failure", rep)
	}
}
