package mpicomm

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/devhook"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/nodepath"
)

// op is one running operation.
type op struct {
	c        *Comm // whose operation it is
	call     driver.Call
	seq      uint64        // the collective's ticket; 0 for point-to-point
	deadline time.Time     // zero: no timeout
	recv     devmem.Buffer // where a direct ReduceScatter has MPI write
	// crowd is set when the operation's transfers, counted on each of the
	// node's ranks, outnumber the CPUs (crowded; move sets it before it
	// starts them, and never clears it): their waits poll (waitCrowded)
	// instead of each blocking a thread in MPI.
	crowd bool
}

func (c *Comm) newOp(call driver.Call, seq uint64) *op {
	o := &op{c: c, call: call, seq: seq}
	if c.timeout > 0 {
		o.deadline = time.Now().Add(c.timeout)
	}
	return o
}

func (c *Comm) fail(operation driver.Operation, sentinel error, format string, args ...any) error {
	return driver.Errorf(c.backend, operation.String(), c.rank, sentinel, format, args...)
}

func (c *Comm) wrap(operation driver.Operation, err error) error {
	return driver.Wrap(c.backend, operation.String(), c.rank, err)
}

// usable is Front's check before the arguments: a closed or broken
// communicator takes no call. collectiveNow checks again under the lock it
// takes its ticket with.
func (c *Comm) usable() error {
	if !c.unusable.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usableLocked()
}

// usableLocked is Usable, with c.mu held.
func (c *Comm) usableLocked() error {
	switch {
	case c.closed:
		return comm.ErrClosed
	case c.broken != nil:
		return fmt.Errorf("communicator is broken by an earlier failure: %w", c.broken)
	}
	return nil
}

// limit refuses what MPI cannot take in one call, as the strategy says.
func (c *Comm) limit(call driver.Call) error { return c.strat.limit(c, call) }

// limit is the direct strategy's Limit: device pointers go to MPI whole, and
// MPI's counts are C ints.
func (directStrategy) limit(c *Comm, call driver.Call) error {
	if !c.direct(call) {
		return nil
	}
	n := int64(call.Count)
	switch call.Operation {
	case driver.OpAllGather, driver.OpReduceScatter, driver.OpAllToAll, driver.OpGather, driver.OpScatter:
		n *= int64(c.size)
	}
	for _, p := range call.P2P {
		n = max(n, int64(p.Count))
	}
	if n > math.MaxInt32 {
		return fmt.Errorf("%d elements in one MPI call exceed MPI's int count; the mpi backend chunks such transfers: %w", n, comm.ErrInvalidArgument)
	}
	return nil
}

// dispatch runs a call that Front checked: a collective in ticket order, in
// Direct mode on device pointers where the call goes direct, else through
// the host-staged pipeline; transfers numbered now, in call order.
func (c *Comm) dispatch(call driver.Call) error { return c.dispatchFlight(call, driver.Flight{}) }

// dispatchFlight is dispatch reporting to the flight recorder when a stream-ordered
// call starts and ends (Front records a call on no stream itself).
func (c *Comm) dispatchFlight(call driver.Call, fl driver.Flight) error {
	switch call.Operation {
	case driver.OpAllReduce:
		return c.either(call, fl, (*Comm).directAllReduce, (*Comm).nodeAllReduce)
	case driver.OpReduce:
		return c.either(call, fl, (*Comm).directReduce, (*Comm).nodeReduce)
	case driver.OpBroadcast:
		return c.either(call, fl, (*Comm).directBroadcast, (*Comm).nodeBroadcast)
	case driver.OpAllGather:
		return c.either(call, fl, (*Comm).directAllGather, (*Comm).nodeBlockColl)
	case driver.OpReduceScatter:
		return c.either(call, fl, (*Comm).directReduceScatter, (*Comm).nodeReduceScatter)
	case driver.OpAllToAll:
		return c.either(call, fl, (*Comm).directAllToAll, (*Comm).nodeBlockColl)
	case driver.OpGather:
		return c.either(call, fl, (*Comm).directGather, (*Comm).nodeBlockColl)
	case driver.OpScatter:
		return c.either(call, fl, (*Comm).directScatter, (*Comm).nodeBlockColl)
	case driver.OpBarrier:
		return c.collective(call, fl, (*Comm).barrier)
	case driver.OpSend, driver.OpRecv, driver.OpGroupP2P:
		var one [1]comm.P2P
		return c.pointToPoint(call, fl, driver.Transfers(call, &one))
	}
	return c.fail(call.Operation, comm.ErrUnsupported, "no such data operation")
}

