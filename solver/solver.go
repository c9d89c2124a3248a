package solver

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/kernels"
)

// Stats describes the steps a rank has taken so far.
type Stats struct {
	Steps     int           // steps taken
	Elapsed   time.Duration // wall time spent in Step, until its work finished
	HaloWait  time.Duration // with overlap, the time the compute stream idled waiting for halos; without, the exchanges' time
	HaloBytes int64         // bytes this rank sent in halo exchanges
	Residuals int           // residual reductions
}

// PerStep is the mean wall time of a step.
func (s Stats) PerStep() time.Duration {
	if s.Steps == 0 {
		return 0
	}
	return s.Elapsed / time.Duration(s.Steps)
}

// WaitShare is the fraction of the elapsed time spent waiting for halos.
func (s Stats) WaitShare() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.HaloWait) / float64(s.Elapsed)
}

// timingRing bounds how far the host runs ahead of the device: a timing
// pair is read back before it is recorded again.
const timingRing = 8

type timingPair struct {
	start, end *devmem.Event
	used       bool
}

// Solver is one rank's share of a distributed heat solver. Its methods are
// collective: every rank calls them in the same order, each from its own
// goroutine. A Solver is not safe for concurrent use.
type Solver struct{ impl stepper }

// stepper is a solverT of the configured element type.
type stepper interface {
	config() Config
	stats() Stats
	residual() float64
	step(n int) error
	gather(root int) ([]float64, error)
	checksum() (uint64, error)
	close() error
}

// solverT is the solver for fields of T.
type solverT[T kernels.Float] struct {
	c   comm.Communicator
	cfg Config
	l   layout
	dev *devmem.Device
	r   T // cfg.R in T

	u   [2]devmem.Slice[T] // the current and the next field, halos included
	cur int                // index of the current field in u

	compute, exch          *devmem.Stream // exch is compute when overlap is off
	computeDone, haloReady *devmem.Event
	timing                 [timingRing]timingPair
	nextTiming             int

	sendL, sendR, recvL, recvR devmem.Slice[T] // packed column halos
	ops                        [2][]comm.P2P   // the exchange of u[0] and of u[1]
	haloBytes                  int64

	// A residual step's kernels write one partial sum a block into
	// partial, rects[i] from partOff[i]; SumBlocks adds them in a fixed
	// order (through scratch) into localSum, AllReduce into globalSum.
	partial, scratch, localSum, globalSum devmem.Slice[float64]
	rects                                 [][4]int // layout.rects, one launch each
	partOff                               []int
	residualHost                          devmem.Buffer // pinned: the last global sum of squares
	res                                   float64
	residualPending                       bool // localSum holds a step's sum, not yet added over the ranks
	residualQueued                        bool // residualHost will hold it once the streams are done

	steps  int
	st     Stats
	closed bool
}

// New sets up this rank's block of the grid with its initial values. It is
// collective: the ranks check that they were given the same configuration
// (overlap aside) and fail together otherwise.
func New(c comm.Communicator, cfg Config) (*Solver, error) {
	if c == nil {
		return nil, invalid("nil communicator")
	}
	cfg, cerr := cfg.forRanks(c.Size())
	if err := agree(c, cfg, cerr); err != nil {
		return nil, err
	}
	l := newLayout(cfg, c.Rank())
	if err := checkMemory(c, cfg, l); err != nil {
		return nil, err
	}
	var impl stepper
	var err error
	if cfg.DType == Float32 {
		impl, err = newT[float32](c, cfg, l)
	} else {
		impl, err = newT[float64](c, cfg, l)
	}
	if err != nil {
		return nil, err
	}
	return &Solver{impl}, nil
}

func newT[T kernels.Float](c comm.Communicator, cfg Config, l layout) (*solverT[T], error) {
	s := &solverT[T]{c: c, cfg: cfg, l: l, dev: c.Device(), r: T(cfg.R), res: math.NaN()}
	if err := s.setup(); err != nil {
		return nil, errors.Join(err, s.release())
	}
	return s, nil
}

