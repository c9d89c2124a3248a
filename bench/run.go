package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
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
	status     devmem.Buffer // for telling the other ranks what failed (statusBytes)
	bl         Baseline
	// in and out are host memory for the input and a checked output (out
	// is zero when nothing is checked), off the Go heap, so that too
	// little of it is an error of setup, which every rank hears of, where
	// the Go runtime would end the process at the first step.
	in, out devmem.Buffer
}

// ErrRankFailed is wrapped by the error of a rank that stopped because
// another rank failed: one that could not set up (Run), or, in RunGroup, one
// that failed while this rank may be waiting for it. The failed rank's own
// error does not wrap it.
var ErrRankFailed = errors.New("another rank failed")

// rankFailed is an error that wraps ErrRankFailed with its own text.
type rankFailed struct{ msg string }

func (e rankFailed) Error() string { return e.msg }
func (e rankFailed) Unwrap() error { return ErrRankFailed }

// Run measures cfg on c and returns the report. Every rank of c calls it
// with the same cfg, and every rank gets the same report: the numbers are
// gathered over c itself. progress may be nil.
//
// The ranks set up (a stream, buffers, the baseline) and then tell each
// other how that went, before anything else, so that a rank that cannot
// set up (its buffers do not fit, say: each rank first checks that they
// fit in its GPU's free memory and, with the other ranks of its host, in
// the host's available memory, and refuses without allocating them when
// they do not) keeps no rank waiting: it returns
// its own error, and every other rank an error wrapping ErrRankFailed that
// names it and gives its cause. A rank whose baseline fails to open after
// the baseline's own collective set-up (NCCL's is one: a Broadcast of its
// id, then its communicator) leaves it out on every rank; one that fails
// inside that set-up leaves the others waiting there, as a rank failing
// later does. A rank whose run fails later returns its error at
// once, and the other ranks may be left waiting for it in a collective, as
// in any program of collectives: a timeout (comm.WithTimeout,
// GPUCOMM_TIMEOUT) ends that wait, and so does the failed rank's
// comm.Abort, which gpucomm bench calls for such a rank and RunGroup for
// its in-process ranks.
func Run(ctx context.Context, c comm.Communicator, cfg Config, progress Progress) (*Report, error) {
	rep, _, err := run(ctx, c, cfg, progress, prepared{})
	return rep, err
}

// prepared is what the caller of run did on this rank before it, for the
// ranks to agree on as on their own set-up.
type prepared struct {
	// err is this rank's failure to prepare (gpucomm bench's -cpuprofile
	// file or -compare reports), or nil. A rank that failed sets up
	// nothing and tells the others at set-up, so that every rank stops
	// together naming it, where it would have stopped alone and left the
	// others waiting for it. A configError stays one on every rank.
	err error
	// memoryChecked: the caller has checked the memory of every rank
	// (RunGroup, once for its in-process ranks), so run does not.
	memoryChecked bool
}

