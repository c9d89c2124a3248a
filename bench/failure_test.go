package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

// within runs f and waits for it at most a minute: a safety net, so that a
// rank that hangs fails the test instead of hanging it.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s had not returned after a minute: a rank hangs", what)
	}
}

// hugeAlloc is more than any address space here: asking a host device for
// it fails for real ("cannot allocate memory").
const hugeAlloc = 1 << 50

// failAlloc makes the allocation of the named buffer fail for real on the
// given ranks: they ask their device for hugeAlloc bytes.
func failAlloc(t *testing.T, what string, ranks ...int) {
	t.Cleanup(func() { allocHook = nil })
	allocHook = func(c comm.Communicator, w string, n int, alloc func(int) (devmem.Buffer, error)) (devmem.Buffer, error) {
		for _, r := range ranks {
			if c.Rank() == r && w == what {
				n = hugeAlloc
			}
		}
		return alloc(n)
	}
}

// hugeAllocErr is a host device's own error for a hugeAlloc allocation of
// device memory, or of pinned memory (the host copies' kind).
func hugeAllocErr(t *testing.T, pinned bool) string {
	t.Helper()
	alloc := devmem.NewHostDevice().Alloc
	if pinned {
		alloc = devmem.NewHostDevice().AllocPinned
	}
	b, err := alloc(hugeAlloc)
	if err == nil {
		b.Free()
		t.Skipf("a host device allocated %d bytes", hugeAlloc)
	}
	return err.Error()
}

// rankErrors splits RunGroup's error into its ranks' errors, by the
// "rank N: " each starts with.
func rankErrors(t *testing.T, err error, n int) []error {
	t.Helper()
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("RunGroup's error %v is not one error a rank", err)
	}
	errs := make([]error, n)
	for _, e := range j.Unwrap() {
		var r int
		if _, serr := fmt.Sscanf(e.Error(), "rank %d: ", &r); serr != nil || r < 0 || r >= n || errs[r] != nil {
			t.Fatalf("RunGroup's error %q does not start with one rank of %d", e, n)
		}
		errs[r] = e
	}
	return errs
}

func TestARankThatCannotSetUpStopsEveryRankWithAnError(t *testing.T) {
	why, whyHost := hugeAllocErr(t, false), hugeAllocErr(t, true)
	for _, tc := range []struct {
		what   string
		failed []int
		others string // the error of every rank that did set up
	}{
		{"send", []int{0}, "bench: rank 0 could not set up: send buffer: " + why},
		{"recv", []int{1}, "bench: rank 1 could not set up: recv buffer: " + why},
		{"scratch", []int{2}, "bench: rank 2 could not set up: scratch buffer: " + why},
		{"recv", []int{0, 2}, "bench: ranks 0 and 2 could not set up; rank 0: recv buffer: " + why},
		{"host input", []int{1}, "bench: rank 1 could not set up: host input buffer: " + whyHost},
		{"host output", []int{0, 1, 2}, ""},
	} {
		t.Run(fmt.Sprintf("%s/%v", tc.what, tc.failed), func(t *testing.T) {
			why := why
			if strings.HasPrefix(tc.what, "host") {
				why = whyHost
			}
			failAlloc(t, tc.what, tc.failed...)
			cs, err := local.NewGroup(3)
			if err != nil {
				t.Fatal(err)
			}
			defer closeGroup(cs)
			reps := make([]*Report, len(cs))
			errs := make([]error, len(cs))
			within(t, "Run", func() {
				var wg sync.WaitGroup
				for i, c := range cs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						reps[i], errs[i] = Run(context.Background(), c, tiny(), nil)
					}()
				}
				wg.Wait()
			})
			for i, err := range errs {
				failed := false
				for _, r := range tc.failed {
					failed = failed || r == i
				}
				switch {
				case reps[i] != nil:
					t.Errorf("rank %d: a report of a run that never started: %+v", i, reps[i])
				case err == nil:
					t.Errorf("rank %d: no error", i)
				case failed && (errors.Is(err, ErrRankFailed) || err.Error() != "bench: setting up: "+tc.what+" buffer: "+why):
					t.Errorf("rank %d, which could not set up: error %q, want its own", i, err)
				case !failed && (!errors.Is(err, ErrRankFailed) || err.Error() != tc.others):
					t.Errorf("rank %d: error %q, want %q wrapping ErrRankFailed", i, err, tc.others)
				}
				// A rank that gives up frees what it had set up.
				if st := cs[i].Device().Stats(); st.Buffers != 0 || st.Streams != 0 || st.Bytes != 0 {
					t.Errorf("rank %d: device holds %+v after the run", i, st)
				}
			}
		})
	}
}

