package nccl

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// Comm is one rank of an NCCL communicator.
type Comm struct {
	driver.Front
	lib         library
	boot        boot
	eng         engine
	dev         *devmem.Device
	rank, size  int
	version     int // NCCL's version code, read once when the library loaded
	localRank   int
	localSize   int
	debug       bool
	timeout     time.Duration
	own         *devmem.Stream // where nil-stream operations run
	barrierBuf  devmem.Buffer  // what Barrier reduces
	events      eventPool
	dog         *watchdog
	closedFlag  atomic.Bool
	failed      atomic.Pointer[failCause] // why the communicator failed; nil while it has not
	failCh      chan struct{}             // closed once failed is set
	abortGate   sync.Once
	abortDone   chan struct{} // closed once abort has returned
	abortErr    error
	handle      sync.RWMutex  // abort and destroy exclude the watchdog's asyncError
	gone        bool          // the NCCL handle was aborted or destroyed
	watchdogEnd chan struct{} // closed when the watchdog goroutine exits

	// mu serialises NCCL calls: an NCCL communicator is not thread-safe.
	mu     sync.Mutex
	closed bool
}

var _ comm.Communicator = (*Comm)(nil)

func newComm(o comm.Options, lib library, b boot, eng engine, dev *devmem.Device, lr, ls int) (*Comm, error) {
	own, err := dev.NewStream()
	if err != nil {
		return nil, driver.Errorf(Name, "Open", b.rank(), nil, "stream for nil-stream operations: %w", err)
	}
	bar, err := dev.Alloc(4)
	if err == nil {
		err = devmem.Memset(bar, 0, nil)
	}
	if err != nil {
		return nil, driver.Errorf(Name, "Open", b.rank(), nil, "Barrier's buffer: %w", errors.Join(err, own.Destroy(), freeIfAny(bar)))
	}
	c := &Comm{
		lib: lib, boot: b, eng: eng, dev: dev, rank: b.rank(), size: b.size(), version: lib.versionCode(), localRank: lr, localSize: ls,
		debug: o.Debug, timeout: o.Timeout, own: own, barrierBuf: bar, events: eventPool{dev: dev},
		failCh: make(chan struct{}), abortDone: make(chan struct{}), watchdogEnd: make(chan struct{}),
	}
	c.Front = driver.NewFront(driver.FrontConfig{Backend: Name, Rank: c.rank, Size: c.size, Device: dev, SkipEmpty: !o.Debug}, frontEngine{c})
	c.dog = newWatchdog(o.Timeout, time.Now)
	go c.watch()
	return c, nil
}

func freeIfAny(b devmem.Buffer) error {
	if b.IsZero() {
		return nil
	}
	return b.Free()
}

func (c *Comm) Rank() int              { return c.rank }
func (c *Comm) Size() int              { return c.size }
func (c *Comm) LocalRank() int         { return c.localRank }
func (c *Comm) LocalSize() int         { return c.localSize }
func (c *Comm) Backend() string        { return Name }
func (c *Comm) Device() *devmem.Device { return c.dev }

func (c *Comm) errorf(op driver.Operation, sentinel error, format string, args ...any) error {
	return driver.Errorf(Name, op.String(), c.rank, sentinel, format, args...)
}

// usable is Front's check that needs no lock; usableLocked checks again
// under c.mu.
func (c *Comm) usable() error {
	if c.closedFlag.Load() {
		return comm.ErrClosed
	}
	return nil
}

// dispatch runs a call that Front checked.
func (c *Comm) dispatch(call driver.Call) error { return c.dispatchFlight(call, driver.Flight{}) }

// dispatchFlight is dispatch reporting to the flight recorder: with a timeout set,
// the watchdog sees a stream-ordered operation's start and end events and
// reports them; without one no event is recorded (that would cost more
// than the record is allowed to), so the record says "queued".
func (c *Comm) dispatchFlight(call driver.Call, fl driver.Flight) error {
	switch call.Operation {
	case driver.OpAllReduce:
		return c.allReduce(&call, fl)
	case driver.OpReduce:
		return c.reduce(&call, fl)
	case driver.OpBroadcast:
		return c.broadcast(&call, fl)
	case driver.OpAllGather:
		return c.allGather(&call, fl)
	case driver.OpReduceScatter:
		return c.reduceScatter(&call, fl)
	case driver.OpAllToAll:
		return c.allToAll(call, fl)
	case driver.OpGather:
		return c.gather(call, fl)
	case driver.OpScatter:
		return c.scatter(call, fl)
	case driver.OpBarrier:
		return c.barrier(&call, fl)
	case driver.OpSend, driver.OpRecv, driver.OpGroupP2P:
		var one [1]comm.P2P
		return c.pointToPoint(call, driver.Transfers(call, &one), fl)
	}
	return c.errorf(call.Operation, comm.ErrUnsupported, "no such data operation")
}