// run is Run, also saying whether its error is shared: one every rank
// returns at the same point of the run (bad input, a failed set-up, a
// cancellation), or one of releasing what the run held once every step is
// done, so that no rank is left waiting for this one.
func run(ctx context.Context, c comm.Communicator, cfg Config, progress Progress, pre prepared) (rep *Report, shared bool, err error) {
	if c == nil {
		return nil, true, fmt.Errorf("bench: nil communicator: %w", comm.ErrInvalidArgument)
	}
	if ctx == nil {
		return nil, true, fmt.Errorf("bench: nil context: %w", comm.ErrInvalidArgument)
	}
	n, rank := c.Size(), c.Rank()
	cfg, steps, maxSend, maxRecv, err := plan(cfg, n)
	if err != nil {
		return nil, true, configError{err}
	}
	dev := c.Device()
	r := &runner{c: c, cfg: cfg, rank: rank, n: n}
	defer func() {
		if cerr := r.close(); cerr != nil && err == nil {
			// Every collective of the run is behind this rank: none
			// waits for it.
			err, shared = cerr, true
		}
	}()
	// The status buffer is small and comes first, so that a rank whose
	// larger allocations fail can still tell the others. A rank that cannot
	// have even this one cannot tell them.
	if r.status, err = r.alloc("status", statusBytes(n)); err != nil {
		return nil, false, fmt.Errorf("bench: setting up: %w", err)
	}
	setupErr := pre.err
	if setupErr == nil && !pre.memoryChecked {
		// Before the buffers: a run too large for the memory would be
		// killed by the kernel, without a word, once it touched them.
		setupErr = checkMemory(cfg, maxSend, maxRecv, n, dev, max(c.LocalSize(), 1))
	}
	if setupErr == nil {
		setupErr = r.setup(dev, maxSend, maxRecv)
	}
	if shared, err = r.setUpTogether(setupErr); err != nil {
		return nil, shared, err
	}
	timing := "wall"
	if cfg.NoStream {
		timing = "wall, no stream"
	} else if r.events != nil {
		timing = "events"
	}
	rep = &Report{
		Backend: c.Backend(), Ranks: n, Device: dev.Name(), Timing: timing, DType: cfg.DType.String(),
		Op: cfg.Op.String(), Root: cfg.Root, Iters: cfg.Iters, Warmup: cfg.Warmup, Checks: min(cfg.Checks, cfg.Iters), // as checkedIterations picks them
		Window: cfg.Window, MinBytes: cfg.MinBytes, MaxBytes: cfg.MaxBytes, StepFactor: cfg.StepFactor,
		Baseline: "none: the " + c.Backend() + " backend has no library underneath",
		Date:     time.Now().UTC().Format(time.RFC3339),
	}
	if cfg.NoBaseline {
		rep.Baseline = "none: -nobaseline"
	} else if rep.Baseline, err = r.openBaselineTogether(rep.Baseline); err != nil {
		return rep, false, err
	}
	if progress != nil {
		progress(0, len(steps))
	}
	for i, st := range steps {
		// Ranks stop together: any rank that was cancelled stops them all.
		stop, err := r.agree(ctx.Err() != nil)
		if err != nil {
			return rep, false, err
		}
		if stop {
			return rep, true, fmt.Errorf("bench: stopped after %d of %d steps: %w", i, len(steps), context.Canceled)
		}
		res, err := r.measure(st)
		if err != nil {
			return rep, false, fmt.Errorf("bench: %v of %d bytes: %w", st.op, st.size, err)
		}
		rep.Results = append(rep.Results, res)
		if progress != nil {
			progress(i+1, len(steps))
		}
	}
	return rep, false, nil
}

// plan checks cfg for a communicator of n ranks and lays out the sweep's
// steps, with the largest send and receive buffers they need; it depends on
// cfg and n alone, so every rank gets the same answer.
func plan(cfg Config, n int) (_ Config, steps []step, maxSend, maxRecv int, err error) {
	cfg, sizes, err := cfg.resolve(n)
	if err != nil {
		return cfg, nil, 0, 0, err
	}
	maxSend, maxRecv = 1, 1
	for _, op := range cfg.Ops {
		found := false
		for _, size := range sizes {
			sh, err := ShapeOf(op, size, cfg.DType.Size(), n)
			if err != nil {
				return cfg, nil, 0, 0, fmt.Errorf("bench: %v: %w", err, comm.ErrInvalidArgument)
			}
			if sh.Count == 0 {
				continue // less than one element per rank: nothing to move
			}
			found = true
			steps = append(steps, step{op, size, sh})
			maxSend = max(maxSend, sh.SendCount*cfg.DType.Size())
			maxRecv = max(maxRecv, sh.RecvCount*cfg.DType.Size())
		}
		if !found {
			return cfg, nil, 0, 0, noSizeError(op, cfg, n)
		}
	}
	return cfg, steps, maxSend, maxRecv, nil
}

// configError is an error of the configuration itself (plan's), which
// every rank finds alike before anything runs: the CLI's usage status.
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

// noSizeError is the error of an operation that no size of the sweep gives
// a whole element (per rank, where the operation splits the array between
// ranks): it would measure nothing.
func noSizeError(op Operation, cfg Config, n int) error {
	elt := int64(cfg.DType.Size())
	need, per := elt, ""
	switch op {
	case AllGather, ReduceScatter, AllToAll:
		need, per = elt*int64(n), fmt.Sprintf(" per rank of %d", n)
	}
	return fmt.Errorf("bench: no size of the sweep (-b %d -e %d) holds a whole %s element%s for %v: "+
		"the smallest size that does is %d bytes: %w",
		cfg.MinBytes, cfg.MaxBytes, cfg.DType, per, op, need, comm.ErrInvalidArgument)
}

