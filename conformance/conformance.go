package conformance

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// NewGroup returns the communicators this process holds: every rank of an
// in-process group (local backend), or this process's single rank when run
// under mpirun (MPI/NCCL backends). Each call returns fresh communicators;
// the suite closes them.
type NewGroup func() ([]comm.Communicator, error)

// Config selects and bounds the cases.
type Config struct {
	Run     string        // regexp selecting case names (empty: all)
	Short   bool          // leave out the large (>= 4 MiB) cases and the exhaustive type×op grid's larger counts
	Timeout time.Duration // per case; 0 means 2 minutes
}

// Result is the outcome of one case in this process.
type Result struct {
	Name    string
	Passed  bool
	Skipped bool
	Detail  string // why it failed or was skipped
	Elapsed time.Duration
}

// Report is what Check found.
type Report struct {
	Backend string
	Ranks   int
	Device  string
	Results []Result
}

// Failed counts the cases that failed.
func (r Report) Failed() int {
	n := 0
	for _, res := range r.Results {
		if !res.Passed && !res.Skipped {
			n++
		}
	}
	return n
}

// Skipped counts the cases that were skipped.
func (r Report) Skipped() int {
	n := 0
	for _, res := range r.Results {
		if res.Skipped {
			n++
		}
	}
	return n
}

// String is a summary, one line a case.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backend %s, %d ranks, device %s: %d cases, %d failed, %d skipped\n",
		r.Backend, r.Ranks, r.Device, len(r.Results), r.Failed(), r.Skipped())
	for _, res := range r.Results {
		verdict := "ok  "
		switch {
		case res.Skipped:
			verdict = "skip"
		case !res.Passed:
			verdict = "FAIL"
		}
		fmt.Fprintf(&b, "%s %-22s %v\n", verdict, res.Name, res.Elapsed.Round(time.Millisecond))
		if res.Detail != "" && (res.Skipped || !res.Passed) {
			b.WriteString("     " + strings.ReplaceAll(strings.TrimSpace(res.Detail), "\n", "\n     ") + "\n")
		}
	}
	return b.String()
}

// Check runs the selected cases and reports on each. Under mpirun every
// process must call it with the same Config.
func Check(newGroup NewGroup, cfg Config) Report {
	var rep Report
	sel, err := selectCases(cfg)
	if err != nil {
		rep.Results = append(rep.Results, Result{Name: "Config", Detail: err.Error()})
		return rep
	}
	rep.Backend, rep.Ranks, rep.Device = describe(newGroup)
	for _, tc := range sel {
		rep.Results = append(rep.Results, runCase(tc, newGroup, cfg))
	}
	return rep
}

// Run runs every case as a subtest of t; with go test -short it leaves out
// the large ones.
func Run(t *testing.T, newGroup NewGroup) {
	t.Helper()
	RunConfig(t, newGroup, Config{Short: testing.Short()})
}

// RunConfig runs the cases cfg selects as subtests of t.
func RunConfig(t *testing.T, newGroup NewGroup, cfg Config) {
	t.Helper()
	sel, err := selectCases(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range sel {
		t.Run(tc.name, func(t *testing.T) {
			res := runCase(tc, newGroup, cfg)
			switch {
			case res.Skipped:
				t.Skip(res.Detail)
			case !res.Passed:
				t.Error(res.Detail)
			}
		})
	}
}

func selectCases(cfg Config) ([]testCase, error) {
	re, err := regexp.Compile(cfg.Run)
	if err != nil {
		return nil, fmt.Errorf("conformance: Config.Run %q: %w", cfg.Run, err)
	}
	var sel []testCase
	for _, tc := range allCases() {
		if re.MatchString(tc.name) {
			sel = append(sel, tc)
		}
	}
	return sel, nil
}

// describe names the backend, rank count and device of one fresh group.
func describe(newGroup NewGroup) (backend string, ranks int, device string) {
	cs, err := newGroup()
	if err != nil || len(cs) == 0 {
		return "?", 0, fmt.Sprintf("? (NewGroup: %v)", err)
	}
	backend, ranks = cs[0].Backend(), cs[0].Size()
	device = describeDevice(cs[0].Device())
	closeAll(cs)
	return
}

// SimulatedHost is a report's Device on simulated host devices.
const SimulatedHost = "host (simulated)"

// describeDevice names d for a report: a GPU as devmem names it ("cuda:0
// (NVIDIA H200)"), a simulated host device by its kind alone, since its
// number only counts the host devices the process made before it (the
// local backend makes one a rank and a group; gpucomm check's probe opens a
// group before the suite's), and so changes from run to run of one job.
func describeDevice(d *devmem.Device) string {
	if d.Kind() == devmem.Host {
		return SimulatedHost
	}
	return d.String()
}

func closeAll(cs []comm.Communicator) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.Close() })
	}
	wg.Wait()
}