func TestTheCommandReportsARankThatCannotSetUpInsteadOfHanging(t *testing.T) {
	why := hugeAllocErr(t, false)
	failAlloc(t, "send", 0)
	t.Setenv("GPUCOMM_BACKEND", "")
	var code int
	var out, errOut bytes.Buffer
	within(t, "gpucomm bench", func() {
		code = Main(context.Background(), []string{"-np", "2", "-op", "broadcast", "-b", "4K", "-e", "4K", "-n", "1", "-w", "0"}, &out, &errOut)
	})
	if code != ExitFail {
		t.Errorf("exit %d, want %d", code, ExitFail)
	}
	for _, want := range []string{
		"rank 0: bench: setting up: send buffer: " + why,
		"rank 1: bench: rank 0 could not set up: send buffer: " + why,
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	if out.Len() != 0 {
		t.Errorf("a report of a run that never started:\n%s", out.String())
	}
}

// sendOnAnotherDevice puts rank's send buffer on a device of its own, for
// the rest of t: that rank's first copy of input, on its stream, fails in
// the middle of a run, while the others go on to the collective.
func sendOnAnotherDevice(t *testing.T, rank int) {
	t.Cleanup(func() { allocHook = nil })
	allocHook = func(c comm.Communicator, what string, n int, alloc func(int) (devmem.Buffer, error)) (devmem.Buffer, error) {
		if c.Rank() == rank && what == "send" {
			return devmem.NewHostDevice().Alloc(n)
		}
		return alloc(n)
	}
}

// closesAt closes its own communicator at the first Broadcast it is asked
// for on a stream (a measured one), then makes the call, which the backend
// refuses: a collective that fails on one rank only, in the middle of a
// run.
type closesAt struct {
	comm.Communicator
	once *sync.Once
}

func (c closesAt) Broadcast(send, recv devmem.Buffer, count int, dt comm.DType, root int, s *devmem.Stream) error {
	if s != nil {
		c.once.Do(func() { c.Communicator.Close() })
	}
	return c.Communicator.Broadcast(send, recv, count, dt, root, s)
}

func closeGroup(cs []comm.Communicator) {
	for _, c := range cs {
		c.Close() // a communicator closed by a test says so; nothing else to do
	}
}

func TestARankThatFailsMidRunDoesNotHangTheGroup(t *testing.T) {
	t.Run("a copy fails on rank 1", func(t *testing.T) {
		// Rank 1's send buffer is on another device: its first copy of
		// input, on its stream, fails; the others go on to the warm-up.
		sendOnAnotherDevice(t, 1)
		cs, err := local.NewGroup(3)
		if err != nil {
			t.Fatal(err)
		}
		defer closeGroup(cs)
		cfg := tiny()
		cfg.Ops = []Operation{AllReduce}
		var rep *Report
		within(t, "RunGroup", func() { rep, err = RunGroup(context.Background(), cs, cfg, nil) })
		errs := rankErrors(t, err, 3)
		if e := errs[1]; e == nil || errors.Is(e, ErrRankFailed) || !errors.Is(e, comm.ErrInvalidArgument) ||
			!strings.HasPrefix(e.Error(), "rank 1: bench: allreduce of 6 bytes: devmem: stream of") {
			t.Errorf("rank 1's error %v, want its own copy's", e)
		}
		// The group was aborted (the local backend's Abort), so the others
		// came back, none left running.
		for _, i := range []int{0, 2} {
			if e := errs[i]; !errors.Is(e, ErrRankFailed) || !strings.Contains(fmt.Sprint(e), "rank 1 failed, and this rank stopped: ") ||
				!strings.Contains(fmt.Sprint(e), "rank 1 of 3 aborted the job") {
				t.Errorf("rank %d's error %v, want one naming rank 1, saying it aborted the group and wrapping ErrRankFailed", i, e)
			}
		}
		// Rank 0 came back: its report holds the steps done before rank 1
		// failed, in its first.
		if rep == nil || len(rep.Results) != 0 {
			t.Errorf("rank 0's report %+v, want one with no rows", rep)
		}
	})
	t.Run("a collective fails on rank 0", func(t *testing.T) {
		cs, err := local.NewGroup(3)
		if err != nil {
			t.Fatal(err)
		}
		defer closeGroup(cs)
		cs[0] = closesAt{cs[0], new(sync.Once)}
		cfg := tiny()
		cfg.Ops = []Operation{AllReduce, Broadcast}
		var rep *Report
		var calls []int
		within(t, "RunGroup", func() {
			rep, err = RunGroup(context.Background(), cs, cfg, func(done, total int) { calls = append(calls, done) })
		})
		errs := rankErrors(t, err, 3)
		if e := errs[0]; e == nil || errors.Is(e, ErrRankFailed) || !errors.Is(e, comm.ErrClosed) ||
			!strings.HasPrefix(e.Error(), "rank 0: bench: broadcast of 6 bytes: ") {
			t.Errorf("rank 0's error %v, want its own broadcast's", e)
		}
		// Rank 0's wrapper hides its Abort: the group is aborted through
		// another rank's (unless the others saw rank 0's Close first).
		for _, i := range []int{1, 2} {
			if e := errs[i]; !errors.Is(e, ErrRankFailed) || !strings.Contains(fmt.Sprint(e), "rank 0 failed, and this rank stopped: ") {
				t.Errorf("rank %d's error %v, want one naming rank 0, saying this rank stopped and wrapping ErrRankFailed", i, e)
			}
		}
		// Rank 0 failed itself: its report holds the steps done, checked.
		sizes, err := Sweep(cfg.MinBytes, cfg.MaxBytes, cfg.StepFactor, cfg.StepBytes)
		if err != nil {
			t.Fatal(err)
		}
		rows := 0
		for _, size := range sizes {
			if sh, err := ShapeOf(AllReduce, size, cfg.DType.Size(), 3); err == nil && sh.Count > 0 {
				rows++
			}
		}
		if rep == nil || len(rep.Results) != rows {
			t.Fatalf("rank 0's report %+v, want its %d allreduce rows", rep, rows)
		}
		for _, res := range rep.Results {
			if res.Operation != AllReduce || res.Wrong != 0 || res.Time.N != cfg.Iters {
				t.Errorf("%v of %d bytes: %d wrong, %d samples", res.Operation, res.Size, res.Wrong, res.Time.N)
			}
		}
		if len(calls) != rows+1 {
			t.Errorf("progress called with %v, want the start and %d steps", calls, rows)
		}
	})
}

// Under a backend of one process a rank (mpi, cudaaware, nccl), the
// command's rank whose run fails mid-run aborts the job once it has said
// why, where the others, with no timeout, would wait for it for ever; the
// ranks here are the local backend's, whose Abort releases them (MPI's
// ends the job: internal/mpicomm/mpitest's AbortEndsTheJob).
func TestTheCommandsRankThatFailsMidRunAbortsTheJob(t *testing.T) {
	sendOnAnotherDevice(t, 1)
	cs, err := local.NewGroup(3) // no timeout
	if err != nil {
		t.Fatal(err)
	}
	defer closeGroup(cs)
	cfg := tiny()
	cfg.Ops = []Operation{AllReduce}
	o := &options{noProgress: true}
	codes := make([]int, 3)
	outs := make([]bytes.Buffer, 3)
	errOuts := make([]bytes.Buffer, 3)
	within(t, "every rank's runRank", func() {
		var wg sync.WaitGroup
		for r, c := range cs {
			wg.Go(func() { codes[r] = o.runRank(context.Background(), c, cfg, nil, prepared{}, &outs[r], &errOuts[r]) })
		}
		wg.Wait()
	})
	for r, code := range codes {
		if code != ExitFail {
			t.Errorf("rank %d: exit %d, want %d; stderr:\n%s", r, code, ExitFail, errOuts[r].String())
		}
	}
	if got := errOuts[1].String(); !strings.HasPrefix(got, "gpucomm bench: rank 1: bench: allreduce of 6 bytes: devmem: stream of") {
		t.Errorf("rank 1's stderr %q, want its own copy's error first", got)
	}
	for _, r := range []int{0, 2} {
		if got := errOuts[r].String(); !strings.Contains(got, "rank 1 of 3 aborted the job: bench: rank 1 failed where the other ranks may be waiting for it: bench: allreduce of 6 bytes") {
			t.Errorf("rank %d's stderr %q, want its collective ended by rank 1's abort, with rank 1's reason", r, got)
		}
	}
}

// noAbort hides a communicator's Abort, as a program's wrapper would.
type noAbort struct{ comm.Communicator }

// Where no communicator of the group has an Abort, RunGroup still returns
// when a rank fails mid-run, and says the ranks waiting for it are left
// running. Rank 0's first copy of input fails (its send buffer is on
// another device); it keeps its communicator open, so the others wait.
func TestARankThatFailsMidRunInAGroupWithoutAbort(t *testing.T) {
	sendOnAnotherDevice(t, 0)
	cs, err := local.NewGroup(3)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			comm.Abort(c, errors.New("the test is over")) // frees the ranks left waiting
		}
		closeGroup(cs)
	}()
	wrapped := make([]comm.Communicator, len(cs))
	for i, c := range cs {
		wrapped[i] = noAbort{c}
	}
	cfg := tiny()
	cfg.Ops = []Operation{AllReduce}
	within(t, "RunGroup", func() { _, err = RunGroup(context.Background(), wrapped, cfg, nil) })
	errs := rankErrors(t, err, 3)
	if e := errs[0]; e == nil || errors.Is(e, ErrRankFailed) || !errors.Is(e, comm.ErrInvalidArgument) {
		t.Errorf("rank 0's error %v, want its own copy's", e)
	}
	for _, i := range []int{1, 2} {
		if e := errs[i]; !errors.Is(e, ErrRankFailed) || !strings.Contains(fmt.Sprint(e), "rank 0 failed, and this rank, which may be waiting for it, is left running") {
			t.Errorf("rank %d's error %v, want one naming rank 0, saying it is left running and wrapping ErrRankFailed", i, e)
		}
	}
}