// direct reports whether the call hands device pointers to MPI, as the
// strategy says.
func (c *Comm) direct(call driver.Call) bool { return c.strat.direct(c, call) }

// direct is the direct strategy's: every call, except float16 and bfloat16
// reductions, whose MPI ops run on the host, 8-bit sums that must be
// widened on the host, and reductions of StageReduceBytes or more.
func (directStrategy) direct(c *Comm, call driver.Call) bool {
	return !(call.Reduces() && (halfPrecision(call.DType) || c.widened(call) || c.stagesReduction(call)))
}

// defaultStageReduceBytes is where Direct mode's reductions start to go
// through the host-staged pipeline by default, with Open MPI 4 on a GPU: on
// an H200 its CUDA-aware reductions of device memory took 1.5-7 times as
// long as the pipeline from 16 KiB up with 2 ranks, and up to 4 times with
// 4 (docs/PERFORMANCE.md); below 64 KiB the two were close, and MPI's own
// call keeps the small ones' latency.
const defaultStageReduceBytes = 64 << 10

// stagesReduction reports whether a reduction that would go direct is
// large enough to go through the host-staged pipeline instead: the whole
// array's bytes (all ranks' blocks for ReduceScatter) reach stageReduce.
func (c *Comm) stagesReduction(call driver.Call) bool {
	if c.stageReduce <= 0 {
		return false
	}
	n := int64(call.Count) * int64(call.DType.Size())
	if call.Operation == driver.OpReduceScatter {
		n *= int64(c.size)
	}
	return n >= int64(c.stageReduce)
}

// StageReduceBytes is the size from which reductions go through the
// host-staged pipeline in Direct mode, as the ranks agreed; 0 when every
// reduction of a supported type goes to MPI on device pointers.
func (c *Comm) StageReduceBytes() int { return c.stageReduce }

// StagedReductions counts the calls of reductions that this rank sent to
// the host-staged pipeline in Direct mode only because of their size
// (StageReduceBytes), calls then refused as invalid or closed included.
func (c *Comm) StagedReductions() int64 { return c.stagedReductions.Load() }

// widened reports whether the call's reduction runs widened to int32
// because MPI's 8-bit sums saturate.
func (c *Comm) widened(call driver.Call) bool {
	return c.widenBytes && (call.DType == comm.Int8 || call.DType == comm.Uint8) && (call.Op == comm.Sum || call.Op == comm.Avg)
}

// begin counts an operation that has started running, so that Close waits
// for it; it fails once the communicator is closed.
func (c *Comm) begin() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("communicator was closed before the operation ran: %w", comm.ErrClosed)
	}
	c.running++
	return nil
}

// beginUnbroken is begin, failing also on a broken communicator, under one
// lock.
func (c *Comm) beginUnbroken() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return fmt.Errorf("communicator was closed before the operation ran: %w", comm.ErrClosed)
	case c.broken != nil:
		return fmt.Errorf("communicator is broken by an earlier failure: %w", c.broken)
	}
	c.running++
	return nil
}

func (c *Comm) end() {
	c.mu.Lock()
	c.running--
	c.cond.Broadcast()
	c.mu.Unlock()
}

// setBroken records the first reason the ranks went out of step.
func (c *Comm) setBroken(err error) {
	c.mu.Lock()
	if c.broken == nil {
		c.broken = err
		c.unusable.Store(true)
	}
	c.mu.Unlock()
}

// awaitTurn waits until the collective with ticket seq-1 has finished, so
// that MPI sees this rank's collectives in call order whichever stream
// (goroutine) runs them.
func (c *Comm) awaitTurn(seq uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.turn != seq-1 && !c.closed {
		c.cond.Wait()
	}
	if c.turn != seq-1 {
		return fmt.Errorf("communicator was closed while collective #%d waited for its turn: %w", seq, comm.ErrClosed)
	}
	return nil
}

func (c *Comm) passTurn(seq uint64) {
	c.mu.Lock()
	c.turn = seq
	c.cond.Broadcast()
	c.mu.Unlock()
}

// enqueue runs fn in stream order on the call's stream, given the failure
// of the stream's work before it, if any (devhook.HostCall: fn runs even
// then, and must give up what it holds); fn sets ran first thing. An
// operation that can never run after it took its ticket or its message
// numbers leaves this rank out of step: the communicator is broken, and
// the ticket is passed on so that later collectives fail instead of
// waiting.
func (c *Comm) enqueue(call driver.Call, seq uint64, fn func(before error) error, ran *atomic.Bool) error {
	return c.queued(call, seq, devhook.HostCall(call.Stream, fn), ran)
}

