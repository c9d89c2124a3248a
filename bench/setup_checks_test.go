package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

// The header says how many iterations were checked: no more than ran (it
// said -c's 100 where 2 ran), and so does -json.
func TestTheHeaderSaysTheIterationsActuallyChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", "100", "-n", "2"}, "# 2 iterations per size after 5 warm-up, 2 checked;"},
		{[]string{"-n", "1", "-w", "0"}, "# 1 iterations per size after 0 warm-up, 1 checked;"}, // -c's default is 2
		{[]string{"-c", "1", "-n", "3"}, "# 3 iterations per size after 5 warm-up, 1 checked;"},
	} {
		args := append([]string{"-np", "2", "-b", "8", "-e", "8", "-op", "allreduce", "-noprogress"}, tc.args...)
		code, out, errOut := bench(t, args...)
		if code != ExitOK || !strings.Contains(out, tc.want) {
			t.Errorf("bench %q: exit %d, want a header with %q:\n%s%s", args, code, tc.want, out, errOut)
		}
	}
	cfg := tiny()
	cfg.Iters, cfg.Checks = 2, 100
	rep, err := RunLocal(context.Background(), 2, cfg, nil)
	if err != nil || rep.Checks != 2 {
		t.Fatalf("RunLocal with 2 iterations and 100 checks: %v, report's checks %d; want 2", err, rep.Checks)
	}
}

// With -c 0 nothing is checked, and the footer says so, where it said
// "0 OK"; a run that checks still says "0 OK".
func TestTheFooterSaysNothingWasCheckedWithC0(t *testing.T) {
	code, out, errOut := bench(t, "-np", "2", "-c", "0", "-n", "2", "-b", "8", "-e", "8", "-op", "allreduce", "-noprogress")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if !strings.HasSuffix(out, "# Wrong elements : not checked (-c 0)\n") || strings.Contains(out, "0 OK") {
		t.Errorf("with -c 0 the footer claims a verdict:\n%s", out)
	}
	rep := &Report{Checks: 2, Results: []Result{{Operation: AllReduce, Size: 8, Wrong: -1}}}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || !strings.HasSuffix(b.String(), "# Wrong elements : not checked\n") {
		t.Errorf("a report of unchecked rows: %v\n%s", err, b.String())
	}
	rep.Results = append(rep.Results, Result{Operation: AllReduce, Size: 16, Wrong: 0})
	b.Reset()
	if err := rep.WriteTable(&b); err != nil || !strings.HasSuffix(b.String(), "# Wrong elements : 0 OK\n") {
		t.Errorf("a report with a checked row: %v\n%s", err, b.String())
	}
}

// A sweep whose buffers do not fit in the host's memory is refused before
// any of them is allocated, naming what it needs, what there is and sizes
// that fit; it was killed by the kernel without a word once it touched
// them. Here against the host's real memory: 16 ranks of 8 GiB allreduce,
// 512 GiB. The test refuses every allocation but the status buffer's
// itself (allocHook), so that a run that tries them fails the test instead
// of filling the machine.
func TestASweepLargerThanTheHostIsRefusedBeforeAllocating(t *testing.T) {
	const np, size = 16, 8 << 30
	if free, _, err := devmem.HostMemory(); err != nil || free >= np*4*size {
		t.Skipf("host memory %d bytes available (%v): the sweep would fit", free, err)
	}
	var mu sync.Mutex
	var tried []string
	t.Cleanup(func() { allocHook = nil })
	allocHook = func(_ comm.Communicator, what string, n int, alloc func(int) (devmem.Buffer, error)) (devmem.Buffer, error) {
		if what == "status" {
			return alloc(n)
		}
		mu.Lock()
		tried = append(tried, fmt.Sprintf("%s of %d bytes", what, n))
		mu.Unlock()
		return devmem.Buffer{}, errors.New("refused by the test")
	}
	var code int
	var out, errOut strings.Builder
	t.Setenv("GPUCOMM_BACKEND", "")
	within(t, "bench", func() {
		code = Main(context.Background(), []string{"-np", fmt.Sprint(np), "-op", "allreduce", "-d", "float64",
			"-b", "8G", "-e", "8G", "-n", "1", "-w", "0", "-noprogress"}, &out, &errOut)
	})
	if len(tried) > 0 {
		t.Errorf("the run allocated before it was refused: %s", strings.Join(tried[:min(len(tried), 4)], ", "))
	}
	want := fmt.Sprintf("gpucomm bench: bench: a sweep up to -e 8G of float64 on %d ranks needs 549.8 GB of host memory (34.4 GB a rank, for the %d ranks of this host)", np, np)
	if code != ExitFail || out.Len() != 0 || !strings.HasPrefix(errOut.String(), want) ||
		!strings.Contains(errOut.String(), "but the host has ") || !strings.Contains(errOut.String(), ": use a smaller -b and -e: -b ") ||
		strings.Count(errOut.String(), "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit %d and one line starting %q", code, out.String(), errOut.String(), ExitFail, want)
	}
}

// shrinkMemory makes the host have free bytes available of total (and a
// GPU the same), for the rest of t.
func shrinkMemory(t *testing.T, free, total int) {
	old := memoryOf
	t.Cleanup(func() { memoryOf = old })
	memoryOf = func(*devmem.Device) (int, int, error) { return free, total, nil }
}