// allocHook, when a test sets it, makes the runner's allocations in place
// of alloc, which makes them as a run does; what names the buffer
// ("status", "send", "recv", "scratch", "host input", "host output").
var allocHook func(c comm.Communicator, what string, n int, alloc func(n int) (devmem.Buffer, error)) (devmem.Buffer, error)

// allocWith allocates n bytes for the named buffer with alloc.
func (r *runner) allocWith(what string, n int, alloc func(n int) (devmem.Buffer, error)) (b devmem.Buffer, err error) {
	if allocHook != nil {
		b, err = allocHook(r.c, what, n, alloc)
	} else {
		b, err = alloc(n)
	}
	if err != nil {
		return devmem.Buffer{}, fmt.Errorf("%s buffer: %w", what, err)
	}
	return b, nil
}

// alloc allocates n bytes of the communicator's device for the named buffer.
func (r *runner) alloc(what string, n int) (devmem.Buffer, error) {
	return r.allocWith(what, n, r.c.Device().Alloc)
}

// setup makes the stream, the buffers and, when timing by events, the
// events; close releases whatever it made, whether or not it failed.
func (r *runner) setup(dev *devmem.Device, maxSend, maxRecv int) (err error) {
	if r.s, err = dev.NewStream(); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if r.send, err = r.alloc("send", maxSend); err != nil {
		return err
	}
	if r.recv, err = r.alloc("recv", maxRecv); err != nil {
		return err
	}
	if r.scratch, err = r.alloc("scratch", 8*(r.cfg.Iters+1)); err != nil {
		return err
	}
	// Host memory off the Go heap: a private host device's pinned memory
	// is an anonymous mapping, allocated or refused on the spot.
	host := devmem.NewHostDevice()
	if r.in, err = r.allocWith("host input", maxSend, host.AllocPinned); err != nil {
		return err
	}
	if r.cfg.Checks > 0 {
		if r.out, err = r.allocWith("host output", maxRecv, host.AllocPinned); err != nil {
			return err
		}
	}
	if !r.cfg.NoStream && dev.Kind() == devmem.CUDA && !r.cfg.Wall {
		events := make([]*devmem.Event, 0, 2*r.cfg.Iters)
		for range 2 * r.cfg.Iters {
			e, err := dev.NewEvent()
			if err != nil {
				r.events = events // for close
				return fmt.Errorf("timing event: %w", err)
			}
			events = append(events, e)
		}
		r.events = events
	}
	return nil
}

// setUpTogether tells every rank whether every rank set up (setupErr is
// this rank's failure, or nil). Every rank comes here, set up or not, so
// that none waits for a rank that has given up: a rank that could not set
// up returns its own error, the others one naming it. The error is shared
// unless telling failed.
func (r *runner) setUpTogether(setupErr error) (shared bool, err error) {
	failed, msg, usage, xerr := r.exchange(setupErr)
	if xerr != nil {
		if setupErr != nil {
			return false, fmt.Errorf("bench: setting up: %w (and telling the other ranks failed: %v)", setupErr, xerr)
		}
		return false, fmt.Errorf("bench: telling the other ranks that this one set up: %w", xerr)
	}
	if setupErr != nil {
		return true, fmt.Errorf("bench: setting up: %w", setupErr)
	}
	if len(failed) == 0 {
		return true, nil
	}
	err = rankFailed{"bench: " + failedText(failed, "could not set up", msg)}
	if usage {
		// The failed ranks' flags asked for what cannot be (a -compare
		// file that is no report): the usage status on every rank.
		err = configError{err}
	}
	return true, err
}

