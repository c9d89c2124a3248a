package bench

import (
	"bytes"
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

// tiny is a short sweep that still has sizes of fewer elements than ranks,
// sizes that are not whole elements, and every operation.
func tiny() Config {
	cfg := DefaultConfig()
	cfg.MinBytes, cfg.MaxBytes, cfg.StepFactor = 6, 600, 3
	cfg.Iters, cfg.Warmup, cfg.Checks, cfg.Window = 4, 1, 2, 4
	return cfg
}

func TestLocalRunChecksEveryOperationAndFindsNothingWrong(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, dt := range []comm.DType{comm.Float32, comm.Int8, comm.BFloat16} {
			for _, op := range []comm.Op{comm.Sum, comm.Prod, comm.Max, comm.Avg} {
				if dt != comm.Float32 && op != comm.Sum && op != comm.Avg {
					continue // every reduction once, every type once
				}
				t.Run(fmt.Sprintf("np%d/%v/%v", n, dt, op), func(t *testing.T) {
					cfg := tiny()
					cfg.DType, cfg.Op, cfg.Root = dt, op, n-1
					rep, err := RunLocal(context.Background(), n, cfg, nil)
					if err != nil {
						t.Fatal(err)
					}
					if rep.Ranks != n || rep.Backend != local.Name || rep.Timing != "wall" {
						t.Errorf("report of %d ranks on %s timed by %s", rep.Ranks, rep.Backend, rep.Timing)
					}
					seen := map[Operation]int{}
					for _, res := range rep.Results {
						seen[res.Operation]++
						if res.Wrong != 0 {
							t.Errorf("%v of %d bytes: %d wrong elements", res.Operation, res.Size, res.Wrong)
						}
						if res.Count < 1 || res.Time.N != cfg.Iters || !(res.Time.Median > 0) {
							t.Errorf("%v of %d bytes: count %d, time %+v", res.Operation, res.Size, res.Count, res.Time)
						}
						if res.Baseline != nil {
							t.Errorf("%v: local has no baseline, got %+v", res.Operation, res.Baseline)
						}
					}
					if len(seen) != len(Operations) {
						t.Errorf("measured %v, want every operation", seen)
					}
				})
			}
		}
	}
}

// faulty corrupts one element of rank 1's AllReduce result on a stream;
// bench's own bookkeeping (on a nil stream) stays intact.
type faulty struct{ comm.Communicator }

func (f faulty) AllReduce(send, recv devmem.Buffer, count int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	if err := f.Communicator.AllReduce(send, recv, count, dt, op, s); err != nil {
		return err
	}
	if f.Rank() != 1 || s == nil {
		return nil
	}
	return s.HostFunc(func() error {
		b, _ := recv.Bytes()
		b[len(b)-1] ^= 0x40 // the last element's top byte: a different number in any type
		return nil
	})
}