// usableLocked returns why no NCCL call may be made now; c.mu is held.
func (c *Comm) usableLocked(op driver.Operation) error {
	if c.closed {
		return c.errorf(op, comm.ErrClosed, "communicator is closed")
	}
	if cause := c.failure(); cause != nil {
		c.abort()
		return c.errorf(op, nil, "the communicator was aborted after an earlier failure: %w", cause)
	}
	return nil
}

// signature compares the collective across ranks (Options.Debug) before
// NCCL sees it: a mismatch would hang there or corrupt data.
func (c *Comm) signature(call *driver.Call) error {
	if !c.debug {
		return nil
	}
	all, err := c.boot.allgather([]byte(call.Signature()))
	if err != nil {
		return c.errorf(call.Operation, nil, "comparing the call with the other ranks: %w", err)
	}
	if err := driver.CompareSignatures(*call, all); err != nil {
		return c.errorf(call.Operation, nil, "%w", err)
	}
	return nil
}

// collective queues call with enqueue (unless it moves no
// data) and, for a nil stream, waits for it.
func (c *Comm) collective(call *driver.Call, fl driver.Flight, enqueue func(s *devmem.Stream) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked(call.Operation); err != nil {
		return err
	}
	if err := c.signature(call); err != nil {
		return err
	}
	if driver.Empty(*call) {
		return nil // every rank has the same count, so every rank skips
	}
	return c.runLocked(call, fl, enqueue)
}

// runLocked queues one operation on its stream (the communicator's own for
// a nil stream) between events the timeout needs, then waits for it if the
// stream was nil. c.mu is held.
func (c *Comm) runLocked(call *driver.Call, fl driver.Flight, enqueue func(s *devmem.Stream) error) error {
	s := call.Stream
	if s == nil {
		s = c.own
	}
	var start *devmem.Event
	if c.timeout > 0 {
		var err error
		if start, err = c.events.record(s); err != nil {
			return c.errorf(call.Operation, nil, "%s: %w", call.Signature(), err)
		}
		testHookAfterStart(s)
	}
	err := c.inNCCL(markOf(call), func() error { return enqueue(s) })
	if cause := c.failure(); cause != nil {
		c.events.put(start)
		c.abort()
		return c.errorf(call.Operation, nil, "%s: %w", call.Signature(), cause)
	}
	if err != nil {
		c.events.put(start)
		return c.errorf(call.Operation, nil, "%s: %w", call.Signature(), err)
	}
	if call.Stream != nil && c.timeout <= 0 {
		return nil // nothing to watch: stream-ordered, and no deadline
	}
	if c.timeout <= 0 {
		return c.waitOwn(call)
	}
	end, err := c.events.record(s)
	if err != nil {
		c.events.put(start)
		return c.errorf(call.Operation, nil, "%s was queued, but its end could not be marked: %w", call.Signature(), err)
	}
	// The operation's name is formatted only for an error: a signature
	// through fmt cost about as much as the rest of the call's host work.
	if call.Stream != nil {
		c.dog.track(&pendingOp{call: markOf(call), start: progressOf(start), end: end, events: &c.events, flight: fl})
		return nil
	}
	p := pendingOp{call: markOf(call), start: progressOf(start), end: end, events: &c.events, flight: fl}
	err = c.waitFor(&p, c.timeout)
	p.free()
	if errors.Is(err, errExpired) {
		c.fail(fmt.Errorf("%s did not finish within %v: %w", call.Signature(), c.timeout, comm.ErrTimeout))
	}
	if cause := c.failure(); cause != nil {
		c.abort()
		return c.errorf(call.Operation, nil, "%s: %w", call.Signature(), cause)
	}
	if err != nil {
		return c.errorf(call.Operation, nil, "%s: %w", call.Signature(), err)
	}
	// Errors of the work itself (a CUDA fault) surface here.
	if err := c.own.Synchronize(); err != nil {
		return c.errorf(call.Operation, nil, "%s: %w", call.Signature(), err)
	}
	return nil
}