func TestABaselineThatSomeRanksCannotOpenIsLeftOut(t *testing.T) {
	var mu sync.Mutex
	var fakes []*fakeBaseline
	RegisterBaseline(local.Name, func(c comm.Communicator) (Baseline, error) {
		if c.Rank() == 2 {
			return nil, errors.New("no library on rank 2")
		}
		mu.Lock()
		defer mu.Unlock()
		f := &fakeBaseline{}
		fakes = append(fakes, f)
		return f, nil
	})
	defer RegisterBaseline(local.Name, nil)
	cfg := tiny()
	cfg.Ops = []Operation{AllReduce}
	var rep *Report
	var err error
	within(t, "RunLocal", func() { rep, err = RunLocal(context.Background(), 3, cfg, nil) })
	if err != nil {
		t.Fatal(err)
	}
	if want := "none: rank 2 could not open it: no library on rank 2"; rep.Baseline != want {
		t.Errorf("baseline %q, want %q", rep.Baseline, want)
	}
	for _, res := range rep.Results {
		if res.Baseline != nil || res.Wrong != 0 {
			t.Errorf("%v of %d bytes: baseline %+v, %d wrong", res.Operation, res.Size, res.Baseline, res.Wrong)
		}
	}
	if len(fakes) != 2 {
		t.Fatalf("%d baselines opened, want 2", len(fakes))
	}
	for _, f := range fakes {
		if !f.closed || f.calls != 0 {
			t.Errorf("baseline timed %d times, closed %v; want closed unused", f.calls, f.closed)
		}
	}
}

func TestRunGroupRejectsABadGroupBeforeRunning(t *testing.T) {
	cs, err := local.NewGroup(3)
	if err != nil {
		t.Fatal(err)
	}
	defer closeGroup(cs)
	for name, group := range map[string][]comm.Communicator{
		"a nil rank":         {cs[0], nil, cs[2]},
		"ranks out of order": {cs[2], cs[1], cs[0]},
		"a rank missing":     {cs[0], cs[1]},
	} {
		var rep *Report
		within(t, "RunGroup of "+name, func() { rep, err = RunGroup(context.Background(), group, tiny(), nil) })
		if !errors.Is(err, comm.ErrInvalidArgument) || rep != nil {
			t.Errorf("%s: report %v, error %v; want ErrInvalidArgument", name, rep, err)
		}
	}
	for i, c := range cs {
		if st := c.Device().Stats(); st != (devmem.Stats{}) {
			t.Errorf("rank %d: device holds %+v after refused runs", i, st)
		}
	}
	// The group is untouched: it still runs.
	rep, err := RunGroup(context.Background(), cs, tiny(), nil)
	if err != nil || rep == nil || len(rep.Results) == 0 {
		t.Errorf("the group after refused runs: report %v, error %v", rep, err)
	}
}
