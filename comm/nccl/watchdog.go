package nccl

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// How a communicator fails, and who aborts it.
//
// A failure (a timeout, or an error NCCL reports asynchronously) is recorded
// once, before anything is aborted, so that every later call sees it and
// makes no NCCL call. The NCCL handle is then aborted exactly once, by
// whoever can do it without racing an NCCL call on the same handle: the
// caller holding c.mu, or the watchdog when c.mu is free. The one exception
// is a call stuck inside NCCL (waiting for a peer that never comes): only an
// abort from another goroutine can free it, so the watchdog aborts while it
// is inside, which is what ncclCommAbort is for.

// progress is a point in a stream's work: a *devmem.Event in production.
type progress interface{ Done() (bool, error) }

func progressOf(e *devmem.Event) progress {
	if e == nil {
		return nil // not a typed nil inside the interface
	}
	return e
}

// errExpired says an operation ran past its deadline.
var errExpired = errors.New("deadline passed")

// pendingOp is one operation queued on a stream, between two points.
type pendingOp struct {
	what    string        // names the operation when call does not (Wait's, tests')
	call    callMark      // the operation: its name is formatted only for an error
	start   progress      // reached when the operation may begin; nil: at once
	end     progress      // reached when it has finished
	started time.Time     // when start was first seen reached
	release func()        // called when it is freed; nil when there is nothing to call
	events  *eventPool    // where start and end go back when it is freed, when they are its events
	flight  driver.Flight // told when start is seen reached and when the operation ends
}

// name names the operation in errors.
func (p *pendingOp) name() string {
	if p.call.sig.op != 0 {
		return p.call.name()
	}
	return p.what
}

// free gives p's points back once nothing waits for them.
func (p *pendingOp) free() {
	if p.release != nil {
		p.release()
	}
	if p.events != nil {
		for _, pt := range [...]progress{p.start, p.end} {
			if e, ok := pt.(*devmem.Event); ok {
				p.events.put(e)
			}
		}
	}
}

// poll reports whether p has finished. Its clock starts at the first poll
// that finds start reached, so time spent behind earlier work on the
// stream does not count; it returns errExpired once it has run longer than
// timeout (0: never).
func (p *pendingOp) poll(now time.Time, timeout time.Duration) (bool, error) {
	if done, err := p.end.Done(); done || err != nil {
		return done, err
	}
	if timeout <= 0 {
		return false, nil
	}
	if p.started.IsZero() {
		if p.start != nil {
			if ok, err := p.start.Done(); !ok || err != nil {
				return false, err
			}
		}
		p.started = now
		p.flight.Started()
	}
	if now.Sub(p.started) > timeout {
		return false, errExpired
	}
	return false, nil
}

// callMark is an NCCL call in progress on the host: an operation (what its
// signature is made of, formatted only if the watchdog reports it), or
// another call named by what. It holds no buffer and no time, so that
// marking a call moves nothing to the heap and reads no clock.
type callMark struct {
	what callName
	sig  signature
}

// callName names an NCCL call that is not an operation.
type callName uint8

const (
	nameOperation callName = iota // the mark's signature says what it is
	nameSplit
	nameClose
	// nameWaiting: the operation its signature names is in NCCL's hands
	// and its caller waits for its stream (no call into NCCL is under
	// way), which an abort ends at once without racing one.
	nameWaiting
)

var callNames = [...]string{"an operation", "Split", "Close", "an operation's wait"}

func (n callName) String() string {
	if int(n) >= len(callNames) {
		return "NCCL call " + strconv.Itoa(int(n))
	}
	return callNames[n]
}

// signature is what Call.Signature reads. A GroupP2P's count is its
// number of transfers (its own Count is unused), so that its name says
// "GroupP2P(transfers=N)" as Call.Signature does.
type signature struct {
	op    driver.Operation
	count int
	dt    driver.DType
	rop   driver.Op
	root  int
}

func markOf(call *driver.Call) callMark {
	count := call.Count
	if call.Operation == driver.OpGroupP2P {
		count = len(call.P2P)
	}
	return callMark{sig: signature{op: call.Operation, count: count, dt: call.DType, rop: call.Op, root: call.Root}}
}