// queued is enqueue's end, given what queueing the call on its stream
// returned: a call that could not be queued (and so never ran) breaks the
// communicator and, holding a ticket, passes its turn.
func (c *Comm) queued(call driver.Call, seq uint64, err error, ran *atomic.Bool) error {
	if err != nil && !ran.Load() {
		c.setBroken(fmt.Errorf("%v could not be queued on its stream (%v); this rank is out of step with the others", call.Operation, err))
		if seq > 0 {
			go func() {
				if c.awaitTurn(seq) == nil {
					c.passTurn(seq)
				}
			}()
		}
		return c.wrap(call.Operation, err)
	}
	return err
}

// collective takes the call's ticket now and runs body in stream order (on
// no stream at once, on the calling goroutine), in ticket order, after the
// Timeout announcement and the Debug check. body is a method expression, so
// that no closure is made per call.
func (c *Comm) collective(call driver.Call, fl driver.Flight, body func(*Comm, *op) error) error {
	if call.Stream == nil {
		return c.collectiveNow(call, body)
	}
	q, _ := queuedPool.Get().(*queuedCollective)
	if q == nil {
		q = new(queuedCollective)
		q.fn = q.run
	}
	q.c, q.call, q.seq, q.fl, q.body = c, call, c.tickets.Add(1), fl, body
	q.ran.Store(false)
	q.refs.Store(2) // this call's and the stream task's
	err := c.enqueue(call, q.seq, q.fn, &q.ran)
	q.release()
	return err
}

// queuedCollective is a collective queued on its stream: what it runs
// with, and its run bound once as fn, reused through queuedPool, so that a
// stream-ordered collective allocates nothing (a closure would take three
// allocations, a fresh queuedCollective and its method value two: on a
// small collective the allocations and their collection cost about a fifth
// of the call).
type queuedCollective struct {
	c    *Comm
	call driver.Call
	seq  uint64
	fl   driver.Flight
	body func(*Comm, *op) error
	ran  atomic.Bool
	fn   func(before error) error // run, bound when made
	// refs counts who still reads this: the enqueuing call (until enqueue
	// returns, which reads ran) and the stream task (until run returns).
	// The last to let go clears it and puts it back in queuedPool; one
	// that was never queued (HostCall refused it) is left to the collector.
	refs atomic.Int32
}

var queuedPool sync.Pool

func (q *queuedCollective) run(before error) error {
	q.ran.Store(true)
	q.fl.Started()
	var err error
	if before != nil {
		err = q.c.skipTicket(q.call, q.seq, before)
	} else {
		err = q.c.runTicket(q.call, q.seq, q.body)
	}
	q.fl.Ended(err)
	q.release()
	return err
}

// release lets go of q, putting it back in queuedPool after the last one,
// with nothing of the caller's left reachable.
func (q *queuedCollective) release() {
	if q.refs.Add(-1) == 0 {
		q.c, q.call, q.fl, q.body = nil, driver.Call{}, driver.Flight{}, nil
		queuedPool.Put(q)
	}
}

// collectiveNow runs a collective on no stream on the caller's goroutine:
// what check, begin, awaitTurn and brokenErr do, under one lock, and what
// passTurn and end do, under another (a small collective pays for each
// lock, docs/PERFORMANCE.md).
func (c *Comm) collectiveNow(call driver.Call, body func(*Comm, *op) error) error {
	c.mu.Lock()
	if err := c.usableLocked(); err != nil {
		c.mu.Unlock()
		return c.wrap(call.Operation, err)
	}
	seq := c.tickets.Add(1)
	if err := c.waitTurnLocked(seq); err != nil {
		c.mu.Unlock()
		return c.wrap(call.Operation, err)
	}
	c.mu.Unlock()
	defer c.endTurn(seq)
	o := c.turnOp(call, seq)
	return c.finish(o, c.runCollective(o, body))
}

// waitTurnLocked counts collective seq as running and waits, c.mu held,
// until the one before it has finished. When the communicator was closed
// meanwhile, or an earlier failure broke it, it returns that error instead,
// having passed the turn on and stopped counting the collective.
func (c *Comm) waitTurnLocked(seq uint64) error {
	c.running++
	for c.turn != seq-1 && !c.closed {
		c.cond.Wait()
	}
	if c.turn == seq-1 && c.broken == nil {
		return nil
	}
	err := fmt.Errorf("communicator was closed while collective #%d waited for its turn: %w", seq, comm.ErrClosed)
	if c.turn == seq-1 {
		err = fmt.Errorf("communicator is broken by an earlier failure: %w", c.broken)
		c.turn = seq
	}
	c.running--
	c.cond.Broadcast()
	return err
}

