package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/conformance"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/launcher"
)

func init() {
	register(&command{name: "check", summary: "run the conformance suite on a backend and report", run: runCheck})
}

const checkDescription = `Check runs gpucomm's conformance suite on one backend and prints a table of
cases with a summary line; the exit status is 1 when any case fails.

With the local backend every rank is a goroutine of this process (-np of
them). With any other backend run it under mpirun, one process a rank:

	mpirun -np 8 gpucomm check -backend mpi

Every process then checks its own rank; rank 0 prints the report and the
others print only failures of their own. GPUCOMM_BACKEND, when set, overrides
-backend, as it does for every gpucomm program.`

// checkFlags are check's flags, parsed.
type checkFlags struct {
	backend string
	np      int
	run     string
	short   bool
	timeout time.Duration
	json    bool
	device  string
	probe   bool
	only    bool
	set     map[string]bool // the flags given on the command line
	// envNote ends each error that the choice of backend causes when
	// GPUCOMM_BACKEND made it (bench.BackendFromEnv); "" otherwise.
	envNote string
	// unusable is why the backend cannot run here, as its Probe says ("":
	// it can): checkSetup finds it, and runCheck reports it as it reports
	// a backend that did not open, after the probe.
	unusable string
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", "check [-backend NAME] [-np N] [-run REGEXP] [-short] [-timeout D] [-device SPEC] [-json]",
		checkDescription, stderr)
	var f checkFlags
	fs.StringVar(&f.backend, "backend", local.Name, "backend `NAME`: "+strings.Join(comm.Backends(), ", ")+" or auto")
	fs.IntVar(&f.np, "np", 4, "number of in-process ranks `N` (local backend only; under MPI mpirun sets the rank count)")
	fs.StringVar(&f.run, "run", "", "run only the cases whose name matches `REGEXP`")
	fs.BoolVar(&f.short, "short", false, "run the quick subset of the suite")
	fs.DurationVar(&f.timeout, "timeout", 0, "bound each case and each operation by `DURATION` (0: 2m a case, 30s each operation of the probe, and GPUCOMM_TIMEOUT bounds operations)")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON on stdout")
	fs.StringVar(&f.device, "device", "", "device `SPEC`: auto, host, cuda or cuda:N (default GPUCOMM_DEVICE, else auto)")
	fs.BoolVar(&f.probe, "probe", true, "probe first: launcher against library, placement, backends, and each operation content-checked and timed (-probe=false: the suite alone)")
	fs.BoolVar(&f.only, "probe-only", false, "probe, give the verdict, and skip the conformance suite")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })

	name, code := checkSetup(fs, &f, stderr)
	if code != exitOK {
		return code
	}
	newGroup, rank := groupMaker(name, f)
	cfg := conformance.Config{Run: f.run, Short: f.short, Timeout: f.timeout}
	var probe *probeReport
	if f.probe || f.only {
		probe = &probeReport{}
		probeJob(probe, name, nil)
		probeBackends(probe)
	}
	if f.unusable != "" {
		return cannotRun(name, f, probe, stdout, stderr)
	}
	var anchor []comm.Communicator
	if name != local.Name {
		// Each case opens and closes its own communicator, and closing the
		// last one finalizes MPI, which cannot start again: hold one open.
		var err error
		anchor, err = newGroup()
		if err != nil {
			// Every case would open the same way, and a failed open may
			// have ended MPI too: report the cause once and stop.
			return openFailed(name, f, probe, err, stdout, stderr)
		}
		defer func() {
			for _, c := range anchor {
				c.Close()
			}
		}()
	}

	if probe != nil {
		group := anchor
		if name == local.Name {
			var err error
			if group, err = newGroup(); err != nil {
				return openFailed(name, f, probe, err, stdout, stderr)
			}
		}
		runProbe(probe, name, group, f.timeout)
		if name == local.Name {
			for _, c := range group {
				c.Close()
			}
		}
	}
	if f.only {
		return finishProbeOnly(probe, f.json, int(rank.Load()), stdout, stderr)
	}

	// Check takes no context, so it runs aside and Ctrl-C abandons it: the
	// process is about to exit anyway.
	start := time.Now()
	done := make(chan conformance.Report, 1)
	go func() { done <- conformance.Check(newGroup, cfg) }()
	var report conformance.Report
	select {
	case report = <-done:
	case <-ctx.Done():
		fmt.Fprintln(stderr, "gpucomm check: interrupted")
		return exitFail
	}
	wall := time.Since(start)

	if report.Backend == "" || report.Backend == "?" {
		// The suite says "?" when no group opened; the backend asked for is known.
		report.Backend = name
	}
	if report.Ranks == 0 && name == local.Name {
		report.Ranks = f.np
	}
	r := int(rank.Load())
	if r < 0 {
		r = rankFromEnv()
	}
	if r > 0 {
		// Rank 0 speaks for the job; other ranks add only their own failures.
		if probe != nil {
			printProbeErrors(stderr, r, *probe)
		}
		printRankFailures(stderr, r, report)
	} else if f.json {
		if err := writeCheckJSONProbe(stdout, report, wall, probe); err != nil {
			fmt.Fprintf(stderr, "gpucomm check: %v\n", err)
			return exitFail
		}
	} else {
		if probe != nil {
			writeProbe(stdout, *probe)
		}
		writeCheckTable(stdout, report, wall)
	}
	if len(report.Results) == 0 {
		if r <= 0 {
			fmt.Fprintf(stderr, "gpucomm check: no case matched -run %q: nothing was checked\n", f.run)
		}
		return exitFail
	}
	if report.Failed() > 0 || probe != nil && probe.failed() {
		return exitFail
	}
	return exitOK
}