func (m *callMark) name() string {
	if m.sig.op == driver.OpGroupP2P {
		// Only the list's length goes into the name (an error's path).
		return driver.Call{Operation: m.sig.op, P2P: make([]driver.P2P, max(m.sig.count, 0))}.Signature()
	}
	if m.sig.op != 0 {
		return driver.Call{Operation: m.sig.op, Count: m.sig.count, DType: m.sig.dt, Op: m.sig.rop, Root: m.sig.root}.Signature()
	}
	return m.what.String()
}

// kinds packs the mark's small fields in one word: what, and the
// operation, element type and reduction, 16 bits each (each is a small
// enumeration, checked before any NCCL call).
func (m *callMark) kinds() uint64 {
	return uint64(m.what) | uint64(uint16(m.sig.op))<<8 | uint64(uint16(m.sig.dt))<<24 | uint64(uint16(m.sig.rop))<<40
}

func (m *callMark) setKinds(k uint64) {
	m.what = callName(k)
	m.sig.op = driver.Operation(uint16(k >> 8))
	m.sig.dt = driver.DType(uint16(k >> 24))
	m.sig.rop = driver.Op(uint16(k >> 40))
}

// inCall is the NCCL call in progress, as the one goroutine that makes NCCL
// calls (the holder of the communicator's lock) tells the watchdog: a
// sequence lock of atomic words, written without a clock read or an
// allocation. state counts the calls' entries and returns (odd: a call is
// inside NCCL); the mark's words change only while it is even, and only
// where they differ from the last call's (a loop that repeats a
// stream-ordered collective writes none of them; one on no stream writes
// the kind twice, its call's and its wait's), so a reader that sees the
// same odd state before and after reading them has read the mark of that
// call.
type inCall struct {
	state atomic.Uint64
	kinds atomic.Uint64 // callMark.kinds
	count atomic.Int64
	root  atomic.Int64

	// The writer's own, under the communicator's lock.
	n    uint64 // state's value
	last callMark

	// The watchdog goroutine's own: the state it last saw inside NCCL, and
	// when it first saw it.
	seen   uint64
	seenAt time.Time
}

// enter marks m inside NCCL. Calls of enter and leave never overlap
// (the communicator's lock).
func (ic *inCall) enter(m *callMark) {
	if m.sig.count != ic.last.sig.count {
		ic.count.Store(int64(m.sig.count))
	}
	if m.sig.root != ic.last.sig.root {
		ic.root.Store(int64(m.sig.root))
	}
	if k := m.kinds(); k != ic.last.kinds() {
		ic.kinds.Store(k)
	}
	ic.last = *m
	ic.n++
	ic.state.Store(ic.n)
}

// leave marks the call entered last returned.
func (ic *inCall) leave() {
	ic.n++
	ic.state.Store(ic.n)
}

// inside reports, at now, whether a call is inside NCCL, which (its state,
// for mark), and for how long the watchdog has seen it there: since the
// first of its looks that found it, so never longer than it has been there,
// and at most a look's interval less. Only the watchdog calls it.
func (ic *inCall) inside(now time.Time) (state uint64, d time.Duration, ok bool) {
	s := ic.state.Load()
	if s&1 == 0 {
		return 0, 0, false
	}
	if s != ic.seen {
		ic.seen, ic.seenAt = s, now
	}
	return s, now.Sub(ic.seenAt), true
}

// mark is the mark of the call whose entry set state; false when that call
// has returned since.
func (ic *inCall) mark(state uint64) (callMark, bool) {
	var m callMark
	m.setKinds(ic.kinds.Load())
	m.sig.count = int(ic.count.Load())
	m.sig.root = int(ic.root.Load())
	return m, ic.state.Load() == state
}

// watchdog holds what the watchdog goroutine looks at: operations queued on
// callers' streams and the NCCL call in progress.
type watchdog struct {
	timeout  time.Duration
	interval time.Duration
	now      func() time.Time
	inCall   inCall
	quit     chan struct{}
	quitOnce sync.Once

	mu      sync.Mutex
	pending []*pendingOp // in the order queued
}