// endTurn is passTurn and end under one lock.
func (c *Comm) endTurn(seq uint64) {
	c.mu.Lock()
	c.current = op{} // keeps no buffer of the user's reachable
	c.turn = seq
	c.running--
	c.cond.Broadcast()
	c.mu.Unlock()
}

// turnOp is the op of collective seq, whose turn it is: without a timeout
// nothing outlives the collective's call (no MPI call runs aside, see
// block), so the communicator's one op serves each collective in turn and
// a collective allocates nothing; with one, the op is the collective's own.
func (c *Comm) turnOp(call driver.Call, seq uint64) *op {
	if c.timeout > 0 {
		return c.newOp(call, seq)
	}
	c.current = op{c: c, call: call, seq: seq}
	return &c.current
}

// notRun is why an operation queued on a stream whose work before it
// failed (before) did not run.
func notRun(call driver.Call, before error) error {
	return fmt.Errorf("%v was not run: the work queued before it on its stream failed (%w); this rank is out of step with the others", call.Operation, before)
}

// skipTicket is runTicket for a collective whose stream's work before it
// failed (before): it does not run (its inputs may never have been written,
// and the failure is the stream's to report), the other ranks run it
// without this one, so the communicator is broken, and its turn is passed
// on once it comes, so that later calls fail at once instead of waiting for
// it.
func (c *Comm) skipTicket(call driver.Call, seq uint64, before error) error {
	err := notRun(call, before)
	// The communicator breaks when the turn comes, not before: the
	// collectives ahead of this one, on streams of their own, still run.
	c.mu.Lock()
	c.running++
	for c.turn != seq-1 && !c.closed {
		c.cond.Wait()
	}
	if c.turn == seq-1 {
		if c.broken == nil {
			c.broken = err
			c.unusable.Store(true)
		}
		c.turn = seq
	}
	c.running--
	c.cond.Broadcast()
	c.mu.Unlock()
	return c.wrap(call.Operation, err)
}

// runTicket runs collective seq once the one before it has finished: what
// begin, awaitTurn and brokenErr do, under one lock, and what passTurn and
// end do, under another, as collectiveNow does.
func (c *Comm) runTicket(call driver.Call, seq uint64, body func(*Comm, *op) error) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.wrap(call.Operation, fmt.Errorf("communicator was closed before the operation ran: %w", comm.ErrClosed))
	}
	if err := c.waitTurnLocked(seq); err != nil {
		c.mu.Unlock()
		return c.wrap(call.Operation, err)
	}
	c.mu.Unlock()
	defer c.endTurn(seq)
	o := c.turnOp(call, seq)
	return c.finish(o, c.runCollective(o, body))
}

func (c *Comm) runCollective(o *op, body func(*Comm, *op) error) error {
	if c.announce {
		if err := c.ann.enter(o); err != nil {
			return err
		}
	}
	if c.debug {
		if err := c.agreeOnSignature(o); err != nil {
			return err
		}
	}
	if driver.Empty(o.call) {
		return nil // every rank gave count 0 (Debug checks it): nothing moves
	}
	return body(c, o)
}

// finish turns a timeout into the error that names who never arrived, and
// a failure of MPI itself (a peer died or cannot be reached) into one that
// names the peers it involved; either breaks the communicator. It makes
// every error a *comm.Error.
func (c *Comm) finish(o *op, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, comm.ErrTimeout):
		if o.seq > 0 {
			err = c.collectiveTimeout(o, err)
		}
		c.setBroken(err)
	case mpiFailed(err):
		err = c.mpiFailure(o, err)
		c.setBroken(err)
	}
	return c.wrap(o.call.Operation, err)
}

// mpiFailed reports whether err is MPI's own failure of a call or request
// (an *mpi.Error), not a bad argument it refused.
func mpiFailed(err error) bool {
	var e *mpi.Error
	return errors.As(err, &e) && !errors.Is(err, comm.ErrInvalidArgument)
}