// openBaselineTogether opens the baseline on every rank and keeps it only
// if every rank could, since its timings are collective too; it returns the
// report's Baseline line. none is the line when there is no baseline.
func (r *runner) openBaselineTogether(none string) (string, error) {
	bl, err := openBaseline(r.c)
	if err == nil && bl == nil {
		err = errors.New(strings.TrimPrefix(none, "none: "))
	}
	failed, msg, _, xerr := r.exchange(err)
	switch {
	case xerr != nil:
		if bl != nil {
			xerr = errors.Join(xerr, bl.Close())
		}
		return none, fmt.Errorf("bench: telling the other ranks whether the baseline opened: %w", xerr)
	case len(failed) == 0:
		r.bl = bl
		return bl.Name(), nil
	}
	if bl != nil {
		if err := bl.Close(); err != nil {
			return none, fmt.Errorf("bench: closing the baseline that rank %d could not open: %w", failed[0], err)
		}
	}
	if len(failed) == r.n {
		return "none: " + msg, nil
	}
	return "none: " + failedText(failed, "could not open it", msg), nil
}

// statusMessageBytes is as much of a failure's text as exchange passes on.
const statusMessageBytes = 1024

// statusBytes is the size of the status buffer of n ranks: a flag a rank
// and a message.
func statusBytes(n int) int { return 8*n + statusMessageBytes }

// exchange tells every rank which ranks failed (failure is this rank's, or
// nil) and the message of the first of them, through the status buffer on
// no stream, and whether every failure was a configError (usage). Every
// rank calls it at the same point of the run.
func (r *runner) exchange(failure error) (failed []int, msg string, usage bool, err error) {
	// A rank's flag: 0 set up, 1 failed, 2 failed with a configError.
	flags := make([]int64, r.n)
	if failure != nil {
		flags[r.rank] = 1
		if errors.As(failure, new(configError)) {
			flags[r.rank] = 2
		}
	}
	if err := reduceIn(r.c, r.status, flags, comm.Int64, comm.Max); err != nil {
		return nil, "", false, err
	}
	usage = true
	for i, f := range flags {
		if f != 0 {
			failed = append(failed, i)
			usage = usage && f == 2
		}
	}
	if len(failed) == 0 {
		return nil, "", false, nil
	}
	b, err := r.status.Slice(8*r.n, statusMessageBytes)
	if err != nil {
		return nil, "", false, err
	}
	text := make([]byte, statusMessageBytes)
	if r.rank == failed[0] {
		copy(text, failure.Error())
	}
	if err := devmem.CopyFromHost(b, text, nil); err != nil {
		return nil, "", false, err
	}
	if err := r.c.Broadcast(b, b, statusMessageBytes, comm.Uint8, failed[0], nil); err != nil {
		return nil, "", false, err
	}
	if err := devmem.CopyToHost(text, b, nil); err != nil {
		return nil, "", false, err
	}
	if i := bytes.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	return failed, strings.ToValidUTF8(string(text), ""), usage, nil
}

// failedText says that the failed ranks did what, and why the first one
// did: "rank 2 could not set up: why", "ranks 1 and 3 could not set up;
// rank 1: why", "ranks 0-4 and 6 could not set up; rank 0: why" (runs as
// ranges, so that thousands of ranks make a short line).
func failedText(failed []int, what, msg string) string {
	if len(failed) == 1 {
		return fmt.Sprintf("rank %d %s: %s", failed[0], what, msg)
	}
	return fmt.Sprintf("ranks %s %s; rank %d: %s", rankList(failed), what, failed[0], msg)
}