// runCase runs one case on fresh communicators and makes every process
// agree on its verdict.
func runCase(tc testCase, newGroup NewGroup, cfg Config) Result {
	start := time.Now()
	res := Result{Name: tc.name}
	if tc.large && cfg.Short {
		res.Skipped, res.Detail = true, "large case left out in short mode"
		return res
	}
	cs, err := newGroup()
	if err == nil && len(cs) == 0 {
		err = fmt.Errorf("NewGroup returned no communicators")
	}
	if err != nil {
		// Every process still joins the verdict, so none is left waiting.
		res.Detail = fmt.Sprintf("NewGroup: %v", err)
		agree(newGroup, true)
		res.Elapsed = time.Since(start)
		return res
	}
	size := cs[0].Size()
	if size < tc.minRanks {
		closeAll(cs)
		res.Skipped, res.Detail = true, fmt.Sprintf("needs %d ranks, the group has %d", tc.minRanks, size)
		res.Elapsed = time.Since(start)
		return res
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	lines := runRanks(tc, cs, cfg.Short, timeout)
	anyFailed, err := agree(newGroup, len(lines) > 0)
	switch {
	case err != nil:
		lines = append(lines, "verdict: "+err.Error())
	case anyFailed && len(lines) == 0:
		lines = append(lines, "failed in another process")
	}
	res.Passed = len(lines) == 0
	res.Detail = summarize(lines)
	res.Elapsed = time.Since(start)
	return res
}

// runRanks runs the case body once per held communicator, each on its own
// goroutine, then closes them and checks that nothing leaked. It returns
// the failures.
func runRanks(tc testCase, cs []comm.Communicator, short bool, timeout time.Duration) []string {
	env := &caseEnv{name: tc.name, short: short, held: len(cs)}
	devs := map[*devmem.Device]devmem.Stats{}
	var lines []string
	held := map[int]bool{}
	for i, c := range cs {
		// Ranks held twice or disagreeing on the size would hang the case.
		switch {
		case c == nil || c.Device() == nil:
			return []string{fmt.Sprintf("communicator %d of NewGroup is nil or has no device", i)}
		case held[c.Rank()] || c.Size() != cs[0].Size():
			return []string{fmt.Sprintf("NewGroup gave rank %d of %d after rank %d of %d", c.Rank(), c.Size(), cs[0].Rank(), cs[0].Size())}
		}
		held[c.Rank()] = true
		devs[c.Device()] = c.Device().Stats()
	}
	ranks := make([]*rank, len(cs))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cs {
		ranks[i] = &rank{c: c, env: env}
		wg.Go(func() { ranks[i].run(tc.body) })
	}
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		// The stuck goroutines are abandoned: the communicators are unusable.
		var stuck []string
		for _, r := range ranks {
			if !r.finished.Load() {
				stuck = append(stuck, fmt.Sprint(r.id()))
			}
		}
		return []string{fmt.Sprintf("timed out after %v; ranks still running: %s", timeout, strings.Join(stuck, ", "))}
	}
	for _, r := range ranks {
		for _, f := range r.fails {
			lines = append(lines, fmt.Sprintf("rank %d: %s", r.id(), f))
		}
		if !r.closed {
			if err := r.c.Close(); err != nil {
				lines = append(lines, fmt.Sprintf("rank %d: Close: %v", r.id(), err))
			}
		}
	}
	for d, before := range devs {
		if after := d.Stats(); leaked(before, after) {
			lines = append(lines, fmt.Sprintf("%v leaked: before the case %+v, after %+v", d, before, after))
		}
	}
	return lines
}

// leaked reports whether after holds more of anything than before (the
// backend may free its own buffers at Close, so fewer is fine).
func leaked(before, after devmem.Stats) bool {
	return after.Buffers > before.Buffers || after.Pinned > before.Pinned || after.Bytes > before.Bytes ||
		after.Streams > before.Streams || after.Events > before.Events || after.Opened > before.Opened
}

// agree combines every process's failed through an AllReduce(Max) of a
// flag on fresh communicators, and reports whether any process failed.
func agree(newGroup NewGroup, failed bool) (bool, error) {
	cs, err := newGroup()
	if err != nil {
		return true, fmt.Errorf("NewGroup: %w", err)
	}
	flag := int32(0)
	if failed {
		flag = 1
	}
	votes := make([]int32, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { votes[i], errs[i] = vote(c, flag) })
	}
	wg.Wait()
	anyFailed := failed
	for i, v := range votes {
		if errs[i] != nil {
			return true, fmt.Errorf("rank %d: %w", cs[i].Rank(), errs[i])
		}
		if v != 0 && v != 1 || v < flag {
			return true, fmt.Errorf("rank %d: AllReduce(max) of failure flags gave %d", cs[i].Rank(), v)
		}
		anyFailed = anyFailed || v != 0
	}
	return anyFailed, nil
}

func vote(c comm.Communicator, flag int32) (int32, error) {
	defer c.Close()
	buf, err := devmem.AllocSlice[int32](c.Device(), 1)
	if err != nil {
		return 0, err
	}
	defer buf.Free()
	if err := buf.CopyFrom([]int32{flag}, nil); err != nil {
		return 0, err
	}
	if err := comm.AllReduce(c, buf, buf, comm.Max, nil); err != nil {
		return 0, err
	}
	out, err := buf.ToHost(nil)
	if err != nil {
		return 0, err
	}
	return out[0], nil
}

// summarize keeps a report readable when a case fails everywhere.
func summarize(lines []string) string {
	const most = 40
	if len(lines) > most {
		lines = append(lines[:most:most], fmt.Sprintf("... and %d more", len(lines)-most))
	}
	return strings.Join(lines, "\n")
}