// The refusal counts every buffer of every rank of the host, and names the
// largest -e that fits; each of Run's ranks (one a process under MPI)
// checks its host and refuses at set-up, which every rank stops at.
func TestTheMemoryCheckCountsEveryRankAndNamesAnEThatFits(t *testing.T) {
	// 2 ranks of 4 MiB allreduce: send, receive, the input's and the
	// output's host copies, 16 MiB a rank, 32 MiB in all.
	shrinkMemory(t, 28<<20, 64<<20)
	code, out, errOut := bench(t, "-np", "2", "-op", "allreduce", "-b", "8", "-e", "4M", "-n", "1", "-w", "0", "-noprogress")
	want := "gpucomm bench: bench: a sweep up to -e 4M of float32 on 2 ranks needs 33.6 MB of host memory (16.8 MB a rank, for the 2 ranks of this host)" +
		" for its buffers (send, receive and host copies), but the host has 29.4 MB available of 67.1 MB: use a smaller -e: -e 2M fits\n"
	if code != ExitFail || out != "" || errOut != want {
		t.Errorf("exit %d, stdout %q, stderr\n%q\nwant exit %d and\n%q", code, out, errOut, ExitFail, want)
	}
	// -c 0 needs no output copy: 12 MiB a rank, which fits.
	if code, _, errOut := bench(t, "-np", "2", "-op", "allreduce", "-b", "8", "-e", "4M", "-n", "1", "-w", "0", "-c", "0", "-noprogress"); code != ExitOK {
		t.Errorf("-c 0: exit %d, want the run to fit:\n%s", code, errOut)
	}

	// Each of Run's ranks checks its own host: 3 ranks of 16 MiB.
	shrinkMemory(t, 24<<20, 64<<20)
	cs, err := local.NewGroup(3)
	if err != nil {
		t.Fatal(err)
	}
	defer closeGroup(cs)
	cfg := tiny()
	cfg.Ops = []Operation{AllReduce}
	cfg.MinBytes, cfg.MaxBytes, cfg.StepFactor = 8, 4<<20, 2
	errs := make([]error, len(cs))
	within(t, "Run", func() {
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() { _, errs[i] = Run(context.Background(), c, cfg, nil) })
		}
		wg.Wait()
	})
	for i, err := range errs {
		if err == nil || !strings.HasPrefix(err.Error(), "bench: setting up: a sweep up to -e 4M of float32 on 3 ranks needs 50.3 MB of host memory") ||
			!strings.HasSuffix(err.Error(), "use a smaller -e: -e 1M fits") {
			t.Errorf("rank %d: %v; want its refusal", i, err)
		}
	}
}

// A local bench whose ranks fail alike says each failure once, with the
// ranks it concerns, where it said it once a rank (65536 lines at -np
// 65536).
func TestALocalSetUpFailureIsSaidOnceWithItsRanks(t *testing.T) {
	why := hugeAllocErr(t, false)
	failAlloc(t, "send", 5)
	var code int
	var out, errOut strings.Builder
	t.Setenv("GPUCOMM_BACKEND", "")
	within(t, "gpucomm bench", func() {
		code = Main(context.Background(), []string{"-np", "64", "-op", "allreduce", "-b", "4K", "-e", "4K", "-n", "1", "-w", "0", "-noprogress"}, &out, &errOut)
	})
	want := "gpucomm bench: ranks 0-4 and 6-63: bench: rank 5 could not set up: send buffer: " + why + "\n" +
		"gpucomm bench: rank 5: bench: setting up: send buffer: " + why + "\n"
	if code != ExitFail || out.Len() != 0 || errOut.String() != want {
		t.Errorf("exit %d, stdout %q, stderr\n%s\nwant exit %d and\n%s", code, out.String(), errOut.String(), ExitFail, want)
	}
	if got := failedText([]int{0, 1, 2, 3, 5, 7, 8}, "could not set up", "why"); got != "ranks 0-3, 5 and 7-8 could not set up; rank 0: why" {
		t.Errorf("failedText = %q", got)
	}
}

// A rank that could not prepare (gpucomm bench's -cpuprofile file, its
// -compare reports) stops every rank at set-up, named, as one that could
// not set up: it stopped alone, and under MPI left the others waiting in
// Open for ever (the MPI job itself is cmd/gpucomm's test). A -compare
// failure keeps the usage status on every rank.
func TestARankThatCouldNotPrepareStopsEveryRank(t *testing.T) {
	for _, tc := range []struct {
		err    error
		usage  bool
		others string
	}{
		{errors.New("-cpuprofile: open cp.1: is a directory"), false, "bench: rank 1 could not set up: -cpuprofile: open cp.1: is a directory"},
		{configError{errors.New("-compare: r.json: not a gpucomm bench JSON report")}, true, "bench: rank 1 could not set up: -compare: r.json: not a gpucomm bench JSON report"},
	} {
		cs, err := local.NewGroup(3)
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, len(cs))
		shared := make([]bool, len(cs))
		within(t, "run", func() {
			var wg sync.WaitGroup
			for i, c := range cs {
				var pre prepared
				if i == 1 {
					pre.err = tc.err
				}
				wg.Go(func() { _, shared[i], errs[i] = run(context.Background(), c, tiny(), nil, pre) })
			}
			wg.Wait()
		})
		closeGroup(cs)
		for i, err := range errs {
			switch {
			case err == nil || !shared[i]:
				t.Errorf("%v: rank %d: %v (shared %v); want a shared error", tc.err, i, err, shared[i])
			case i == 1 && err.Error() != "bench: setting up: "+tc.err.Error():
				t.Errorf("%v: rank 1: %v; want its own", tc.err, err)
			case i != 1 && (err.Error() != tc.others || !errors.Is(err, ErrRankFailed)):
				t.Errorf("%v: rank %d: %v; want %q", tc.err, i, err, tc.others)
			case errors.As(err, new(configError)) != tc.usage:
				t.Errorf("%v: rank %d: %v; usage %v, want %v", tc.err, i, err, !tc.usage, tc.usage)
			}
		}
	}
}
