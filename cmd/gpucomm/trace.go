package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpucomm/gpucomm/comm/driver"
)

func init() {
	// The recorder's variables, listed by info (its list is info.go's;
	// these are added here, beside the command that reads the records).
	knobs = append(knobs, "GPUCOMM_TRACE_DIR", "GPUCOMM_TRACE_SIGNAL")
	otherKnobs["GPUCOMM_TRACE_DIR"] = struct {
		unset, set string
		want       string
		ok         func(v string) bool
	}{"no flight recorder", "every communicator records its last operations; records are written to %s on a timeout, the trace signal or request", "", nil}
	otherKnobs["GPUCOMM_TRACE_SIGNAL"] = struct {
		unset, set string
		want       string
		ok         func(v string) bool
	}{"no signal writes the flight records", "signal %s makes every rank write its flight record (recording on)", "USR1, USR2, TERM, INT or HUP",
		func(v string) bool { _, err := driver.ParseTraceSignal(v); return err == nil }}
	register(&command{name: "trace", summary: "merge the ranks' flight records of a hung or failed job and name where they diverge", run: runTrace})
}

// traceDirDefault is info's line for an unset GPUCOMM_TRACE_DIR while
// GPUCOMM_TRACE_SIGNAL is set (on: true), which turns the recorder on as
// the directory does: "no flight recorder" there sat above the signal's
// "(recording on)", and nothing said where the records go
// (driver.TraceFromEnv's default).
func traceDirDefault() (effect string, on bool) {
	s := driver.TraceFromEnv()
	if !s.On {
		return "", false
	}
	return "records go to ./" + s.Dir + " (each rank's working directory): GPUCOMM_TRACE_SIGNAL turns the flight recorder on", true
}

const traceDescription = `Trace reads the flight records the ranks of a job wrote into DIR and names
the first operation where they diverge: the ranks that never entered
collective S, or entered it with another operation, count, type, reduction
or root; a rank that wrote no record (it died, or was killed before it
could); or, when they agree, the operation still unfinished and on which
ranks.

The ranks write their records into GPUCOMM_TRACE_DIR (when only
GPUCOMM_TRACE_SIGNAL is set, into ./gpucomm-trace) when either is set: on a
timeout (GPUCOMM_TIMEOUT), on the signal GPUCOMM_TRACE_SIGNAL names (USR1,
USR2, TERM, INT or HUP), or when the program calls driver.WriteTraces. For
example:

	GPUCOMM_TRACE_DIR=/shared/trace GPUCOMM_TIMEOUT=60s mpirun -np 8 ./prog
	gpucomm trace /shared/trace

The exit status is 1 when the records show a divergence, a missing rank or
an operation that failed, 0 when every rank agrees and finished.`

// traceGroup is one communicator's records, by rank.
type traceGroup struct {
	ID      string
	Backend string
	Size    int
	Files   map[int]driver.TraceFile
	Paths   map[int]string // the file each record was read from
	// Stale are the records left out as an earlier job's, each said in
	// a line: which file, and what shows it (staleRecords).
	Stale []string
}

// traceFinding is what trace says of one communicator.
type traceFinding struct {
	ID      string   `json:"id"`
	Backend string   `json:"backend"`
	Size    int      `json:"size"`
	Ranks   []int    `json:"ranks"`             // the ranks that wrote a record
	Missing []int    `json:"missing,omitempty"` // the ranks that did not
	OK      bool     `json:"ok"`
	Coll    uint64   `json:"collective,omitempty"` // the collective the finding is about
	Summary string   `json:"summary"`
	Detail  []string `json:"detail,omitempty"`
	// Stale says, a line each, the records of this communicator's id that
	// trace left out because an earlier job wrote them (the id is the
	// same in every job of the same backend and size).
	Stale []string `json:"stale,omitempty"`
}

