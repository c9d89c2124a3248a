package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// Config says what to measure. Its zero values are not usable; start from
// DefaultConfig.
type Config struct {
	// Ops are the operations, in order; nil means every operation that the
	// rank count allows (the point-to-point ones need two ranks).
	Ops        []Operation
	MinBytes   int64 // -b
	MaxBytes   int64 // -e
	StepFactor int   // -f: each size is the previous times this...
	StepBytes  int64 // -i: ...or, with -f 1, plus this
	DType      comm.DType
	Op         comm.Op // reduction of allreduce, reducescatter and reduce
	Root       int     // root of broadcast and reduce
	Iters      int     // timed iterations per size
	Warmup     int     // untimed iterations per size, first
	// Checks is how many of each size's timed iterations have their results
	// checked, spread evenly from the first to the last; 0 checks none.
	Checks int
	Window int // sends per window of the bw test (osu_bw's 64)
	// NoBaseline skips the C-loop baseline.
	NoBaseline bool
	// Wall times by wall clock, with a barrier before each iteration, on a
	// GPU too: ranks that share one GPU pay a GPU context switch for the
	// timing events themselves, which the C baseline (MPI_Wtime) does not.
	Wall bool
	// NoStream issues every operation on no stream, each call returning
	// when it is done, as the C loop calls MPI: for the MPI backends the
	// like-for-like comparison with the baseline, where the default
	// (stream-ordered calls, then Synchronize) adds what stream order
	// costs. It times by wall clock, as Wall does.
	NoStream bool
}

// DefaultConfig is nccl-tests' defaults for iterations, type and reduction,
// a sweep from 8 B to 32 MiB doubling, and osu_bw's window.
func DefaultConfig() Config {
	return Config{
		MinBytes: 8, MaxBytes: 32 << 20, StepFactor: 2, StepBytes: 1 << 20,
		DType: comm.Float32, Op: comm.Sum, Iters: 20, Warmup: 5, Checks: 2, Window: 64,
	}
}

// resolve checks cfg for a communicator of n ranks and fills in Ops.
func (cfg Config) resolve(n int) (Config, []int64, error) {
	if cfg.Ops == nil {
		for _, o := range Operations {
			if !o.PointToPoint() || n >= 2 {
				cfg.Ops = append(cfg.Ops, o)
			}
		}
	}
	bad := func(format string, args ...any) (Config, []int64, error) {
		return cfg, nil, fmt.Errorf("bench: "+format+": %w", append(args, comm.ErrInvalidArgument)...)
	}
	if len(cfg.Ops) == 0 {
		return bad("no operation to measure")
	}
	for _, o := range cfg.Ops {
		if !o.Valid() {
			return bad("invalid operation %d", int(o))
		}
		if o.PointToPoint() && n < 2 {
			return bad("%v needs at least 2 ranks, and there is %d", o, n)
		}
	}
	switch {
	case !cfg.DType.Valid():
		return bad("invalid dtype %v", cfg.DType)
	case !cfg.Op.Valid():
		return bad("invalid reduction %v", cfg.Op)
	case cfg.Root < 0 || cfg.Root >= n:
		return bad("root %d is not a rank of %d", cfg.Root, n)
	case cfg.Iters < 1:
		return bad("%d iterations: want at least 1", cfg.Iters)
	case cfg.Warmup < 0:
		return bad("%d warm-up iterations: want 0 or more", cfg.Warmup)
	case cfg.Checks < 0:
		return bad("%d checked iterations: want 0 or more", cfg.Checks)
	case cfg.Window < 1:
		return bad("window of %d: want at least 1", cfg.Window)
	}
	sizes, err := Sweep(cfg.MinBytes, cfg.MaxBytes, cfg.StepFactor, cfg.StepBytes)
	if err != nil {
		return bad("%v", err)
	}
	return cfg, sizes, nil
}

// checkedIterations picks k of n iterations, evenly spread, first and last
// included when k >= 2.
func checkedIterations(n, k int) map[int]int {
	k = min(k, n)
	at := map[int]int{}
	for j := 0; j < k; j++ {
		i := 0
		if k > 1 {
			i = j * (n - 1) / (k - 1)
		}
		at[i] = j
	}
	return at
}

// Progress is told, on every rank, how many of the sweep's steps are done.
type Progress func(done, total int)

// step is one row of the sweep.
type step struct {
	op    Operation
	size  int64
	shape Shape
}