// agree has every rank learn whether all ranks' configurations were valid
// and equal, with one AllReduce(Max) of {hash, -hash, invalid}.
func agree(c comm.Communicator, cfg Config, cerr error) error {
	v := []int64{cfg.hash(), -cfg.hash(), 0}
	if cerr != nil {
		v = []int64{0, 0, 1}
	}
	buf, err := devmem.AllocSlice[int64](c.Device(), len(v))
	if err != nil {
		return err
	}
	defer buf.Free()
	if err := buf.CopyFrom(v, nil); err != nil {
		return err
	}
	if err := comm.AllReduce(c, buf, buf, comm.Max, nil); err != nil {
		return fmt.Errorf("solver: checking the ranks agree on the configuration: %w", err)
	}
	if err := buf.CopyTo(v, nil); err != nil {
		return err
	}
	switch {
	case cerr != nil:
		return cerr
	case v[2] != 0:
		return invalid("another rank's configuration was rejected")
	case v[0] != -v[1]:
		return fmt.Errorf("solver: ranks were given different configurations: %w", comm.ErrMismatch)
	}
	return nil
}

// deviceBytes is what setup allocates on the device for layout l of cfg:
// two copies of the slab with its halos and the packed column halos of the
// 2-D decomposition, in cfg's element type, and the residual's partial sums,
// their scratch and two sums in float64.
func (l layout) deviceBytes(cfg Config) int64 {
	n := 2 * int64(l.rows+2) * int64(l.nx())
	for _, side := range []int{l.left, l.right} {
		if side >= 0 {
			n += 2 * int64(l.rows)
		}
	}
	parts := l.partials(cfg)
	return int64(cfg.DType.Size())*n + 8*int64(parts+kernels.SumScratch(parts)+2)
}

// rects are the rectangles {rowLo, rowHi, colLo, colHi} one step updates,
// one launch each: the whole block without overlap; with it, the cells
// that read no halo, then the strips next to the halos.
func (l layout) rects(cfg Config) [][4]int {
	if cfg.NoOverlap {
		return [][4]int{{1, l.rows + 1, 1, l.cols + 1}}
	}
	rLo, cLo := 1+btoi(l.up >= 0), 1+btoi(l.left >= 0)
	rHi := max(rLo, l.rows+1-btoi(l.down >= 0))
	cHi := max(cLo, l.cols+1-btoi(l.right >= 0))
	return [][4]int{
		{rLo, rHi, cLo, cHi},             // inner: all neighbours owned or fixed
		{1, rLo, 1, l.cols + 1},          // top rows, full width
		{rHi, l.rows + 1, 1, l.cols + 1}, // bottom rows, full width
		{rLo, rHi, 1, cLo},               // left columns between them
		{rLo, rHi, cHi, l.cols + 1},      // right columns between them
	}
}

// partials is the number of partial sums a residual step writes: one for
// each block of each of rects' launches.
func (l layout) partials(cfg Config) int {
	n := 0
	for _, r := range l.rects(cfg) {
		n += kernels.HeatBlocks(r[1]-r[0], r[3]-r[2])
	}
	return n
}

// checkMemory has the ranks agree, before anything is allocated, that every
// device can hold its block: one AllReduce(Max) of {need, need of the ranks
// sharing one memory, -free, -total}. Host devices share the host's memory
// with the other ranks of the node; a GPU is taken to be this rank's own.
// Every rank returns the same error, so that a caller printing each rank's
// error can print it once.
func checkMemory(c comm.Communicator, cfg Config, l layout) error {
	const unknown = math.MaxInt64
	need := l.deviceBytes(cfg)
	sharers := int64(1)
	if c.Device().Kind() == devmem.Host {
		sharers = int64(max(c.LocalSize(), 1))
	}
	free, total := int64(unknown), int64(unknown)
	if f, t, err := deviceMemory(c.Device()); err == nil {
		free, total = int64(f), int64(t)
	}
	v, err := allMax(c, need, need*sharers, -free, -total)
	if err != nil {
		return fmt.Errorf("solver: checking the devices' memory: %w", err)
	}
	need, nodeNeed, free, total := v[0], v[1], -v[2], -v[3]
	if free == unknown || nodeNeed <= free {
		return nil
	}
	where := "the GPU"
	if c.Device().Kind() == devmem.Host {
		where = "host memory"
	}
	if nodeNeed > need {
		where = fmt.Sprintf("%s, up to %s a rank for the ranks sharing it", where, devmem.MemoryText(need))
	}
	return fmt.Errorf("solver: a %d×%d grid over %d ranks needs %s of %s, but the fullest device has %s free of %s: use a smaller grid, or more GPUs or nodes: %w",
		cfg.N, cfg.M, c.Size(), devmem.MemoryText(nodeNeed), where, devmem.MemoryText(free), devmem.MemoryText(total), comm.ErrUnsupported)
}