func runTrace(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("trace", "trace [-json] DIR", traceDescription, stderr)
	asJSON := fs.Bool("json", false, "print the findings as JSON on stdout")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		return usageError(fs, "want one directory, got %d arguments", fs.NArg())
	}
	groups, err := readTraces(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "gpucomm trace: %v\n", err)
		return exitFail
	}
	var findings []traceFinding
	for _, g := range groups {
		findings = append(findings, diagnose(g))
	}
	code := exitOK
	for _, f := range findings {
		if !f.OK {
			code = exitFail
		}
	}
	if *asJSON {
		if err := writeJSON(stdout, findings); err != nil {
			fmt.Fprintf(stderr, "gpucomm trace: %v\n", err)
			return exitFail
		}
		return code
	}
	for _, f := range findings {
		fmt.Fprintf(stdout, "communicator %s (%s, %d ranks; records from %s", f.ID, f.Backend, f.Size, rankList(f.Ranks))
		if len(f.Missing) > 0 {
			fmt.Fprintf(stdout, "; none from %s", traceRankRanges(f.Missing))
		}
		fmt.Fprint(stdout, ")\n")
		for _, st := range f.Stale {
			fmt.Fprintf(stdout, "  left out: %s\n", st)
		}
		fmt.Fprintf(stdout, "  %s\n", f.Summary)
		for _, d := range f.Detail {
			fmt.Fprintf(stdout, "    %s\n", d)
		}
	}
	return code
}

// maxTraceRanks is the most ranks a record may say its communicator has:
// 1<<24, far more than any job runs. A larger "size" is a corrupt record,
// refused before trace lists the ranks that wrote none.
const maxTraceRanks = 1 << 24

// traceFilePattern matches the names of flight records (driver.FileName).
const traceFilePattern = "*.rank*.json"

// readTraces reads every record in dir and groups them by communicator.
func readTraces(dir string) ([]traceGroup, error) {
	// The directory is listed, not globbed: its own name may hold *, ? or [.
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if ok, _ := filepath.Match(traceFilePattern, e.Name()); ok && !e.IsDir() {
			names = append(names, filepath.Join(dir, e.Name()))
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s holds no flight record (*.rank*.json): did the job run with GPUCOMM_TRACE_DIR=%s, and did it time out, get the trace signal or call WriteTraces?", dir, dir)
	}
	byID := map[string]*traceGroup{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		var f driver.TraceFile
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("%s is not a flight record: %v", n, err)
		}
		if f.ID == "" || f.Size < 1 || f.Rank < 0 || f.Rank >= f.Size {
			return nil, fmt.Errorf("%s is not a flight record: id %q, rank %d of %d", n, f.ID, f.Rank, f.Size)
		}
		if f.Size > maxTraceRanks {
			return nil, fmt.Errorf("%s is not a flight record: field \"size\" is %d ranks, more than any job holds (at most %d)", n, f.Size, maxTraceRanks)
		}
		if f.Collectives > math.MaxInt64 {
			return nil, fmt.Errorf("%s is not a flight record: field \"collectives\" is %d, more than a rank can enter (at most %d)", n, f.Collectives, uint64(math.MaxInt64))
		}
		g := byID[f.ID]
		if g == nil {
			g = &traceGroup{ID: f.ID, Backend: f.Backend, Size: f.Size, Files: map[int]driver.TraceFile{}, Paths: map[int]string{}}
			byID[f.ID] = g
		}
		if f.Size != g.Size {
			return nil, fmt.Errorf("%s: field \"size\" is %d, but other records of communicator %s say %d", n, f.Size, f.ID, g.Size)
		}
		if old, dup := g.Files[f.Rank]; dup {
			// Two files of one rank (a copy under another name): the
			// later-written is this job's.
			keepPath, drop, dropPath := n, old, g.Paths[f.Rank]
			if old.Written > f.Written {
				keepPath, drop, dropPath = g.Paths[f.Rank], f, n
			} else {
				g.Files[f.Rank], g.Paths[f.Rank] = f, n
			}
			g.Stale = append(g.Stale, fmt.Sprintf("%s (rank %d, written %s): %s holds a later record of the same rank",
				dropPath, drop.Rank, stamp(drop.Written), keepPath))
			continue
		}
		g.Files[f.Rank] = f
		g.Paths[f.Rank] = n
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]traceGroup, 0, len(ids))
	for _, id := range ids {
		g := byID[id]
		leaveOutEarlierJobs(g)
		out = append(out, *g)
	}
	return out, nil
}