// openFailed reports a backend that did not open, so that no case and no
// probed operation ran: the cause on stderr, as every rank says it, and on
// rank 0 the report that was asked for on stdout (noRunReport). A failure
// that the arguments or the environment cause (ErrInvalidArgument: a
// malformed variable that the backend reads at Open, such as
// GPUCOMM_MPI_THREAD_LEVEL) is a usage error, exit 2, as bench and heat
// give for it.
func openFailed(name string, f checkFlags, probe *probeReport, err error, stdout, stderr io.Writer) int {
	if probe != nil {
		printProbeErrors(stderr, -1, *probe)
	}
	fmt.Fprintf(stderr, "gpucomm check: %v\n", err)
	fmt.Fprintf(stderr, "gpucomm check: backend %s did not open: no case ran%s\n", name, f.envNote)
	code := exitFail
	if errors.Is(err, comm.ErrInvalidArgument) {
		code = exitUsage
	}
	if rankFromEnv() > 0 {
		return code
	}
	noRunReport(name, f, probe, fmt.Sprintf("backend %s did not open: %v", name, err), "it did not open", stdout, stderr)
	return code
}

// cannotRun reports a backend that its Probe finds unusable here (not
// built in, no NCCL, GPUCOMM_CUDA_AWARE=0, a binary under the other MPI
// family's launcher), which check therefore never opens: the reason on
// stderr, as every rank says it, and on rank 0 the report that was asked
// for on stdout, as for a backend that did not open (openFailed), where
// stdout had nothing and a script reading -json got no JSON at all.
func cannotRun(name string, f checkFlags, probe *probeReport, stdout, stderr io.Writer) int {
	if probe != nil {
		// The probe's own errors (the launcher against the library), but
		// not again the one that the reason below already says.
		p := probeReport{}
		for _, fd := range probe.Findings {
			if !strings.Contains(f.unusable, fd.Detail) {
				p.Findings = append(p.Findings, fd)
			}
		}
		printProbeErrors(stderr, -1, p)
	}
	fmt.Fprintf(stderr, "gpucomm check: backend %s cannot run here: %s%s\n", name, f.unusable, f.envNote)
	if rankFromEnv() > 0 {
		return exitFail
	}
	noRunReport(name, f, probe, fmt.Sprintf("backend %s cannot run here: %s", name, f.unusable), "it cannot run here", stdout, stderr)
	return exitFail
}

// noRunReport is rank 0's report of a backend with which nothing ran, msg
// saying why and why the verdict's reason: on stdout where it is the
// probe's or a machine's (-probe-only's findings so far with the failure
// among them, or -json's report with ok false and no results), so that a
// reader of stdout is not left with nothing; the suite's table stays
// unprinted, as no case ran.
func noRunReport(name string, f checkFlags, probe *probeReport, msg, why string, stdout, stderr io.Writer) {
	if probe != nil {
		probe.add("backend", levelError, msg, "")
		probe.Verdict = fmt.Sprintf("%s: NOT usable: %s", name, why)
	}
	var werr error
	switch {
	case f.json && f.only:
		werr = writeJSON(stdout, probe)
	case f.json:
		// The job's size as the launcher gives it (no communicator says it).
		ranks := 1
		if job, under := launcher.FromEnv(); under {
			ranks = job.Size
		} else if name == local.Name {
			ranks = f.np
		}
		out := checkJSON{Backend: name, Ranks: ranks, Results: []checkJSONEntry{}, Probe: probe, Error: msg}
		werr = writeJSON(stdout, out)
	case f.only:
		writeProbe(stdout, *probe)
	}
	if werr != nil {
		fmt.Fprintf(stderr, "gpucomm check: %v\n", werr)
	}
}