func TestACorruptedElementIsCountedWrong(t *testing.T) {
	cs, err := local.NewGroup(3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cs {
		cs[i] = faulty{cs[i]}
	}
	cfg := tiny()
	cfg.Ops = []Operation{AllReduce, Broadcast}
	cfg.Checks = 3
	rep, err := RunGroup(context.Background(), cs, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Results {
		want := int64(0)
		if res.Operation == AllReduce {
			want = 1 // one element on one rank, in every checked iteration
		}
		if res.Wrong != want {
			t.Errorf("%v of %d bytes: #wrong %d, want %d", res.Operation, res.Size, res.Wrong, want)
		}
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "FAILED") {
		t.Errorf("table of wrong results does not say FAILED:\n%s", out.String())
	}
	if rep.Wrong() == 0 {
		t.Error("Report.Wrong is 0")
	}
}

// streamSpy counts the int32 AllReduce, Send and Recv calls (the measured
// ones; bench's own bookkeeping uses other types) made on a stream and on
// none, and corrupts rank 1's int32 AllReduce results on no stream.
type streamSpy struct {
	comm.Communicator
	mu               *sync.Mutex
	onStream, onNone map[string]int
}

func (f streamSpy) count(what string, dt comm.DType, s *devmem.Stream) {
	if dt != comm.Int32 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s == nil {
		f.onNone[what]++
	} else {
		f.onStream[what]++
	}
}

func (f streamSpy) AllReduce(send, recv devmem.Buffer, count int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	f.count("AllReduce", dt, s)
	if err := f.Communicator.AllReduce(send, recv, count, dt, op, s); err != nil || f.Rank() != 1 || dt != comm.Int32 || s != nil {
		return err
	}
	b, _ := recv.Bytes()
	b[len(b)-1] ^= 0x40
	return nil
}

func (f streamSpy) Send(buf devmem.Buffer, count int, dt comm.DType, peer int, s *devmem.Stream) error {
	f.count("Send", dt, s)
	return f.Communicator.Send(buf, count, dt, peer, s)
}

func (f streamSpy) Recv(buf devmem.Buffer, count int, dt comm.DType, peer int, s *devmem.Stream) error {
	f.count("Recv", dt, s)
	return f.Communicator.Recv(buf, count, dt, peer, s)
}

func TestNoStreamIssuesEveryOperationOnNoStreamAndChecksIt(t *testing.T) {
	for _, noStream := range []bool{false, true} {
		cs, err := local.NewGroup(2)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		onStream, onNone := map[string]int{}, map[string]int{}
		for i := range cs {
			cs[i] = streamSpy{cs[i], &mu, onStream, onNone}
		}
		cfg := tiny()
		cfg.Ops = []Operation{AllReduce, PingPong}
		cfg.DType, cfg.Checks, cfg.NoStream = comm.Int32, 3, noStream
		rep, err := RunGroup(context.Background(), cs, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		used, unused := onStream, onNone
		timing := "wall"
		if noStream {
			used, unused, timing = onNone, onStream, "wall, no stream"
		}
		if rep.Timing != timing {
			t.Errorf("NoStream %v: timing %q, want %q", noStream, rep.Timing, timing)
		}
		// Per size: warm-up and timed iterations on every rank; the
		// ping-pong's two ranks each send and receive once an iteration.
		perSize := 2 * (cfg.Warmup + cfg.Iters)
		for _, what := range []string{"AllReduce", "Send", "Recv"} {
			if used[what] < perSize || unused[what] != 0 {
				t.Errorf("NoStream %v: %s on the wanted stream %d times (want at least %d), on the other %d times",
					noStream, what, used[what], perSize, unused[what])
			}
		}
		for _, res := range rep.Results {
			if want := res.Operation == AllReduce && noStream; (res.Wrong > 0) != want {
				t.Errorf("NoStream %v: %v of %d bytes: %d wrong; want wrong elements: %v", noStream, res.Operation, res.Size, res.Wrong, want)
			}
		}
	}
}

func TestUncheckedRunReportsNoWrongCount(t *testing.T) {
	cfg := tiny()
	cfg.Checks = 0
	cfg.Ops = []Operation{AllGather}
	rep, err := RunLocal(context.Background(), 2, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Results {
		if res.Wrong != -1 {
			t.Errorf("unchecked %d bytes: #wrong %d, want -1", res.Size, res.Wrong)
		}
	}
}

func TestCheckerToleratesFloatRoundingButNotMisplacedData(t *testing.T) {
	sh, _ := ShapeOf(AllReduce, 4*1000, 4, 3)
	k := checker{op: AllReduce, dt: comm.Float32, redop: comm.Avg, ranks: 3, shape: sh}
	got := alignedBytes(sh.RecvCount * 4)
	for j := range sh.Count {
		var sum int64
		for r := range 3 {
			sum += inputValue(AllReduce, comm.Avg, r, j)
		}
		// Divide in float64 then round: not always the bits Go's float32 gives.
		put(comm.Float32, got, j, 0)
		v := float32(float64(sum) / 3 * (1 + 1e-7))
		copy(got[4*j:], devmem.AsBytes([]float32{v}))
	}
	if n, err := k.wrong(got); err != nil || n != 0 {
		t.Errorf("averages off by rounding: %d wrong, %v", n, err)
	}
	copy(got[8:], devmem.AsBytes([]float32{1e6}))
	if n, _ := k.wrong(got); n != 1 {
		t.Errorf("one far-off average: %d wrong, want 1", n)
	}
	g := checker{op: AllGather, dt: comm.Int32, ranks: 2, rank: 0}
	g.shape, _ = ShapeOf(AllGather, 8*4, 4, 2)
	out := alignedBytes(g.shape.RecvCount * 4)
	for b := range 2 {
		fillInput(AllGather, comm.Int32, 0, 1-b, 0, out[b*16:(b+1)*16]) // blocks swapped
	}
	if n, _ := g.wrong(out); n != 8 {
		t.Errorf("swapped allgather blocks: %d wrong, want all 8", n)
	}
	if _, err := g.wrong(out[:4]); err == nil {
		t.Error("a short buffer checked without error")
	}
}

// fakeBaseline reports every iteration as taking 1 ms, or fails.
type fakeBaseline struct {
	fail   error
	calls  int
	closed bool
}

func (f *fakeBaseline) Name() string { return "fake" }

func (f *fakeBaseline) Time(op Operation, t Task, times []float64) error {
	f.calls++
	if f.fail != nil {
		return f.fail
	}
	if t.Send.Len() != t.Shape.SendCount*t.DType.Size() || t.Window < 1 || !t.Wall {
		return fmt.Errorf("task %+v", t)
	}
	for i := range times {
		times[i] = 1e-3
	}
	return nil
}

func (f *fakeBaseline) Close() error { f.closed = true; return nil }

func TestBaselineIsFoundByBackendNameAndGivesRatios(t *testing.T) {
	fakes := map[*fakeBaseline]bool{}
	var mu = make(chan struct{}, 1)
	RegisterBaseline(local.Name, func(c comm.Communicator) (Baseline, error) {
		mu <- struct{}{}
		defer func() { <-mu }()
		f := &fakeBaseline{}
		if c.Rank() == 1 {
			f.fail = errors.New("rank 1 cannot")
		}
		fakes[f] = true
		return f, nil
	})
	defer RegisterBaseline(local.Name, nil)
	cfg := tiny()
	cfg.Ops = []Operation{AllReduce, PingPong}
	rep, err := RunLocal(context.Background(), 3, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Baseline != "fake" {
		t.Errorf("baseline %q, want fake", rep.Baseline)
	}
	for _, res := range rep.Results {
		b := res.Baseline
		if b == nil || b.Error == "" {
			t.Fatalf("%v: baseline %+v, want rank 1's failure on every rank", res.Operation, b)
		}
	}
	for f := range fakes {
		if !f.closed || f.calls == 0 {
			t.Errorf("baseline calls %d, closed %v", f.calls, f.closed)
		}
	}

	RegisterBaseline(local.Name, func(comm.Communicator) (Baseline, error) { return &fakeBaseline{}, nil })
	rep, err = RunLocal(context.Background(), 2, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Results {
		b := res.Baseline
		if b == nil || b.Error != "" || b.Time.Median != 1000 {
			t.Fatalf("%v: baseline %+v, want 1000 us", res.Operation, b)
		}
		if want := res.Time.Median / 1000; b.TimeRatio != want {
			t.Errorf("%v: time ratio %g, want %g", res.Operation, b.TimeRatio, want)
		}
		if !strings.Contains(out.String(), fmtRatio(b.TimeRatio)) {
			t.Errorf("table lacks the ratio %s:\n%s", fmtRatio(b.TimeRatio), out.String())
		}
	}
}

func TestFailingToOpenABaselineLeavesItOutOfTheReport(t *testing.T) {
	RegisterBaseline(local.Name, func(comm.Communicator) (Baseline, error) { return nil, errors.New("no library here") })
	defer RegisterBaseline(local.Name, nil)
	cfg := tiny()
	cfg.Ops = []Operation{Reduce}
	rep, err := RunLocal(context.Background(), 2, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Baseline, "no library here") || rep.Results[0].Baseline != nil {
		t.Errorf("baseline %q, result %+v", rep.Baseline, rep.Results[0].Baseline)
	}
}

func TestBaselinesAreKnownForTheLibraryBackends(t *testing.T) {
	got := strings.Join(BaselineBackends(), ",")
	if got != "cudaaware,mpi,nccl" {
		t.Errorf("baselines for %s, want cudaaware, mpi and nccl", got)
	}
}

func TestCancelledRunStopsEveryRankWithAnError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	cfg := tiny()
	rep, err := RunLocal(ctx, 3, cfg, func(done, total int) {
		calls++
		if done == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if rep == nil || len(rep.Results) != 2 {
		t.Errorf("partial report %+v, want the 2 steps done", rep)
	}
	if calls != 3 {
		t.Errorf("progress called %d times, want 3 (start and two steps)", calls)
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	if _, err := Run(context.Background(), nil, DefaultConfig(), nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("nil communicator: %v", err)
	}
	if _, err := RunGroup(context.Background(), nil, DefaultConfig(), nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("empty group: %v", err)
	}
	cfg := tiny()
	cfg.Root = 5
	if _, err := RunLocal(context.Background(), 2, cfg, nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("root 5 of 2: %v", err)
	}
	if _, err := RunLocal(context.Background(), 0, tiny(), nil); err == nil {
		t.Error("0 ranks succeeded")
	}
}