// waitOwn waits for a call on no stream and no deadline: it synchronizes
// the communicator's own stream, where the call is the only work, rather
// than recording an event and synchronizing after it (on an H200 that took
// a one-rank 8 B AllReduce to 16 µs where NCCL from C took 6), and blocks
// in the driver rather than polling the stream (a poll that yields between
// queries found a one-rank AllReduce of 16 or 128 MiB done 2-3 µs after
// cuStreamSynchronize did, on an H100: BenchmarkGPUNilStreamWait). The
// wait counts as inside NCCL for the watchdog, so that a failure it finds
// (NCCL's asynchronous error: a peer gone) aborts the communicator, as for
// a call stuck in NCCL while it holds c.mu: the abort ends the
// communicator's kernels, and with them the wait, which then gives the
// failure. No NCCL call is under way in the wait, so the watchdog aborts
// at once (the mark says nameWaiting), not after the grace it leaves a call
// into NCCL that may yet return. A failure found by the time the wait ends
// is the call's error even where its work finished (as on the timed path:
// work an abort cut short may look finished), and stands for the wait's own
// error, which the abort may have caused. How the driver waits is CUDA's
// scheduling policy for the context (the primary context's default spins
// while the process has fewer active contexts than cores, as C's
// cuStreamSynchronize does).
func (c *Comm) waitOwn(call *driver.Call) error {
	m := markOf(call)
	m.what = nameWaiting
	err := c.inNCCL(m, c.own.Synchronize)
	if cause := c.failure(); cause != nil {
		c.abort()
		return c.errorf(call.Operation, nil, "%s: %w", call.Signature(), cause)
	}
	if err != nil {
		return c.errorf(call.Operation, nil, "%s: %w", call.Signature(), err)
	}
	return nil
}

// testHookAfterStart lets a GPU test stall a stream inside an operation's
// timed window (a timeout set), where only a hung NCCL kernel would
// otherwise be.
var testHookAfterStart = func(*devmem.Stream) {}

func (c *Comm) allReduce(call *driver.Call, fl driver.Flight) error {
	send, recv, count, dt, op := call.Send, call.Recv, call.Count, call.DType, call.Op
	p := c.planAvg(dt, op, count, send.Same(recv))
	return c.collective(call, fl, func(s *devmem.Stream) error {
		from, err := p.source(send, recv, count, dt, s)
		if err != nil {
			return err
		}
		if err := c.eng.allReduce(from, recv, count, dt, p.op, s); err != nil || !p.scale {
			return err
		}
		return c.divide(recv, count, dt, s)
	})
}

func (c *Comm) reduce(call *driver.Call, fl driver.Flight) error {
	send, recv, count, dt, op, root := call.Send, call.Recv, call.Count, call.DType, call.Op, call.Root
	if c.rank != root {
		recv = devmem.Buffer{} // unused, and maybe unchecked: NCCL gets NULL
	}
	p := c.planAvg(dt, op, count, c.rank != root || send.Same(recv))
	return c.collective(call, fl, func(s *devmem.Stream) error {
		from, err := p.source(send, recv, count, dt, s) // the root's copy, where NCCL writes the output
		if err != nil {
			return err
		}
		if err := c.eng.reduce(from, recv, count, dt, p.op, root, s); err != nil || !p.scale {
			return err
		}
		return c.divide(recv, count, dt, s) // the root's; nothing elsewhere
	})
}

func (c *Comm) broadcast(call *driver.Call, fl driver.Flight) error {
	send, recv, count, dt, root := call.Send, call.Recv, call.Count, call.DType, call.Root
	if c.rank != root {
		send = devmem.Buffer{}
	}
	return c.collective(call, fl, func(s *devmem.Stream) error { return c.eng.broadcast(send, recv, count, dt, root, s) })
}

func (c *Comm) allGather(call *driver.Call, fl driver.Flight) error {
	send, recv, count, dt := call.Send, call.Recv, call.Count, call.DType
	return c.collective(call, fl, func(s *devmem.Stream) error { return c.eng.allGather(send, recv, count, dt, s) })
}

func (c *Comm) reduceScatter(call *driver.Call, fl driver.Flight) error {
	send, recv, count, dt, op := call.Send, call.Recv, call.Count, call.DType, call.Op
	p := c.planAvg(dt, op, count, send.Overlaps(recv))
	if p.copyFirst && c.size > 1 {
		// In place, recv is this rank's block of send: no copy makes an out
		// of place call one. Not measured on several ranks (one GPU there):
		// NCCL's own Avg (comm/nccl/doc.go).
		p.copyFirst = false
	}
	return c.collective(call, fl, func(s *devmem.Stream) error {
		from, err := p.source(send, recv, count, dt, s) // one rank: recv is the whole of send's one block
		if err != nil {
			return err
		}
		if err := c.eng.reduceScatter(from, recv, count, dt, p.op, s); err != nil || !p.scale {
			return err
		}
		return c.divide(recv, count, dt, s)
	})
}