func newWatchdog(timeout time.Duration, now func() time.Time) *watchdog {
	// Often enough that a timeout is seen about an eighth of it late; rarely
	// enough to cost nothing when all is well.
	interval := 100 * time.Millisecond
	if timeout > 0 {
		interval = min(max(timeout/8, time.Millisecond), interval)
	}
	return &watchdog{timeout: timeout, interval: interval, now: now, quit: make(chan struct{})}
}

// grace is how long an NCCL call must have been running before the
// watchdog aborts under it: never less than the timeout, so a caller that
// is merely about to enter NCCL is never raced.
func (w *watchdog) grace() time.Duration {
	if w.timeout > 0 {
		return w.timeout
	}
	return 10 * w.interval
}

func (w *watchdog) track(p *pendingOp) {
	w.mu.Lock()
	w.pending = append(w.pending, p)
	w.mu.Unlock()
}

// drain returns and forgets every operation still watched.
func (w *watchdog) drain() []*pendingOp {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = nil
	return p
}

func (w *watchdog) stop() { w.quitOnce.Do(func() { close(w.quit) }) }

// check looks at everything once, at now, and returns why the communicator
// must fail, or nil. Finished operations are released and forgotten.
func (w *watchdog) check(now time.Time, asyncError func() error) error {
	if err := asyncError(); err != nil {
		return fmt.Errorf("NCCL reported an asynchronous error: %w", err)
	}
	if st, d, ok := w.inCall.inside(now); ok && w.timeout > 0 && d > w.timeout {
		if m, ok := w.inCall.mark(st); ok {
			return fmt.Errorf("%s: the NCCL call has not returned after %v: %w", m.name(), w.timeout, comm.ErrTimeout)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var cause error
	keep := w.pending[:0]
	for _, p := range w.pending {
		if cause != nil {
			keep = append(keep, p)
			continue
		}
		done, err := p.poll(now, w.timeout)
		switch {
		case errors.Is(err, errExpired):
			cause = fmt.Errorf("%s did not finish within %v: %w", p.name(), w.timeout, comm.ErrTimeout)
			p.flight.Ended(cause)
		case err != nil:
			cause = fmt.Errorf("%s: %w", p.name(), err)
			p.flight.Ended(cause)
		case done:
			p.flight.Ended(nil)
			p.free()
			continue
		}
		keep = append(keep, p)
	}
	clear(w.pending[len(keep):])
	w.pending = keep
	return cause
}

// watch is the watchdog goroutine of c.
func (c *Comm) watch() {
	defer close(c.watchdogEnd)
	t := time.NewTicker(c.dog.interval)
	defer t.Stop()
	for {
		select {
		case <-c.dog.quit:
			return
		case <-t.C:
		}
		c.watchOnce(c.dog.now())
	}
}

// watchOnce is one round of the watchdog: find a failure, then abort if
// nobody else can.
func (c *Comm) watchOnce(now time.Time) {
	if c.failure() == nil {
		cause := c.dog.check(now, c.asyncError)
		if cause == nil {
			return
		}
		c.fail(cause)
	}
	select {
	case <-c.abortDone:
		return
	default:
	}
	if c.mu.TryLock() {
		if !c.closed { // a closed communicator's handle is gone or being aborted by Close
			c.abort()
		}
		c.mu.Unlock()
		return
	}
	if st, d, ok := c.dog.inCall.inside(now); ok {
		if m, ok := c.dog.inCall.mark(st); ok && m.what == nameWaiting {
			c.abort() // the holder of c.mu waits for NCCL's kernels; this ends them
		} else if d >= c.dog.grace() {
			c.abort() // the holder of c.mu is stuck inside NCCL; this frees it
		}
	}
}

// asyncError asks NCCL, unless the handle is already gone.
func (c *Comm) asyncError() error {
	c.handle.RLock()
	defer c.handle.RUnlock()
	if c.gone {
		return nil
	}
	return c.eng.asyncError()
}

// failCause is why a communicator failed.
type failCause struct{ err error }

// fail records why the communicator failed; the first reason stays.
func (c *Comm) fail(cause error) {
	if c.failed.CompareAndSwap(nil, &failCause{err: cause}) {
		close(c.failCh)
	}
}

// failure is why the communicator failed, or nil: one atomic load, twice
// on every operation's path.
func (c *Comm) failure() error {
	if f := c.failed.Load(); f != nil {
		return f.err
	}
	return nil
}

// abort aborts the NCCL handle once; later calls wait for the first.
func (c *Comm) abort() {
	c.abortGate.Do(func() {
		c.handle.Lock()
		c.gone = true
		c.abortErr = c.eng.abort()
		c.handle.Unlock()
		close(c.abortDone)
	})
}

// inNCCL runs fn, an NCCL call on the host, where the watchdog can see it:
// to time it out, and, with or without a timeout, to abort a call that
// hangs after NCCL reported an error (a peer died) while its caller holds
// the communicator's lock. c.mu is held: the mark has one writer at a time.
func (c *Comm) inNCCL(m callMark, fn func() error) error {
	c.dog.inCall.enter(&m)
	defer c.dog.inCall.leave()
	return fn()
}

// waitFor polls p until it finishes, passes timeout (errExpired) or the
// communicator fails (its failure).
func (c *Comm) waitFor(p *pendingOp, timeout time.Duration) error {
	return c.pollUntil(func() (bool, error) { return p.poll(c.dog.now(), timeout) })
}

// pollUntil calls poll until it says done or fails, yielding and then
// sleeping longer between calls (backoff), and returns the communicator's
// failure as soon as there is one.
func (c *Comm) pollUntil(poll func() (bool, error)) error {
	var b backoff
	for {
		if done, err := poll(); done || err != nil {
			return err
		}
		if cause := c.failure(); cause != nil {
			return cause
		}
		b.wait()
	}
}

// backoff yields for the first spinFor of a wait, since most operations
// finish within it, then sleeps longer each time, up to a millisecond. The
// spin is bounded by time, not by a count of polls: once a poll of the
// stream became one cgo call (cuda.StreamQueryIn), 64 polls ended in about
// 10 µs and a 67 µs AllReduce of 128 MiB on no stream was found done only
// after sleeps of 20, 40, 80, 160 and 320 µs (589 µs on the H200,
// 2026-12-04, against 82 before).
type backoff struct {
	start time.Time
	d     time.Duration
}

const spinFor = 200 * time.Microsecond

// busyFor is the first part of a wait, which polls again at once without
// yielding: a yield of a goroutine locked to its thread (as CUDA programs
// often lock theirs) hands the thread over twice, 8-10 µs a yield on an
// H100 host (internal/cuda's GPUWaitLatency, go-poll-yield on a locked
// thread: 18-21 µs for an 8-byte copy that a plain poll saw end in 9).
// What the nccl backend's waits poll is the GPU's work, which needs no
// goroutine of this process to progress.
const busyFor = 20 * time.Microsecond

func (b *backoff) wait() {
	if b.start.IsZero() {
		b.start = time.Now()
	}
	since := time.Since(b.start)
	if since < busyFor {
		return
	}
	if since < spinFor {
		runtime.Gosched()
		return
	}
	b.d = min(max(2*b.d, 20*time.Microsecond), time.Millisecond)
	time.Sleep(b.d)
}

// eventPool keeps events for reuse: recording one is cheap, creating one
// is not.
type eventPool struct {
	dev    *devmem.Device
	mu     sync.Mutex
	free   []*devmem.Event
	closed bool
}

// record returns an event recorded on s.
func (p *eventPool) record(s *devmem.Stream) (*devmem.Event, error) {
	p.mu.Lock()
	var e *devmem.Event
	if n := len(p.free); n > 0 {
		e, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if e == nil {
		var err error
		if e, err = p.dev.NewEvent(); err != nil {
			return nil, err
		}
	}
	if err := e.Record(s); err != nil {
		p.put(e)
		return nil, err
	}
	return e, nil
}

func (p *eventPool) put(e *devmem.Event) {
	if e == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		e.Destroy() // given back after Close: nothing will reuse it
		return
	}
	p.free = append(p.free, e)
}

func (p *eventPool) destroy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for _, e := range p.free {
		errs = append(errs, e.Destroy())
	}
	p.free = nil
	return errors.Join(errs...)
}