// A communicator's id ("mpi-n3-c0") is the same in every job of its backend
// and size, and a record says nothing of its job: a directory that still
// holds an earlier job's records (a rank of this job that was killed before
// it could write leaves the earlier job's record of its rank in place)
// mixed them into this job's diagnosis, and an old rank's finished
// collectives read as this job's. The times in the records tell them
// apart where the ranks had to meet: a collective that every rank must
// enter before any can finish it (allDependent) can finish on a rank only
// after every other rank of its job entered it. A record whose rank
// finished collective S before another record's rank entered S (or, where
// that record holds its rank's whole history, queued its first operation)
// is of an earlier job.

// allDependent are the collectives none of whose ranks can finish before
// every rank entered them: each rank's result needs every rank's part.
var allDependent = map[string]bool{"AllReduce": true, "AllGather": true, "ReduceScatter": true, "AllToAll": true, "Barrier": true, "Split": true}

// Clock skew allowed between two records' times: the ranks of one host
// read one clock (each process turns its counter into Unix time at its
// start, to well under a millisecond); hosts' clocks, kept by NTP, agree
// to some milliseconds, and a gap of seconds (a job's start) is what
// separates two jobs.
const (
	sameHostSkew  = 100 * time.Millisecond
	otherHostSkew = 2 * time.Second
)