// pointToPoint numbers the transfers now, in call order, and runs them in
// stream order: on no stream at once, on the calling goroutine; on a stream
// with nothing pending, in Direct mode, posted at once (p2pNow); else queued
// on the stream.
func (c *Comm) pointToPoint(call driver.Call, fl driver.Flight, ps []comm.P2P) error {
	// One transfer, the common case, numbers itself in arrays of the stack.
	var tag1 [1]int
	var turn1 [1]nodepath.Turn
	tags, turns := tag1[:0], turn1[:0]
	if len(ps) > 1 {
		tags, turns = make([]int, 0, len(ps)), make([]nodepath.Turn, 0, len(ps))
	}
	tags, turns = c.takeTags(ps, tags, turns)
	if call.Stream == nil {
		return c.runP2P(call, ps, tags, turns)
	}
	if c.orderedP2P(call, ps) {
		return c.p2pOrdered(call, fl, ps, tags)
	}
	if handled, err := c.p2pNow(call, fl, ps, tags); handled {
		return err
	}
	// The queued call outlives this frame (and the caller's slice).
	qps, qtags, qturns := slices.Clone(ps), slices.Clone(tags), slices.Clone(turns)
	var ran atomic.Bool
	err := c.enqueue(call, 0, func(before error) error {
		ran.Store(true)
		fl.Started()
		var err error
		if before != nil {
			// Not run: the peer waits for a message or a receive that
			// never comes, and the transfers' turns on the node path are
			// given up, so that later ones do not wait for them.
			err = notRun(call, before)
			c.setBroken(err)
			nodepath.Abandon(qturns, err)
			err = c.wrap(call.Operation, err)
		} else {
			err = c.runP2P(call, qps, qtags, qturns)
		}
		fl.Ended(err)
		return err
	}, &ran)
	if err != nil && !ran.Load() {
		nodepath.Abandon(qturns, err) // never queued: its turns on the node path never come
	}
	return err
}

// runP2P runs numbered transfers and waits for them.
func (c *Comm) runP2P(call driver.Call, ps []comm.P2P, tags []int, turns []nodepath.Turn) error {
	if err := c.beginUnbroken(); err != nil {
		nodepath.Abandon(turns, err)
		return c.wrap(call.Operation, err)
	}
	defer c.end()
	if c.direct(call) {
		o := op{c: c, call: call} // on the stack: nothing keeps it
		if c.timeout > 0 {
			o.deadline = time.Now().Add(c.timeout)
		}
		if p2pHasVMM(ps) {
			return c.finish(&o, c.bouncedP2P(&o, ps, tags))
		}
		return c.finish(&o, c.directP2P(&o, ps, tags))
	}
	o := c.newOp(call, 0)
	return c.finish(o, c.stagedP2P(o, ps, tags, turns))
}

// takeTags gives each transfer the next message number between this rank
// and its peer, in that direction, appended to tags; the number is its tag,
// so the k-th receive from a peer matches the k-th send, in whatever order
// the two sides' goroutines reach MPI. A message that goes the node path
// also gets its turn on the pair's ring, in the same order on both sides.
func (c *Comm) takeTags(ps []comm.P2P, tags []int, turns []nodepath.Turn) ([]int, []nodepath.Turn) {
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	for _, p := range ps {
		var t nodepath.Turn
		if bytes := p.Count * p.DType.Size(); !c.ipcFor(p.Peer, bytes) { // the IPC path needs no turn
			t, _ = c.nodeTurnFor(p.Peer, p.Kind == comm.SendKind, false, bytes)
		}
		turns = append(turns, t)
		seq := &c.recvSeq[p.Peer]
		if p.Kind == comm.SendKind {
			seq = &c.sendSeq[p.Peer]
		}
		tags = append(tags, int(*seq%tagSpace))
		*seq++
	}
	return tags, turns
}

// either runs call as a collective through direct (device pointers to MPI)
// when the call goes direct, else through staged.
func (c *Comm) either(call driver.Call, fl driver.Flight, direct, staged func(*Comm, *op) error) error {
	if c.orderedReduction(call) {
		return c.collectiveOrdered(call, fl, stagedBody(call))
	}
	if c.direct(call) {
		if hasVMM(call.Send, call.Recv) {
			return c.collective(call, fl, func(c *Comm, o *op) error { return c.bounced(o, direct) })
		}
		return c.collective(call, fl, direct)
	}
	if c.stagesReduction(call) && !halfPrecision(call.DType) && !c.widened(call) { // 0 unless the strategy stagesLarge
		c.stagedReductions.Add(1)
	}
	return c.collective(call, fl, staged)
}