// checkSetup checks the flags against each other and against the backend,
// and resolves the backend's name ("auto" included).
func checkSetup(fs *flag.FlagSet, f *checkFlags, stderr io.Writer) (name string, code int) {
	f.backend, f.envNote = bench.BackendFromEnv("gpucomm check", f.backend, f.set["backend"], stderr)
	note := f.envNote
	if _, err := regexp.Compile(f.run); err != nil {
		return "", usageError(fs, "-run: %v", err)
	}
	if f.timeout < 0 {
		return "", usageError(fs, "-timeout %v: want a duration of 0 or more", f.timeout)
	}
	if !validDeviceSpec(f.device) {
		return "", usageError(fs, "-device %q: want auto, host, cuda or cuda:N", f.device)
	}
	// -probe-only runs the probe and nothing else: a flag that turns the
	// probe off, or chooses the suite's cases, asks for what it skips.
	if f.only && f.set["probe"] && !f.probe {
		return "", usageError(fs, "-probe=false and -probe-only: pick one (-probe=false runs the suite alone, -probe-only the probe alone)")
	}
	if f.only && (f.set["run"] || f.set["short"]) {
		return "", usageError(fs, "-run and -short choose the conformance suite's cases, which -probe-only skips: drop them or -probe-only")
	}
	if _, err := comm.DefaultOptions(); err != nil {
		fmt.Fprintf(stderr, "gpucomm check: %v\n", err)
		return "", exitUsage
	}
	name, err := resolveBackend(f.backend)
	if err != nil {
		fmt.Fprintf(stderr, "gpucomm check: %v%s\n", err, note)
		if errors.Is(err, comm.ErrInvalidArgument) {
			return "", exitUsage
		}
		return "", exitFail
	}
	if name == local.Name {
		if f.np < 1 || f.np > local.MaxRanks {
			return "", usageError(fs, "-np %d: want 1 to %d ranks", f.np, local.MaxRanks)
		}
		switch strings.ToLower(strings.TrimSpace(f.device)) {
		case "", "auto", "host":
		default:
			return "", usageError(fs, "-device %s: the local backend runs on simulated host devices only%s", f.device, note)
		}
		if err := localReady(f.device); err != nil {
			fmt.Fprintf(stderr, "gpucomm check: %v%s\n", err, note)
			return "", exitFail
		}
	} else if f.set["np"] && f.np != 1 {
		return "", usageError(fs, "-np applies to the local backend only; %s takes one rank a process, so set the rank count with mpirun -np%s", name, note)
	}
	v, err := comm.Probe(name)
	if err != nil {
		fmt.Fprintf(stderr, "gpucomm check: %v\n", err)
		return "", exitFail
	}
	if !v.Usable {
		// Reported after the probe, which says more of why (runCheck).
		f.unusable = v.Reason
		if f.unusable == "" {
			f.unusable = "its probe gives no reason"
		}
	}
	return name, exitOK
}

// resolveBackend turns "auto" (or "") into the best usable backend, as
// comm.Open would pick it, and checks that any other name is registered.
func resolveBackend(name string) (string, error) {
	if name != "" && name != "auto" {
		if _, err := comm.Probe(name); err != nil {
			return "", err
		}
		return name, nil
	}
	return comm.Auto()
}

// groupMaker gives the suite its constructor of fresh communicators and the
// rank this process reports as: -1 until a group opens under MPI, and 0 for
// local, whose one process holds every rank of its group.
func groupMaker(name string, f checkFlags) (conformance.NewGroup, *atomic.Int64) {
	rank := new(atomic.Int64)
	rank.Store(-1)
	var opts []comm.Option
	if f.timeout > 0 {
		opts = append(opts, comm.WithTimeout(f.timeout))
	}
	if name == local.Name {
		rank.Store(0)
		return func() ([]comm.Communicator, error) { return local.NewGroup(f.np, opts...) }, rank
	}
	if f.device != "" {
		opts = append(opts, comm.WithDevice(f.device))
	}
	return func() ([]comm.Communicator, error) {
		c, err := comm.Open(name, opts...)
		if err != nil {
			return nil, err
		}
		rank.CompareAndSwap(-1, int64(c.Rank()))
		return []comm.Communicator{c}, nil
	}, rank
}

// rankFromEnv is this process's rank as the MPI launcher tells it, for when
// no communicator ever opened; 0 (so the process reports) when no launcher
// announced a job.
func rankFromEnv() int {
	if j, ok := launcher.FromEnv(); ok {
		return j.Rank
	}
	return 0
}