// deviceMemory is Device.Memory; tests shrink it to check the refusal
// without filling the machine.
var deviceMemory = (*devmem.Device).Memory

// allMax all-reduces a few int64 values with Max, now.
func allMax(c comm.Communicator, vals ...int64) ([]int64, error) {
	buf, err := devmem.AllocSlice[int64](c.Device(), len(vals))
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	if err := buf.CopyFrom(vals, nil); err != nil {
		return nil, err
	}
	if err := comm.AllReduce(c, buf, buf, comm.Max, nil); err != nil {
		return nil, err
	}
	return buf.ToHost(nil)
}

func (s *solverT[T]) setup() error {
	l, nx := s.l, s.l.nx()
	var err error
	if s.compute, err = s.dev.NewStream(); err != nil {
		return err
	}
	s.exch = s.compute
	if !s.cfg.NoOverlap {
		if s.exch, err = s.dev.NewStream(); err != nil {
			return err
		}
	}
	for _, e := range []**devmem.Event{&s.computeDone, &s.haloReady} {
		if *e, err = s.dev.NewEvent(); err != nil {
			return err
		}
	}
	for i := range s.timing {
		for _, e := range []**devmem.Event{&s.timing[i].start, &s.timing[i].end} {
			if *e, err = s.dev.NewEvent(); err != nil {
				return err
			}
		}
	}
	// One allocation after another, stopping at the first failure, so that
	// a failure is reported once, not once for each buffer that also failed.
	type want struct {
		x *devmem.Slice[T]
		n int
	}
	wants := []want{{&s.u[0], (l.rows + 2) * nx}, {&s.u[1], (l.rows + 2) * nx}}
	if l.left >= 0 {
		wants = append(wants, want{&s.sendL, l.rows}, want{&s.recvL, l.rows})
	}
	if l.right >= 0 {
		wants = append(wants, want{&s.sendR, l.rows}, want{&s.recvR, l.rows})
	}
	for _, w := range wants {
		if *w.x, err = devmem.AllocSlice[T](s.dev, w.n); err != nil {
			return err
		}
	}
	parts := 0
	s.rects = l.rects(s.cfg)
	for _, r := range s.rects {
		s.partOff = append(s.partOff, parts)
		parts += kernels.HeatBlocks(r[1]-r[0], r[3]-r[2])
	}
	type want64 struct {
		x *devmem.Slice[float64]
		n int
	}
	for _, w := range []want64{{&s.partial, parts}, {&s.scratch, kernels.SumScratch(parts)}, {&s.localSum, 1}, {&s.globalSum, 1}} {
		if *w.x, err = devmem.AllocSlice[float64](s.dev, w.n); err != nil {
			return err
		}
	}
	if s.residualHost, err = s.dev.AllocPinned(8); err != nil {
		return err
	}
	if err := s.fillInitial(); err != nil {
		return err
	}
	for i := range s.u {
		if s.ops[i], err = s.exchangeOps(s.u[i]); err != nil {
			return err
		}
	}
	for _, op := range s.ops[0] {
		if op.Kind == comm.SendKind {
			s.haloBytes += int64(op.Count * op.DType.Size())
		}
	}
	return nil
}