// barrier is a one-byte AllReduce (Max) of a buffer of the communicator's
// own: NCCL has no barrier, and a reduction cannot finish anywhere before
// every rank has joined it.
func (c *Comm) barrier(call *driver.Call, fl driver.Flight) error {
	return c.collective(call, fl, func(s *devmem.Stream) error {
		return c.eng.allReduce(c.barrierBuf, c.barrierBuf, 1, comm.Uint8, comm.Max, s)
	})
}

// Wait blocks until the work queued on s so far is done, as s.Synchronize
// does, but returns early with the communicator's failure: ErrTimeout once an
// operation ran past Options.Timeout, or NCCL's asynchronous error. Use it
// where s.Synchronize could wait forever for a peer that is gone. A nil s
// has nothing queued.
func (c *Comm) Wait(s *devmem.Stream) error {
	const op = "Wait"
	if c.closedFlag.Load() {
		return driver.Errorf(Name, op, c.rank, comm.ErrClosed, "communicator is closed")
	}
	if err := s.Check(c.dev); err != nil {
		return driver.Wrap(Name, op, c.rank, err)
	}
	if cause := c.failure(); cause != nil {
		return driver.Errorf(Name, op, c.rank, nil, "the communicator was aborted after an earlier failure: %w", cause)
	}
	if s == nil {
		return nil
	}
	end, err := c.events.record(s)
	if err != nil {
		return driver.Wrap(Name, op, c.rank, err)
	}
	err = c.waitFor(&pendingOp{what: op, end: end}, 0)
	c.events.put(end)
	if cause := c.failure(); cause != nil {
		// Work the abort cut short may look finished: the failure is the news.
		return driver.Errorf(Name, op, c.rank, nil, "the communicator failed: %w", cause)
	}
	if err != nil {
		return driver.Wrap(Name, op, c.rank, err)
	}
	if err := s.Synchronize(); err != nil {
		return driver.Wrap(Name, op, c.rank, err)
	}
	return nil
}

// Split makes the new communicators with ncclCommSplit when every rank's
// NCCL has it (2.18 and later), else with a unique id of their own sent by
// MPI_Bcast within MPI_Comm_split's communicator; the MPI communicator is
// split either way, for the new communicator's bootstrap and local ranks.
func (c *Comm) Split(color, key int) (comm.Communicator, error) {
	call := driver.Call{Operation: driver.OpSplit}
	if err := c.Check(call); err != nil {
		return nil, err
	}
	bad := driver.SplitRefusal(color, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked(driver.OpSplit); err != nil {
		return nil, err
	}
	// The ranks first tell each other whether each can split, so that a bad
	// color or key on one rank fails every rank, where the others would
	// wait in MPI_Comm_split for it.
	all, err := c.boot.allgather([]byte(bad))
	if err != nil {
		return nil, c.errorf(driver.OpSplit, nil, "telling the ranks whether each can split: %w", err)
	}
	if err := driver.SplitRefusals(all); err != nil {
		return nil, c.errorf(driver.OpSplit, nil, "%w", err)
	}
	nb, err := c.boot.split(color, key)
	if err != nil {
		return nil, c.errorf(driver.OpSplit, nil, "MPI_Comm_split: %w", err)
	}
	sub, err := c.splitEngine(nb, color, key)
	if err != nil {
		if nb != nil {
			err = errors.Join(err, nb.free(true))
		}
		return nil, err
	}
	if nb == nil {
		return nil, nil
	}
	return sub, nil
}

// useCommSplit lets a test take the fallback on an NCCL that has
// ncclCommSplit.
var useCommSplit = true

func (c *Comm) splitEngine(nb boot, color, key int) (*Comm, error) {
	can := []byte{0}
	if useCommSplit && c.eng.canSplit() {
		can[0] = 1
	}
	all, err := c.boot.allgather(can)
	if err != nil {
		return nil, c.errorf(driver.OpSplit, nil, "asking the ranks for ncclCommSplit: %w", err)
	}
	native := true
	for _, a := range all {
		native = native && len(a) == 1 && a[0] == 1
	}
	var eng engine
	if native {
		ncolor := color
		if color == comm.Undefined {
			ncolor = noColor
		}
		err = c.inNCCL(callMark{what: nameSplit}, func() error {
			var err error
			eng, err = c.eng.split(ncolor, key)
			return err
		})
		if cause := c.failure(); cause != nil {
			return nil, c.errorf(driver.OpSplit, nil, "ncclCommSplit: %w", cause)
		}
		err = agree(c.boot, "Split", err)
	} else {
		var ierr error
		if nb != nil {
			eng, ierr = initOn(nb, c.lib, c.dev, "Split")
		}
		// Ranks left out, and the other new communicators, learn of a failure too.
		err = agree(c.boot, "Split", ierr)
	}
	if err != nil {
		if eng != nil {
			err = errors.Join(err, eng.destroy())
		}
		return nil, err
	}
	if nb == nil {
		if eng != nil {
			return nil, c.errorf(driver.OpSplit, nil, "ncclCommSplit made a communicator for a rank left out: %w", eng.destroy())
		}
		return nil, nil
	}
	lr, ls, err := nb.localRankSize()
	if err == nil {
		var sub *Comm
		sub, err = newComm(comm.Options{Debug: c.debug, Timeout: c.timeout}, c.lib, nb, eng, c.dev, lr, ls)
		if err == nil {
			return sub, nil
		}
	}
	return nil, c.errorf(driver.OpSplit, nil, "%w", errors.Join(err, eng.destroy()))
}

// noColor is NCCL_SPLIT_NOCOLOR.
const noColor = -1

// Close finalises the NCCL communicator and destroys it (or, after a
// failure, makes sure it was aborted), then frees what the communicator
// owns and its hold on MPI. Every rank must call it.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return driver.Errorf(Name, "Close", c.rank, comm.ErrClosed, "closed twice")
	}
	c.closed = true
	c.closedFlag.Store(true)
	var errs []error
	if c.failure() == nil {
		// The watchdog still runs, so a finalize stuck on a peer is aborted.
		err := c.inNCCL(callMark{what: nameClose}, c.eng.finalize)
		// ErrUnsupported: an NCCL before 2.14, whose destroy flushes instead.
		// After a failure the abort below reports instead.
		if err != nil && !errors.Is(err, comm.ErrUnsupported) && c.failure() == nil {
			errs = append(errs, err)
		}
	}
	c.dog.stop()
	<-c.watchdogEnd
	if c.failure() != nil {
		c.abort()
		errs = append(errs, c.abortErr)
	} else {
		c.handle.Lock()
		c.gone = true
		errs = append(errs, c.eng.destroy())
		c.handle.Unlock()
	}
	for _, p := range c.dog.drain() {
		p.free()
	}
	ownErr := c.own.Destroy()
	if c.failure() != nil {
		ownErr = nil // the aborted work's own errors; the failure was reported
	}
	errs = append(errs, c.barrierBuf.Free(), ownErr, c.events.destroy(), c.boot.free(false))
	if err := errors.Join(errs...); err != nil {
		return driver.Errorf(Name, "Close", c.rank, nil, "%w", err)
	}
	return nil
}