// barrier is MPI_Ibarrier, waited on with the operation's timeout; without
// a timeout, where MPI lets other goroutines call it meanwhile, MPI_Barrier
// (which allocates no request).
func (c *Comm) barrier(o *op) error {
	if o.deadline.IsZero() && c.multiple {
		return c.coll.Barrier()
	}
	r, err := c.coll.Ibarrier()
	if err != nil {
		return err
	}
	return c.wait(o, []*mpi.Request{r})
}

// wait completes reqs within the operation's deadline. Without a timeout,
// and with MPI_THREAD_MULTIPLE, it blocks in MPI_Waitall, or, for a crowded
// operation's transfers, polls (waitCrowded); below that level internal/mpi
// serialises every call, so it polls (WaitTimeout) to leave MPI free for the
// goroutines whose messages these requests may need.
func (c *Comm) wait(o *op, reqs []*mpi.Request) error {
	if len(reqs) == 0 {
		return nil
	}
	if o.deadline.IsZero() {
		if c.multiple && o.crowd {
			return waitCrowded(reqs)
		}
		if c.multiple {
			return mpi.Waitall(reqs)
		}
		for {
			err := mpi.WaitTimeout(reqs, time.Hour)
			if !errors.Is(err, comm.ErrTimeout) {
				return err
			}
		}
	}
	return mpi.WaitTimeout(reqs, max(time.Until(o.deadline), time.Microsecond))
}

// waitCrowded waits for reqs by testing each (MPI_Test, which allocates
// nothing, where MPI_Testall's Go side does), yielding between rounds, for
// a transfer that waits beside others of its operation (a GroupP2P window,
// the blocks of an AllToAll or AllGather, one goroutine each) where the
// node's ranks have more such transfers than the node has CPUs (crowded).
// Each of them blocked in MPI_Waitall is an OS thread spinning in MPI's
// progress, the threads taking MPI's lock in turn, and one descheduled
// while it holds the lock stalls the others: on the 2-core CPU machine (host
// device, 2 ranks) an AllGather of 64 KiB took 4 ms, a scheduler time
// slice, where C's MPI loop took 8 µs. Polled, each test holds the lock
// briefly and the goroutines yield between tests; the waits still keep this
// process's GOMAXPROCS CPUs busy until they end, as the blocked threads kept
// theirs. It never sleeps: a first version that slept after 1 ms of polling
// took the 64 MiB windows of the IPC path on an H200 from 1713 to 1040 GB/s.
// The first error ends the wait, other requests perhaps still pending, as a
// timeout ends WaitTimeout's (the caller finds them with Testall).
func waitCrowded(reqs []*mpi.Request) error {
	for {
		all := true
		for _, r := range reqs {
			done, err := r.Test()
			if err != nil {
				return err
			}
			all = all && done
		}
		if all {
			return nil
		}
		runtime.Gosched()
	}
}

// crowded reports whether n transfers waiting at once on each of the
// communicator's ranks of this node are more than the CPUs this process may
// run on, a stand-in for the node's (where each rank is bound to its own
// share of the CPUs it counts too many; other communicators' and streams'
// calls are not counted).
func (c *Comm) crowded(n int) bool {
	return n > 1 && n*max(c.localSize, 1) > runtime.NumCPU()
}

// blockOp is block for one of the direct collectives' MPI calls, f(c, o):
// without a timeout it makes no closure.
func (c *Comm) blockOp(o *op, f func(*Comm, *op) error) error {
	if o.deadline.IsZero() {
		return f(c, o)
	}
	return c.block(o, func() error { return f(c, o) })
}

// block runs a blocking MPI call; with a timeout it runs it aside and gives
// up at the deadline, leaving the call in MPI (the communicator is then
// broken, and Close ends the job).
func (c *Comm) block(o *op, f func() error) error {
	if o.deadline.IsZero() {
		return f()
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	t := time.NewTimer(max(time.Until(o.deadline), time.Microsecond))
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("blocking MPI call still running after %v: %w", c.timeout, comm.ErrTimeout)
	}
}

// frontEngine is the communicator as driver.Front's Engine: the methods Front
// calls stay off the communicator's own exported API, so that no program
// can run a call past Front's checks.
type frontEngine struct{ c *Comm }

func (e frontEngine) Usable() error              { return e.c.usable() }
func (e frontEngine) Run(call driver.Call) error { return e.c.dispatch(call) }
func (e frontEngine) RunFlight(call driver.Call, fl driver.Flight) error {
	return e.c.dispatchFlight(call, fl)
}
func (e frontEngine) Limit(call driver.Call) error { return e.c.limit(call) }