// fillInitial writes the initial field, halos included, into both slabs, a
// band of rows at a time to bound the host memory it needs.
func (s *solverT[T]) fillInitial() error {
	l, nx := s.l, s.l.nx()
	band := max(1, (1<<20)/nx)
	host := make([]T, 0, band*nx)
	for i0 := 0; i0 < l.rows+2; i0 += band {
		i1 := min(i0+band, l.rows+2)
		host = host[:0]
		for i := i0; i < i1; i++ {
			for j := range nx {
				host = append(host, T(s.cfg.initial(l.row0+i-1, l.col0+j-1)))
			}
		}
		for _, u := range s.u {
			dst, err := u.Sub(i0*nx, i1*nx)
			if err != nil {
				return err
			}
			if err := dst.CopyFrom(host, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// exchangeOps lists the halo transfers of field u: its edge rows and packed
// edge columns out, its halo rows and the column buffers in.
func (s *solverT[T]) exchangeOps(u devmem.Slice[T]) ([]comm.P2P, error) {
	l, nx := s.l, s.l.nx()
	row := func(i int) (devmem.Slice[T], error) { return u.Sub(i*nx+1, i*nx+1+l.cols) }
	var ops []comm.P2P
	for _, e := range []struct {
		peer      int
		send, hal int // rows sent and received
	}{{l.up, 1, 0}, {l.down, l.rows, l.rows + 1}} {
		if e.peer < 0 {
			continue
		}
		out, err := row(e.send)
		if err != nil {
			return nil, err
		}
		in, err := row(e.hal)
		if err != nil {
			return nil, err
		}
		ops = append(ops, comm.SendSlice(e.peer, out), comm.RecvSlice(e.peer, in))
	}
	if l.left >= 0 {
		ops = append(ops, comm.SendSlice(l.left, s.sendL), comm.RecvSlice(l.left, s.recvL))
	}
	if l.right >= 0 {
		ops = append(ops, comm.SendSlice(l.right, s.sendR), comm.RecvSlice(l.right, s.recvR))
	}
	return ops, nil
}

// errZero is the error of every call that needs a solver on a Solver that
// New did not make (a zero Solver, or a nil *Solver).
var errZero = fmt.Errorf("solver: a zero Solver (solvers come from New): %w", comm.ErrInvalidArgument)

// live returns the solver behind s, or nil for a zero or nil Solver.
func (s *Solver) live() stepper {
	if s == nil {
		return nil
	}
	return s.impl
}

// Config is the configuration in force, defaults and the grid of ranks
// filled in; the zero Config for a zero Solver.
func (s *Solver) Config() Config {
	if im := s.live(); im != nil {
		return im.config()
	}
	return Config{}
}

// Stats returns this rank's counters; zero for a zero Solver.
func (s *Solver) Stats() Stats {
	if im := s.live(); im != nil {
		return im.stats()
	}
	return Stats{}
}

// StencilBytes is what one step must move at the least, over the whole
// grid: every value read once and written once, in the field's element
// type. 0 for a zero Solver.
func (s *Solver) StencilBytes() int64 {
	im := s.live()
	if im == nil {
		return 0
	}
	cfg := im.config()
	return 2 * int64(cfg.DType.Size()) * int64(cfg.N) * int64(cfg.M)
}

// Residual is the norm of the change, sqrt(Σ (u' - u)²) over the whole grid
// summed in float64, at the last step that reduced it; NaN before the
// first, and for a zero Solver.
func (s *Solver) Residual() float64 {
	if im := s.live(); im != nil {
		return im.residual()
	}
	return math.NaN()
}

// Step takes n steps and returns when their work is done. After an error
// the field is undefined. A zero Solver's Step is an error wrapping
// comm.ErrInvalidArgument, as are its Gather, Checksum and Close.
func (s *Solver) Step(n int) error {
	im := s.live()
	if im == nil {
		return errZero
	}
	return im.step(n)
}

// Gather returns the whole N×M field, boundary included, at root (row
// major) and nil elsewhere; float32 values are widened exactly. It is
// collective.
func (s *Solver) Gather(root int) ([]float64, error) {
	im := s.live()
	if im == nil {
		return nil, errZero
	}
	return im.gather(root)
}

// Close waits for the solver's work and releases its memory, streams and
// events; the communicator stays open.
func (s *Solver) Close() error {
	im := s.live()
	if im == nil {
		return errZero
	}
	return im.close()
}

func (s *solverT[T]) config() Config    { return s.cfg }
func (s *solverT[T]) stats() Stats      { return s.st }
func (s *solverT[T]) residual() float64 { return s.res }

func (s *solverT[T]) step(n int) error {
	if s.closed {
		return fmt.Errorf("solver: Step after Close: %w", comm.ErrClosed)
	}
	if n < 0 {
		return invalid("Step(%d)", n)
	}
	start := time.Now()
	var err error
	for range n {
		if err = s.step1(); err != nil {
			break
		}
	}
	if err == nil {
		err = s.finishResidual(s.compute)
	}
	s.residualPending = false
	err = errors.Join(err, s.compute.Synchronize(), s.exch.Synchronize())
	for i := range s.timing {
		if err != nil {
			// A failed step may have left a pair half recorded: its
			// timing is dropped, not reported as an error of its own
			// (an event never recorded) beside the step's.
			s.timing[i].used = false
			continue
		}
		err = s.account(&s.timing[i])
	}
	s.st.Elapsed += time.Since(start)
	if s.residualQueued && err == nil {
		b, _ := s.residualHost.Bytes()
		s.res = math.Sqrt(devmem.FromBytes[float64](b)[0])
		s.residualQueued = false
	}
	return err
}

// step1 queues one step. The host waits for nothing here but the timing
// events of timingRing steps ago and whatever a backend's GroupP2P or
// AllReduce waits for. A residual step leaves its rank's sum on the device;
// the next step adds the ranks' sums on the exchange's stream, just before
// the exchange, which waits for the same work (an MPI backend holds the
// host until the stream is done, once for both), while the interior update
// runs; Step adds the last one's after its loop, and reads the total after
// its final synchronisation.
func (s *solverT[T]) step1() error {
	cur, next := s.u[s.cur], s.u[1-s.cur]
	k := s.cfg.ResidualEvery
	norm := k > 0 && (s.steps+1)%k == 0
	rects := s.rects
	l := s.l

	if l.up < 0 && l.down < 0 && l.left < 0 && l.right < 0 {
		// No neighbours, no halos: one launch over the block after
		// another on the compute stream, with no events between them.
		if err := s.finishResidual(s.compute); err != nil {
			return err
		}
		for i := range rects {
			if err := s.update(next, cur, rects, i, norm); err != nil {
				return err
			}
		}
	} else if err := s.stepWithHalos(next, cur, rects, norm); err != nil {
		return err
	}
	s.steps++
	s.st.Steps++
	s.st.HaloBytes += s.haloBytes
	if norm {
		if err := s.reduceResidual(); err != nil {
			return err
		}
	}
	s.cur = 1 - s.cur
	return nil
}

// stepWithHalos queues a step of a rank with neighbours: the exchange and
// the update, overlapped or one after the other.
func (s *solverT[T]) stepWithHalos(next, cur devmem.Slice[T], rects [][4]int, norm bool) error {
	tp := &s.timing[s.nextTiming]
	s.nextTiming = (s.nextTiming + 1) % timingRing
	if err := s.account(tp); err != nil {
		return err
	}
	tp.used = true
	if s.cfg.NoOverlap {
		if err := s.finishResidual(s.compute); err != nil {
			return err
		}
		if err := tp.start.Record(s.compute); err != nil {
			return err
		}
		if err := s.exchange(s.compute, cur); err != nil {
			return err
		}
		if err := tp.end.Record(s.compute); err != nil {
			return err
		}
		if err := s.update(next, cur, rects, 0, norm); err != nil {
			return err
		}
	} else {
		// The exchange sends cells the last step wrote on the compute
		// stream, so it starts after them.
		if err := s.computeDone.Record(s.compute); err != nil {
			return err
		}
		// The cells that read no halo are queued before the exchange:
		// a backend whose GroupP2P holds the host until the halos have
		// arrived (MPI) then still finds the GPU busy with them. They
		// read none of the halo cells the exchange writes.
		if err := s.update(next, cur, rects, 0, norm); err != nil {
			return err
		}
		if err := tp.start.Record(s.compute); err != nil {
			return err
		}
		if err := s.exch.WaitEvent(s.computeDone); err != nil {
			return err
		}
		if err := s.finishResidual(s.exch); err != nil {
			return err
		}
		if err := s.exchange(s.exch, cur); err != nil {
			return err
		}
		if err := s.haloReady.Record(s.exch); err != nil {
			return err
		}
		if err := tp.end.Record(s.exch); err != nil {
			return err
		}
		if err := s.compute.WaitEvent(s.haloReady); err != nil {
			return err
		}
		for i := 1; i < len(rects); i++ {
			if err := s.update(next, cur, rects, i, norm); err != nil {
				return err
			}
		}
	}
	return nil
}

// update steps rects[i] of cur into next on the compute stream, writing its
// blocks' partial sums of the residual when norm is set.
func (s *solverT[T]) update(next, cur devmem.Slice[T], rects [][4]int, i int, norm bool) error {
	r, nx := rects[i], s.l.nx()
	if !norm {
		return kernels.HeatStepRect(s.compute, next, cur, nx, r[0], r[1], r[2], r[3], s.r)
	}
	part, err := s.partial.Sub(s.partOff[i], s.partial.Len())
	if err != nil {
		return err
	}
	return kernels.HeatStepNorm(s.compute, next, cur, part, nx, r[0], r[1], r[2], r[3], s.r)
}

// exchange moves u's halos on stream st: pack the edge columns, swap rows
// and columns with the neighbours in one GroupP2P, unpack the columns.
func (s *solverT[T]) exchange(st *devmem.Stream, u devmem.Slice[T]) error {
	l, nx := s.l, s.l.nx()
	if l.left >= 0 {
		if err := kernels.PackColumn(st, s.sendL, u, nx, 1, 1, l.rows+1); err != nil {
			return err
		}
	}
	if l.right >= 0 {
		if err := kernels.PackColumn(st, s.sendR, u, nx, l.cols, 1, l.rows+1); err != nil {
			return err
		}
	}
	if ops := s.ops[s.cur]; len(ops) > 0 {
		if err := s.c.GroupP2P(ops, st); err != nil {
			return fmt.Errorf("solver: halo exchange: %w", err)
		}
	}
	if l.left >= 0 {
		if err := kernels.UnpackColumn(st, u, s.recvL, nx, 0, 1, l.rows+1); err != nil {
			return err
		}
	}
	if l.right >= 0 {
		if err := kernels.UnpackColumn(st, u, s.recvR, nx, l.cols+1, 1, l.rows+1); err != nil {
			return err
		}
	}
	return nil
}

// reduceResidual adds the step's partial sums in a fixed order on the
// device into localSum, on the compute stream; finishResidual adds the
// ranks' sums later.
func (s *solverT[T]) reduceResidual() error {
	if err := kernels.SumBlocks(s.compute, s.localSum, s.partial, s.scratch); err != nil {
		return err
	}
	s.residualPending = true
	s.st.Residuals++
	return nil
}

// finishResidual adds the ranks' sums of the pending residual step with
// AllReduce (one rank's sum is the total) and queues the total's copy to
// pinned memory, on st, which must already follow the step's SumBlocks.
func (s *solverT[T]) finishResidual(st *devmem.Stream) error {
	if !s.residualPending {
		return nil
	}
	s.residualPending = false
	sum := s.localSum
	if s.c.Size() > 1 {
		if err := comm.AllReduce(s.c, s.localSum, s.globalSum, comm.Sum, st); err != nil {
			return fmt.Errorf("solver: residual: %w", err)
		}
		sum = s.globalSum
	}
	if err := devmem.CopyN(s.residualHost, sum.Buffer(), 8, st); err != nil {
		return err
	}
	s.residualQueued = true
	return nil
}

// account adds a used timing pair's halo wait to the stats.
func (s *solverT[T]) account(tp *timingPair) error {
	if !tp.used {
		return nil
	}
	tp.used = false
	if err := tp.end.Synchronize(); err != nil {
		return err
	}
	if err := tp.start.Synchronize(); err != nil {
		return err
	}
	d, err := devmem.Elapsed(tp.start, tp.end)
	if err != nil {
		return err
	}
	if d > 0 {
		s.st.HaloWait += d
	}
	return nil
}

func (s *solverT[T]) gather(root int) ([]float64, error) {
	if s.closed {
		return nil, fmt.Errorf("solver: Gather after Close: %w", comm.ErrClosed)
	}
	size := s.c.Size()
	if root < 0 || root >= size {
		return nil, invalid("Gather to root %d of %d ranks", root, size)
	}
	cfg := s.cfg
	// The float64 field and the blocks copied to the host, at the root; every
	// rank refuses alike, before the collective.
	if err := hostGridFits("Gather", cfg.N, cfg.M, 8+cfg.DType.Size()); err != nil {
		return nil, err
	}
	blockLen := ceilDiv(cfg.N-2, cfg.Px) * ceilDiv(cfg.M-2, cfg.Py)
	block, err := devmem.AllocSlice[T](s.dev, blockLen)
	if err != nil {
		return nil, err
	}
	defer block.Free()
	if err := s.pack(block); err != nil {
		return nil, err
	}
	var all devmem.Slice[T]
	if s.c.Rank() == root {
		if all, err = devmem.AllocSlice[T](s.dev, size*blockLen); err != nil {
			return nil, err
		}
		defer all.Free()
	}
	if err := comm.Gather(s.c, block, all, root, s.compute); err != nil {
		return nil, fmt.Errorf("solver: gather: %w", err)
	}
	if err := s.compute.Synchronize(); err != nil {
		return nil, err
	}
	if s.c.Rank() != root {
		return nil, nil
	}
	blocks, err := all.ToHost(s.compute)
	if err != nil {
		return nil, err
	}
	field := make([]float64, cfg.N*cfg.M)
	for i := range cfg.N {
		for j := range cfg.M {
			if i == 0 || j == 0 || i == cfg.N-1 || j == cfg.M-1 {
				field[i*cfg.M+j] = float64(T(cfg.initial(i, j)))
			}
		}
	}
	for r := range size {
		rl := newLayout(cfg, r)
		for i := range rl.rows {
			off := r*blockLen + i*rl.cols
			for j, v := range blocks[off : off+rl.cols] {
				field[(rl.row0+i)*cfg.M+rl.col0+j] = float64(v)
			}
		}
	}
	return field, nil
}

// pack queues on the compute stream the copy of the cells this rank owns,
// row after row, into the first rows×cols elements of block.
func (s *solverT[T]) pack(block devmem.Slice[T]) error {
	l := s.l
	cur, nx := s.u[s.cur], l.nx()
	for i := range l.rows {
		src, err := cur.Sub((i+1)*nx+1, (i+1)*nx+1+l.cols)
		if err != nil {
			return err
		}
		dst, err := block.Sub(i*l.cols, (i+1)*l.cols)
		if err != nil {
			return err
		}
		if err := devmem.Copy(dst.Buffer(), src.Buffer(), s.compute); err != nil {
			return err
		}
	}
	return nil
}

func (s *solverT[T]) close() error {
	if s.closed {
		return fmt.Errorf("solver: closed twice: %w", comm.ErrClosed)
	}
	s.closed = true
	return s.release()
}

func (s *solverT[T]) release() error {
	var errs []error
	for _, st := range []*devmem.Stream{s.compute, s.exch} {
		if st != nil {
			errs = append(errs, st.Synchronize())
		}
	}
	for _, x := range []devmem.Slice[T]{s.u[0], s.u[1], s.sendL, s.sendR, s.recvL, s.recvR} {
		if !x.Buffer().IsZero() {
			errs = append(errs, x.Free())
		}
	}
	for _, x := range []devmem.Slice[float64]{s.partial, s.scratch, s.localSum, s.globalSum} {
		if !x.Buffer().IsZero() {
			errs = append(errs, x.Free())
		}
	}
	if !s.residualHost.IsZero() {
		errs = append(errs, s.residualHost.Free())
	}
	events := []*devmem.Event{s.computeDone, s.haloReady}
	for _, tp := range s.timing {
		events = append(events, tp.start, tp.end)
	}
	for _, e := range events {
		if e != nil {
			errs = append(errs, e.Destroy())
		}
	}
	if s.exch != nil && s.exch != s.compute {
		errs = append(errs, s.exch.Destroy())
	}
	if s.compute != nil {
		errs = append(errs, s.compute.Destroy())
	}
	return errors.Join(errs...)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