// runner is one rank's side of a run.
type runner struct {
	c          comm.Communicator
	cfg        Config
	rank, n    int
	s          *devmem.Stream
	events     []*devmem.Event // two per iteration; nil when timing by wall clock
	send, recv devmem.Buffer
	scratch    devmem.Buffer // for gathering numbers over the communicator
	bl         Baseline
}

// Run measures cfg on c and returns the report. Every rank of c calls it
// with the same cfg, and every rank gets the same report: the numbers are
// gathered over c itself. progress may be nil.
func Run(ctx context.Context, c comm.Communicator, cfg Config, progress Progress) (rep *Report, err error) {
	if c == nil {
		return nil, fmt.Errorf("bench: nil communicator: %w", comm.ErrInvalidArgument)
	}
	n, rank := c.Size(), c.Rank()
	cfg, sizes, err := cfg.resolve(n)
	if err != nil {
		return nil, err
	}
	dev := c.Device()
	var steps []step
	maxSend, maxRecv := 1, 1
	for _, op := range cfg.Ops {
		for _, size := range sizes {
			sh, err := ShapeOf(op, size, cfg.DType.Size(), n)
			if err != nil {
				return nil, fmt.Errorf("bench: %v: %w", err, comm.ErrInvalidArgument)
			}
			if sh.Count == 0 {
				continue // less than one element per rank: nothing to move
			}
			steps = append(steps, step{op, size, sh})
			maxSend = max(maxSend, sh.SendCount*cfg.DType.Size())
			maxRecv = max(maxRecv, sh.RecvCount*cfg.DType.Size())
		}
	}
	r := &runner{c: c, cfg: cfg, rank: rank, n: n}
	defer func() {
		if cerr := r.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if r.s, err = dev.NewStream(); err != nil {
		return nil, err
	}
	if r.send, err = dev.Alloc(maxSend); err != nil {
		return nil, err
	}
	if r.recv, err = dev.Alloc(maxRecv); err != nil {
		return nil, err
	}
	if r.scratch, err = dev.Alloc(8 * (cfg.Iters + 1)); err != nil {
		return nil, err
	}
	timing := "wall"
	if cfg.NoStream {
		timing = "wall, no stream"
	} else if dev.Kind() == devmem.CUDA && !cfg.Wall {
		timing = "events"
		for range 2 * cfg.Iters {
			e, err := dev.NewEvent()
			if err != nil {
				return nil, err
			}
			r.events = append(r.events, e)
		}
	}
	rep = &Report{
		Backend: c.Backend(), Ranks: n, Device: dev.Name(), Timing: timing, DType: cfg.DType.String(),
		Op: cfg.Op.String(), Root: cfg.Root, Iters: cfg.Iters, Warmup: cfg.Warmup, Checks: cfg.Checks,
		Window: cfg.Window, MinBytes: cfg.MinBytes, MaxBytes: cfg.MaxBytes, StepFactor: cfg.StepFactor,
		Baseline: "none: the " + c.Backend() + " backend has no library underneath",
		Date:     time.Now().UTC().Format(time.RFC3339),
	}
	if cfg.NoBaseline {
		rep.Baseline = "none: -nobaseline"
	} else if bl, err := openBaseline(c); err != nil {
		rep.Baseline = "none: " + err.Error()
	} else if bl != nil {
		r.bl, rep.Baseline = bl, bl.Name()
	}
	if progress != nil {
		progress(0, len(steps))
	}
	for i, st := range steps {
		// Ranks stop together: any rank that was cancelled stops them all.
		stop, err := r.agree(ctx.Err() != nil)
		if err != nil {
			return rep, err
		}
		if stop {
			return rep, fmt.Errorf("bench: stopped after %d of %d steps: %w", i, len(steps), context.Canceled)
		}
		res, err := r.measure(st)
		if err != nil {
			return rep, fmt.Errorf("bench: %v of %d bytes: %w", st.op, st.size, err)
		}
		rep.Results = append(rep.Results, res)
		if progress != nil {
			progress(i+1, len(steps))
		}
	}
	return rep, nil
}

func (r *runner) close() error {
	var errs []error
	if r.bl != nil {
		errs = append(errs, r.bl.Close())
	}
	if r.s != nil {
		errs = append(errs, r.s.Synchronize(), r.s.Destroy())
	}
	for _, e := range r.events {
		errs = append(errs, e.Destroy())
	}
	for _, b := range []devmem.Buffer{r.send, r.recv, r.scratch} {
		if !b.IsZero() {
			errs = append(errs, b.Free())
		}
	}
	return errors.Join(errs...)
}

// gather reduces vals over every rank with op (in place, through the
// device), so every rank ends with the same numbers.
func gather[T float64 | int64](r *runner, vals []T, dt comm.DType, op comm.Op) error {
	b, err := r.scratch.Slice(0, 8*len(vals))
	if err != nil {
		return err
	}
	if err := devmem.CopyFromHost(b, devmem.AsBytes(vals), nil); err != nil {
		return err
	}
	if err := r.c.AllReduce(b, b, len(vals), dt, op, nil); err != nil {
		return err
	}
	return devmem.CopyToHost(devmem.AsBytes(vals), b, nil)
}

// agree tells every rank whether any rank wants to stop.
func (r *runner) agree(stop bool) (bool, error) {
	v := []int64{0}
	if stop {
		v[0] = 1
	}
	err := gather(r, v, comm.Int64, comm.Max)
	return v[0] != 0, err
}

// issue queues one iteration of op on the runner's stream.
func (r *runner) issue(op Operation, sh Shape, send, recv devmem.Buffer) error {
	c, s, dt, cfg := r.c, r.s, r.cfg.DType, r.cfg
	if cfg.NoStream {
		s = nil
	}
	switch op {
	case AllReduce:
		return c.AllReduce(send, recv, sh.Count, dt, cfg.Op, s)
	case AllGather:
		return c.AllGather(send, recv, sh.Count, dt, s)
	case ReduceScatter:
		return c.ReduceScatter(send, recv, sh.Count, dt, cfg.Op, s)
	case Broadcast:
		return c.Broadcast(send, recv, sh.Count, dt, cfg.Root, s)
	case Reduce:
		return c.Reduce(send, recv, sh.Count, dt, cfg.Op, cfg.Root, s)
	case AllToAll:
		return c.AllToAll(send, recv, sh.Count, dt, s)
	case PingPong:
		switch r.rank {
		case 0:
			if err := c.Send(send, sh.Count, dt, 1, s); err != nil {
				return err
			}
			return c.Recv(recv, sh.Count, dt, 1, s)
		case 1:
			// The echo sends back what arrived, so rank 0 can check it too.
			if err := c.Recv(recv, sh.Count, dt, 0, s); err != nil {
				return err
			}
			return c.Send(recv, sh.Count, dt, 0, s)
		}
	case Bandwidth:
		ack, err := recv.Slice(0, 1)
		if err != nil {
			return err
		}
		// The window goes as one GroupP2P, in flight together, as osu_bw
		// posts it with MPI_Isend and as nccl-tests group NCCL's sends.
		window := make([]comm.P2P, cfg.Window)
		switch r.rank {
		case 0:
			for i := range window {
				window[i] = comm.SendTo(1, send, sh.Count, dt)
			}
			if err := c.GroupP2P(window, s); err != nil {
				return err
			}
			return c.Recv(ack, 1, comm.Uint8, 1, s)
		case 1:
			for i := range window {
				window[i] = comm.RecvFrom(0, recv, sh.Count, dt)
			}
			if err := c.GroupP2P(window, s); err != nil {
				return err
			}
			return c.Send(ack, 1, comm.Uint8, 0, s)
		}
	}
	return nil
}

// measure runs one row of the sweep on every rank and gathers its numbers.
func (r *runner) measure(st step) (Result, error) {
	cfg, sh, elt := r.cfg, st.shape, r.cfg.DType.Size()
	send, err := r.send.Slice(0, sh.SendCount*elt)
	if err != nil {
		return Result{}, err
	}
	recv, err := r.recv.Slice(0, sh.RecvCount*elt)
	if err != nil {
		return Result{}, err
	}
	in := alignedBytes(send.Len())
	fillInput(st.op, cfg.DType, cfg.Op, r.rank, 0, in)
	if err := devmem.CopyFromHost(send, in, r.own()); err != nil {
		return Result{}, err
	}
	for range cfg.Warmup {
		if err := r.issue(st.op, sh, send, recv); err != nil {
			return Result{}, err
		}
	}
	if err := r.s.Synchronize(); err != nil {
		return Result{}, err
	}
	if err := r.c.Barrier(nil); err != nil {
		return Result{}, err
	}

	check := checker{op: st.op, dt: cfg.DType, redop: cfg.Op, root: cfg.Root, rank: r.rank, ranks: r.n, shape: sh}
	checkAt := checkedIterations(cfg.Iters, cfg.Checks)
	samples := make([]float64, cfg.Iters)
	wrongs := make([]int64, len(checkAt))
	out := alignedBytes(recv.Len())
	wall := r.events == nil
	own := r.own()
	for it := range cfg.Iters {
		k, checked := checkAt[it]
		if checked {
			if err := devmem.Memset(recv, poison, own); err != nil {
				return Result{}, err
			}
		}
		if wall {
			d, err := r.wallIteration(st.op, sh, send, recv)
			if err != nil {
				return Result{}, err
			}
			samples[it] = d.Seconds()
		} else {
			if err := r.events[2*it].Record(r.s); err != nil {
				return Result{}, err
			}
			if err := r.issue(st.op, sh, send, recv); err != nil {
				return Result{}, err
			}
			if err := r.events[2*it+1].Record(r.s); err != nil {
				return Result{}, err
			}
		}
		if checked {
			if err := devmem.CopyToHost(out, recv, own); err != nil {
				return Result{}, err
			}
			if wrongs[k], err = check.wrong(out); err != nil {
				return Result{}, err
			}
		}
	}
	if err := r.s.Synchronize(); err != nil {
		return Result{}, err
	}
	if !wall {
		for it := range samples {
			d, err := devmem.Elapsed(r.events[2*it], r.events[2*it+1])
			if err != nil {
				return Result{}, err
			}
			samples[it] = d.Seconds()
		}
	}
	perMessage(st.op, r.rank, cfg.Window, samples)
	if err := gather(r, samples, comm.Float64, comm.Max); err != nil {
		return Result{}, err
	}
	if err := gather(r, wrongs, comm.Int64, comm.Sum); err != nil {
		return Result{}, err
	}
	res := newResult(st, cfg, r.n, samples, wrongs)
	if r.bl != nil {
		b, err := r.baseline(st, send, recv)
		if err != nil {
			return Result{}, err
		}
		res.setBaseline(b, st, r.n)
	}
	return res, nil
}

// own is the stream of the loop's own copies: the operations' stream, or
// with NoStream none, so that they are done before an operation starts.
func (r *runner) own() *devmem.Stream {
	if r.cfg.NoStream {
		return nil
	}
	return r.s
}

// wallIteration times one iteration by wall clock: the stream drained and
// (for collectives) every rank met first, as the OSU benchmarks do, then
// the operation issued and waited for. With NoStream nothing is queued on
// the stream, and the operation is done when its call returns: the timing
// holds the calls alone, as the C loop's does.
func (r *runner) wallIteration(op Operation, sh Shape, send, recv devmem.Buffer) (time.Duration, error) {
	sync := func() error { return r.s.Synchronize() }
	if r.cfg.NoStream {
		sync = func() error { return nil }
	}
	if err := sync(); err != nil {
		return 0, err
	}
	if !op.PointToPoint() {
		if err := r.c.Barrier(nil); err != nil {
			return 0, err
		}
	}
	t0 := time.Now()
	if err := r.issue(op, sh, send, recv); err != nil {
		return 0, err
	}
	err := sync()
	return time.Since(t0), err
}

// perMessage turns round trips into one-way latency and windows into one
// message's time on rank 0, and zeroes the other ranks' point-to-point
// samples, so that gathering the maximum gives rank 0's.
func perMessage(op Operation, rank, window int, samples []float64) {
	if !op.PointToPoint() {
		return
	}
	div := 2.0
	if op == Bandwidth {
		div = float64(window)
	}
	for i := range samples {
		if rank == 0 {
			samples[i] /= div
		} else {
			samples[i] = 0
		}
	}
}

// baseline times the same step through the C loop and gathers the times;
// a baseline failure on any rank becomes the result's note on every rank.
func (r *runner) baseline(st step, send, recv devmem.Buffer) (baselineTimes, error) {
	cfg := r.cfg
	times := make([]float64, cfg.Iters+1) // the last element flags a failure
	var berr error
	if !st.op.PointToPoint() || r.rank <= 1 {
		t := Task{Send: send, Recv: recv, Shape: st.shape, DType: cfg.DType, Op: cfg.Op, Root: cfg.Root,
			Rank: r.rank, Ranks: r.n, Window: cfg.Window, Warmup: cfg.Warmup, Wall: r.events == nil}
		berr = r.bl.Time(st.op, t, times[:cfg.Iters])
	}
	if berr != nil {
		clear(times)
		times[cfg.Iters] = 1
	}
	if err := gather(r, times, comm.Float64, comm.Max); err != nil {
		return baselineTimes{}, err
	}
	bt := baselineTimes{samples: times[:cfg.Iters]}
	if times[cfg.Iters] != 0 {
		bt.err = "failed on another rank"
		if berr != nil {
			bt.err = berr.Error()
		}
	}
	return bt, nil
}

type baselineTimes struct {
	samples []float64
	err     string
}