// rankList writes two or more sorted ranks as "1 and 3", "0-4, 6 and 7-8":
// devmem.FormatCPUList's runs, joined for a sentence.
func rankList(ranks []int) string {
	s := strings.Split(devmem.FormatCPUList(ranks), ",")
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// memoryOf reports the bytes free and in total of a device's memory
// (Device.Memory), or, for a nil device, of the host's
// (devmem.HostMemory); tests shrink it to check the refusal without
// filling the machine.
var memoryOf = func(d *devmem.Device) (free, total int, err error) {
	if d == nil {
		return devmem.HostMemory()
	}
	return d.Memory()
}

// runBytes is what one rank of a run allocates for its largest step: on
// its device the send and receive buffers and the scratch, and in host
// memory the input's copy and, when results are checked, the output's.
func runBytes(cfg Config, maxSend, maxRecv, n int) (device, host int64) {
	device = int64(maxSend) + int64(maxRecv) + int64(8*(cfg.Iters+1)) + int64(statusBytes(n))
	host = int64(maxSend)
	if cfg.Checks > 0 {
		host += int64(maxRecv)
	}
	return device, host
}

// checkMemory refuses, before anything is allocated, a run whose buffers
// do not fit where they would live: a rank's device buffers in its GPU's
// free memory, and the host copies of the sharers ranks on this host (and
// their device buffers too, when their devices are host devices) in the
// host's available memory, as solver.New checks a grid. Without it a run
// too large for the host was killed by the kernel with no message once it
// touched its buffers. A memory that cannot be read is not checked. The
// error names the largest -e that fits.
func checkMemory(cfg Config, maxSend, maxRecv, n int, dev *devmem.Device, sharers int) error {
	fits := func(cfg Config, maxSend, maxRecv int) (need, free, total int64, where string, ok bool) {
		d, h := runBytes(cfg, maxSend, maxRecv, n)
		if dev.Kind() != devmem.Host {
			if f, t, err := memoryOf(dev); err == nil && d > int64(f) {
				return d, int64(f), int64(t), "the GPU's memory", false
			}
		} else {
			h += d
		}
		if f, t, err := memoryOf(nil); err == nil && h*int64(sharers) > int64(f) {
			return h * int64(sharers), int64(f), int64(t), "host memory", false
		}
		return 0, 0, 0, "", true
	}
	need, free, total, where, ok := fits(cfg, maxSend, maxRecv)
	if ok {
		return nil
	}
	perRank, has := "", fmt.Sprintf("the GPU has %s free of %s", devmem.MemoryText(free), devmem.MemoryText(total))
	if where == "host memory" {
		has = fmt.Sprintf("the host has %s available of %s", devmem.MemoryText(free), devmem.MemoryText(total))
		if sharers > 1 {
			perRank = fmt.Sprintf(" (%s a rank, for the %d ranks of this host)", devmem.MemoryText(need/int64(sharers)), sharers)
		}
	}
	// The largest -e that fits, halving: the sweep's sizes with -f 2.
	hint := "use fewer ranks a host"
	for e := cfg.MaxBytes / 2; e >= 1; e /= 2 {
		smaller := cfg
		smaller.MinBytes, smaller.MaxBytes = min(cfg.MinBytes, e), e
		if _, _, s, r, err := plan(smaller, n); err == nil {
			if _, _, _, _, ok := fits(smaller, s, r); ok {
				hint = fmt.Sprintf("use a smaller -e: -e %s fits", FormatSize(e))
				if e < cfg.MinBytes {
					hint = fmt.Sprintf("use a smaller -b and -e: -b %s -e %s fits", FormatSize(e), FormatSize(e))
				}
				break
			}
		}
	}
	return fmt.Errorf("a sweep up to -e %s of %s on %d ranks needs %s of %s%s for its buffers "+
		"(send, receive and host copies), but %s: %s",
		FormatSize(cfg.MaxBytes), cfg.DType, n, devmem.MemoryText(need), where, perRank, has, hint)
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
	for _, b := range []devmem.Buffer{r.send, r.recv, r.scratch, r.status, r.in, r.out} {
		if !b.IsZero() {
			errs = append(errs, b.Free())
		}
	}
	return errors.Join(errs...)
}

// gather reduces vals over every rank with op (in place, through the
// device), so every rank ends with the same numbers.
func gather[T float64 | int64](r *runner, vals []T, dt comm.DType, op comm.Op) error {
	return reduceIn(r.c, r.scratch, vals, dt, op)
}

// reduceIn is gather through the start of buf.
func reduceIn[T float64 | int64](c comm.Communicator, buf devmem.Buffer, vals []T, dt comm.DType, op comm.Op) error {
	b, err := buf.Slice(0, 8*len(vals))
	if err != nil {
		return err
	}
	if err := devmem.CopyFromHost(b, devmem.AsBytes(vals), nil); err != nil {
		return err
	}
	if err := c.AllReduce(b, b, len(vals), dt, op, nil); err != nil {
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
	in := hostBytes(r.in, send.Len())
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
	out := hostBytes(r.out, recv.Len())
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

// hostBytes is the first n bytes of a host buffer (page-aligned, so aligned
// for any element type); nil for the zero Buffer.
func hostBytes(b devmem.Buffer, n int) []byte {
	if b.IsZero() {
		return nil
	}
	v, _ := b.Bytes()
	return v[:n]
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