// validDeviceSpec accepts what devmem.Open accepts, so a typo is a usage
// error here rather than a failure in every case.
func validDeviceSpec(s string) bool { return devmem.CheckSpec(s) == nil }

// verdict is a result's word in the table and the JSON report.
func verdict(r conformance.Result) string {
	switch {
	case r.Skipped:
		return "SKIP"
	case r.Passed:
		return "PASS"
	}
	return "FAIL"
}

// counts tallies a report's verdicts.
func counts(report conformance.Report) (passed, failed, skipped int) {
	for _, r := range report.Results {
		switch verdict(r) {
		case "PASS":
			passed++
		case "SKIP":
			skipped++
		default:
			failed++
		}
	}
	return passed, failed, skipped
}

// writeCheckTable prints the report as an aligned table, the details of the
// failures under it, and one summary line.
func writeCheckTable(w io.Writer, report conformance.Report, wall time.Duration) {
	fmt.Fprintf(w, "backend %s", report.Backend)
	switch {
	case report.Ranks == 1:
		fmt.Fprint(w, ", 1 rank")
	case report.Ranks > 1:
		fmt.Fprintf(w, ", %d ranks", report.Ranks)
	}
	if report.Device != "" {
		fmt.Fprintf(w, ", device %s", report.Device)
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tTIME")
	for _, r := range report.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, verdict(r), fmtDuration(r.Elapsed))
	}
	tw.Flush()
	passed, failed, skipped := counts(report)
	if failed > 0 {
		fmt.Fprint(w, "\nFailures:\n")
		for _, r := range report.Results {
			if verdict(r) == "FAIL" {
				fmt.Fprintf(w, "  %s\n%s", r.Name, indent(r.Detail, "      "))
			}
		}
	}
	word := "PASS"
	if failed > 0 || len(report.Results) == 0 {
		word = "FAIL"
	}
	fmt.Fprintf(w, "\n%s: %d passed, %d failed, %d skipped of %d cases on %s in %s\n",
		word, passed, failed, skipped, len(report.Results), report.Backend, fmtDuration(wall))
}

// printRankFailures is what a rank other than 0 prints: its failed cases only.
func printRankFailures(w io.Writer, rank int, report conformance.Report) {
	for _, r := range report.Results {
		if verdict(r) == "FAIL" {
			fmt.Fprintf(w, "rank %d: FAIL %s\n%s", rank, r.Name, indent(r.Detail, "    "))
		}
	}
}

// indent puts prefix before every line of s and ends it with a newline
// ("" for an empty s), so multi-line details stay under their case.
func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix) + "\n"
}

// fmtDuration rounds d to a precision a reader can use.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// checkJSON is check's machine-readable report; its field names are an
// interface that scripts depend on, so they change only by addition.
type checkJSON struct {
	Backend string           `json:"backend"`
	Ranks   int              `json:"ranks"`
	Device  string           `json:"device,omitempty"`
	OK      bool             `json:"ok"`
	Passed  int              `json:"passed"`
	Failed  int              `json:"failed"`
	Skipped int              `json:"skipped"`
	Seconds float64          `json:"seconds"`
	Results []checkJSONEntry `json:"results"`
	Probe   *probeReport     `json:"probe,omitempty"`
	Error   string           `json:"error,omitempty"` // why nothing ran: the backend did not open
}

type checkJSONEntry struct {
	Name    string  `json:"name"`
	Result  string  `json:"result"` // PASS, FAIL or SKIP
	Seconds float64 `json:"seconds"`
	Detail  string  `json:"detail,omitempty"`
}

func writeCheckJSON(w io.Writer, report conformance.Report, wall time.Duration) error {
	return writeCheckJSONProbe(w, report, wall, nil)
}

// writeCheckJSONProbe is writeCheckJSON with the probe's report (nil: none);
// a probe that failed makes the report not ok.
func writeCheckJSONProbe(w io.Writer, report conformance.Report, wall time.Duration, probe *probeReport) error {
	passed, failed, skipped := counts(report)
	out := checkJSON{
		Backend: report.Backend, Ranks: report.Ranks, Device: report.Device,
		OK:     failed == 0 && len(report.Results) > 0,
		Passed: passed, Failed: failed, Skipped: skipped,
		Seconds: wall.Seconds(),
		Results: make([]checkJSONEntry, 0, len(report.Results)),
		Probe:   probe,
	}
	if probe != nil && probe.failed() {
		out.OK = false
	}
	for _, r := range report.Results {
		out.Results = append(out.Results, checkJSONEntry{Name: r.Name, Result: verdict(r), Seconds: r.Elapsed.Seconds(), Detail: r.Detail})
	}
	return writeJSON(w, out)
}

// writeJSON writes v to w as the CLI's reports are written: indented JSON
// and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