// Abort gives up on the job of a rank that cannot go on (comm.Aborter): it
// says why on standard error (and writes the flight records, with
// recording on), marks the communicator failed, and calls MPI_Abort, which
// ends every process of the job, this one included, and with them the
// NCCL kernels of the ranks waiting for this one. It does not return, and
// takes no lock: it works while another goroutine of this rank is inside
// NCCL. NCCL's own communicator is not aborted first: the processes' end
// releases it, where ncclCommAbort could itself wait on a peer.
func (c *Comm) Abort(reason error) {
	if c == nil {
		return
	}
	if reason == nil {
		reason = errors.New("no reason given")
	}
	fmt.Fprintf(os.Stderr, "gpucomm %s rank %d: Abort: %v: calling MPI_Abort, which ends every process of the job\n", Name, c.rank, reason)
	driver.ReportTraces("Abort: " + reason.Error())
	c.fail(fmt.Errorf("this rank aborted the job: %w (%w)", reason, comm.ErrAborted))
	// The launcher forwards output asynchronously, and MPICH's stops
	// forwarding once a rank aborts: give it a moment to pass on why.
	time.Sleep(abortGrace)
	c.boot.abortJob()
}

// abortGrace is how long Abort waits between saying why it aborts and
// MPI_Abort.
const abortGrace = 200 * time.Millisecond

// frontEngine is the communicator as driver.Front's Engine: the methods Front
// calls stay off the communicator's own exported API, so that no program
// can run a call past Front's checks.
type frontEngine struct{ c *Comm }

func (e frontEngine) Usable() error              { return e.c.usable() }
func (e frontEngine) Run(call driver.Call) error { return e.c.dispatch(call) }
func (e frontEngine) RunFlight(call driver.Call, fl driver.Flight) error {
	return e.c.dispatchFlight(call, fl)
}

// The extra programs find by type assertion (comm/extras.go).
var (
	_ comm.StreamWaiter = (*Comm)(nil)
	_ comm.Aborter      = (*Comm)(nil)
)