// leaveOutEarlierJobs moves the records of g that an earlier job wrote
// from g.Files to g.Stale (earlierJob says which and why). When every
// record would go, it keeps them all: the times then contradict each other
// and say nothing.
func leaveOutEarlierJobs(g *traceGroup) {
	ranks := make([]int, 0, len(g.Files))
	for r := range g.Files {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	why := map[int]string{}
	for _, x := range ranks {
		for _, y := range ranks {
			if x == y {
				continue
			}
			if w := earlierJob(g.Files[x], g.Files[y]); w != "" {
				why[x] = w
				break
			}
		}
	}
	if len(why) == 0 || len(why) == len(ranks) {
		return
	}
	for _, r := range ranks {
		if w, ok := why[r]; ok {
			g.Stale = append(g.Stale, fmt.Sprintf("%s (rank %d, written %s), an earlier job's: %s", g.Paths[r], r, stamp(g.Files[r].Written), w))
			delete(g.Files, r)
			delete(g.Paths, r)
		}
	}
}

// earlierJob says why record x was written by an earlier job than record
// y, or "" when nothing shows it.
func earlierJob(x, y driver.TraceFile) string {
	skew := otherHostSkew
	if x.Host != "" && x.Host == y.Host {
		skew = sameHostSkew
	}
	entered := map[uint64]int64{} // y's queue time of each collective it holds
	for _, e := range y.Entries {
		if e.Coll != 0 && e.Queued != 0 {
			entered[e.Coll] = e.Queued
		}
	}
	var first int64 // y's first operation, where y holds its rank's whole history
	if len(y.Entries) > 0 && y.Entries[0].Seq == 1 {
		first = y.Entries[0].Queued
	}
	for _, e := range x.Entries {
		if e.Coll == 0 || e.State != driver.StateDone || e.Ended == 0 || !allDependent[e.Op] {
			continue
		}
		if q, ok := entered[e.Coll]; ok {
			if time.Duration(q-e.Ended) > skew {
				return fmt.Sprintf("its rank finished collective %d (%s) at %s, before rank %d entered it at %s", e.Coll, e.Signature(), stamp(e.Ended), y.Rank, stamp(q))
			}
			continue
		}
		if first != 0 && time.Duration(first-e.Ended) > skew {
			return fmt.Sprintf("its rank finished collective %d (%s) at %s, before rank %d began (its first operation was queued at %s)", e.Coll, e.Signature(), stamp(e.Ended), y.Rank, stamp(first))
		}
	}
	return ""
}

// diagnose finds the first divergence of one communicator's records.
func diagnose(g traceGroup) traceFinding {
	f := traceFinding{ID: g.ID, Backend: g.Backend, Size: g.Size, Stale: g.Stale}
	for r := range g.Files {
		f.Ranks = append(f.Ranks, r)
	}
	sort.Ints(f.Ranks)
	next := 0
	for _, r := range append(f.Ranks, g.Size) {
		for ; next < r; next++ {
			f.Missing = append(f.Missing, next)
		}
		next = r + 1
	}
	// Each rank's collectives by number, and the range all records cover.
	colls := map[int]map[uint64]driver.TraceEntry{}
	var from uint64 = 1
	var through uint64
	held := map[uint64]bool{} // the collectives some record holds
	for _, r := range f.Ranks {
		tf := g.Files[r]
		m := map[uint64]driver.TraceEntry{}
		var lowest uint64
		for _, e := range tf.Entries {
			if e.Coll == 0 {
				continue
			}
			m[e.Coll] = e
			held[e.Coll] = true
			if lowest == 0 || e.Coll < lowest {
				lowest = e.Coll
			}
		}
		colls[r] = m
		if lowest > from {
			from = lowest // older collectives fell out of some ring
		}
		through = max(through, tf.Collectives)
	}
	describe := func(e driver.TraceEntry) string {
		s := e.Signature() + " " + e.State
		if e.Error != "" {
			s += ": " + e.Error
		}
		return s
	}
	// Only the collectives some record holds can show a divergence (one no
	// record holds is out of every ring): walking those, not every number
	// up to the counts, keeps a huge or corrupt count from looping.
	seqs := make([]uint64, 0, len(held))
	for s := range held {
		if s >= from && s <= through {
			seqs = append(seqs, s)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, s := range seqs {
		bySig := map[string][]int{}
		var absent []int
		for _, r := range f.Ranks {
			e, ok := colls[r][s]
			if !ok {
				absent = append(absent, r)
				continue
			}
			bySig[e.Signature()] = append(bySig[e.Signature()], r)
		}
		if len(absent) == 0 && len(bySig) == 1 || len(bySig) == 0 {
			continue // agreed, or out of every record's ring
		}
		f.Coll = s
		var parts []string
		if len(bySig) > 1 {
			sigs := make([]string, 0, len(bySig))
			for sig := range bySig {
				sigs = append(sigs, sig)
			}
			sort.Slice(sigs, func(i, j int) bool { return len(bySig[sigs[i]]) > len(bySig[sigs[j]]) })
			for _, sig := range sigs {
				parts = append(parts, fmt.Sprintf("%s entered it as %s", rankList(bySig[sig]), sig))
			}
			f.Summary = fmt.Sprintf("first divergence: collective %d: the ranks entered it with different calls: %s", s, strings.Join(parts, "; "))
		} else {
			var sig string
			for k := range bySig {
				sig = k
			}
			f.Summary = fmt.Sprintf("first divergence: collective %d (%s): %s never entered it", s, sig, rankList(absent))
			if snapshotBehind(g, f.Ranks, absent, colls, s) {
				f.Summary = fmt.Sprintf("collective %d (%s): %s had not entered it when its record was written; "+
					"the records were written on a signal, each rank at its own moment, so a job still running shows this too: "+
					"write them again (a second signal) and see whether %s moved on", s, sig, rankList(absent), rankList(absent))
			}
		}
		for _, r := range absent {
			tf := g.Files[r]
			last := "none recorded"
			for i := len(tf.Entries) - 1; i >= 0; i-- {
				if tf.Entries[i].Coll != 0 {
					last = fmt.Sprintf("collective %d, %s", tf.Entries[i].Coll, describe(tf.Entries[i]))
					break
				}
			}
			f.Detail = append(f.Detail, fmt.Sprintf("rank %d: its last collective was %s (%s)", r, last, tf.Reason))
		}
		for _, r := range f.Ranks {
			if e, ok := colls[r][s]; ok {
				f.Detail = append(f.Detail, fmt.Sprintf("rank %d: %s, queued %s (%s)", r, describe(e), stamp(e.Queued), g.Files[r].Reason))
			}
		}
		f.Detail = append(f.Detail, missingDetail(f.Missing)...)
		return f
	}
	// The ranks agree on every collective they recorded.
	switch {
	case len(f.Missing) > 0:
		f.Summary = fmt.Sprintf("%s wrote no record: it died, was killed, or could not write; the others agree through collective %d", traceRankRanges(f.Missing), through)
		f.Detail = append(f.Detail, missingDetail(f.Missing)...)
		if through > 0 {
			f.Coll = through
			for _, r := range f.Ranks {
				if e, ok := colls[r][through]; ok {
					f.Detail = append(f.Detail, fmt.Sprintf("rank %d: collective %d, %s (%s)", r, through, describe(e), g.Files[r].Reason))
				}
			}
		}
		return f
	}
	var open, failed []string
	for _, r := range f.Ranks {
		for _, e := range g.Files[r].Entries {
			switch e.State {
			case driver.StateFailed:
				failed = append(failed, fmt.Sprintf("rank %d: seq %d %s", r, e.Seq, describe(e)))
			case driver.StateStarted, driver.StateQueued:
				if e.Stream == 0 || e.State == driver.StateStarted {
					open = append(open, fmt.Sprintf("rank %d: seq %d %s", r, e.Seq, describe(e)))
				}
			}
		}
	}
	switch {
	case len(failed) > 0:
		f.Summary = fmt.Sprintf("the ranks agree on all %d collectives, but operations failed", through)
		f.Detail = failed
	case len(open) > 0:
		f.Summary = fmt.Sprintf("the ranks agree on all %d collectives; unfinished operations (a point-to-point peer, or the data path, may be stuck)", through)
		f.Detail = open
	default:
		f.OK = true
		f.Summary = fmt.Sprintf("the ranks agree on all %d collectives and every recorded operation finished", through)
	}
	return f
}

// snapshotBehind reports whether a collective s that the absent ranks did
// not enter may only be one they had not reached yet: every record was
// written on the trace signal (the ranks write theirs each at its own
// moment, while the job runs), and each absent rank's record ends with
// collective s-1 finished.
func snapshotBehind(g traceGroup, ranks, absent []int, colls map[int]map[uint64]driver.TraceEntry, s uint64) bool {
	for _, r := range ranks {
		if !strings.HasPrefix(g.Files[r].Reason, driver.SignalReasonPrefix) {
			return false
		}
	}
	for _, r := range absent {
		prev, ok := colls[r][s-1]
		if !ok || prev.State != driver.StateDone || g.Files[r].Collectives != s-1 {
			return false
		}
	}
	return true
}

// missingDetail tells the ranks without a record, a line per run of
// consecutive ranks (a communicator may have up to maxTraceRanks).
func missingDetail(missing []int) []string {
	var d []string
	for _, run := range rankRuns(missing) {
		d = append(d, fmt.Sprintf("%s: no record (it died, was killed, or could not write)", rankList(run)))
	}
	return d
}

// traceRankRanges is rankList with runs of consecutive ranks as ranges
// ("ranks 1-4, 6-9"), so its length is bounded by the records, not the size.
func traceRankRanges(rs []int) string {
	runs := rankRuns(rs)
	if len(runs) == 1 {
		return rankList(runs[0])
	}
	return "ranks " + strings.Join(runTexts(runs), ", ")
}

// stamp is a recorded time for people.
func stamp(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000000")
}
