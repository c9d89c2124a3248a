//go:build cgo

package devmem

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucomm/gpucomm/internal/cuda"
)

// cudaStream is a non-blocking CUDA stream: it does not wait for the legacy
// default stream, so other libraries' work there does not stall ours.
//
// Host functions make it a queue on the host as well. While a host function
// is waiting or running, later work on the stream (copies, launches, event
// records, waits) is not handed to CUDA yet but queued behind it, and the
// stream's goroutine issues it once the host function returns. So HostFunc
// returns at once, as on the host driver, and nothing on the GPU ever waits
// for the host: a stream blocked on a host value (cuStreamWaitValue) could
// also block streams that share its hardware queue, among them the very
// copies a host function waits for.
type cudaStream struct {
	c *cudaDriver
	h cuda.Stream

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []work // work behind a host function, in order
	running bool   // an item of queue is being run, by drain or by flush
	drainer bool   // a drain goroutine is alive
	err     error  // the first error of queued work since the last synchronize

	// flushing counts the goroutines inside flush (under mu): each runs the
	// queue until it is empty, so a drain goroutine leaves the queue to them.
	// handBacks counts flush's sleeps on an item another goroutine ran (the
	// stream benchmark reports them).
	flushing  int
	handBacks atomic.Uint64

	// polling is set while a drain goroutine polls the head of the queue
	// (a wait with a poll), which it hands back, still at the head, as soon
	// as wantBack (flushes asking for it) is not 0.
	polling  atomic.Bool
	wantBack atomic.Int32

	// items counts the items started (under mu), ended those finished, so
	// that a flush can spin for the end of the one running.
	items uint64
	ended atomic.Uint64

	issued atomic.Uint64 // work handed to CUDA on h
	synced atomic.Uint64 // issued as it was when h was last found idle

	// deferred counts the hostFuncDeferred calls that found no goroutine
	// to run the queue (under mu); the sweep starts a drain for a stream
	// whose count has not moved while its queue waited a whole sweep.
	deferred uint64
}

func (c *cudaDriver) newStream() (streamImpl, error) {
	var h cuda.Stream
	err := c.do(func() error {
		var err error
		h, err = cuda.StreamCreate(cuda.StreamNonBlocking)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("devmem: new stream on %v: %w", c.dev, err)
	}
	s := &cudaStream{c: c, h: h}
	s.cond = sync.NewCond(&s.mu)
	c.streamsMu.Lock()
	if c.streams == nil {
		c.streams = map[*cudaStream]struct{}{}
	}
	c.streams[s] = struct{}{}
	c.streamsMu.Unlock()
	return s, nil
}

// issue hands fn to CUDA on the stream now, or queues it behind the host
// work in flight; a queued fn's error is returned by the next synchronize.
// ev, when not nil, is an event fn records: it counts as pending until fn
// has been issued, so that waiting for it waits for the record.
func (s *cudaStream) issue(fn func(h cuda.Stream) error, ev *cudaEvent) error {
	return s.issueAs(fn, ev, true)
}

// issueAs is issue; with inCtx false fn makes the device's context current
// itself, inside its own C call (cuda.EventRecordIn, NCCL's collectives
// through internal/devhook.EnqueueIn), which saves cuda.WithContext's three
// cgo calls and locked thread on every call.
func (s *cudaStream) issueAs(fn func(h cuda.Stream) error, ev *cudaEvent, inCtx bool) error {
	s.mu.Lock()
	var seq uint64
	if ev != nil {
		seq = ev.recordCalled()
	}
	if !s.busyLocked() {
		s.mu.Unlock()
		err := s.call(fn, inCtx)
		s.issued.Add(1) // after: idle must not count it as waited for before it is in CUDA
		if ev != nil {
			ev.recordIssued(seq)
		}
		return err
	}
	s.pushLocked(work{run: func() error {
		err := s.call(fn, inCtx)
		s.issued.Add(1)
		if ev != nil {
			ev.recordIssued(seq)
		}
		return err
	}})
	s.mu.Unlock()
	return nil
}

// call runs fn on s's handle, in the device's context when inCtx (a method,
// not a closure, so that issuing on an idle stream allocates nothing for it).
func (s *cudaStream) call(fn func(h cuda.Stream) error, inCtx bool) error {
	if inCtx {
		return s.c.do(func() error { return fn(s.h) })
	}
	return fn(s.h)
}

// recordNow records e on s at once when nothing is queued on the host
// before it, as issueAs does, without the closures issueAs's queue needs
// (an event is recorded twice every timed iteration of bench); false when
// s is busy and the record must be queued.
func (s *cudaStream) recordNow(e *cudaEvent) (bool, error) {
	s.mu.Lock()
	if s.busyLocked() {
		s.mu.Unlock()
		return false, nil
	}
	seq := e.recordCalled()
	s.mu.Unlock()
	err := cuda.EventRecordIn(e.c.ctx, e.h, s.h)
	s.issued.Add(1)
	e.recordIssued(seq)
	return true, err
}

// work is an item of the host queue. run does it. poll, when not nil, says
// without blocking whether what run would wait for is done, and finishes it
// then: a drain goroutine polls such an item instead of blocking in run, so
// that it can hand it back to a flush that comes meanwhile, whose goroutine
// then runs it without sleeping while another goroutine waits.
type work struct {
	run  func() error
	poll func() (bool, error)
}

// hostWork wraps fn as queued host work: it runs once the work issued to
// CUDA before it is done.
func (s *cudaStream) hostWork(fn func() error) func() error {
	return func() error {
		if err := s.idle(); err != nil {
			return err
		}
		return safely(fn)
	}
}

// hostFuncDeferred queues fn like hostFunc, but starts no goroutine for it:
// the next synchronize runs it, or the drain that later work starts, or
// the sweep, which starts a drain for work left waiting a whole sweep.
func (s *cudaStream) hostFuncDeferred(fn func() error) error {
	return s.queueWork(work{run: s.hostWork(fn)}, true)
}

// hostWait queues wait, with poll (when not nil) for a drain goroutine to
// poll instead; deferred, it starts no goroutine (hostFuncDeferred).
func (s *cudaStream) hostWait(wait func() error, poll func() (bool, error), deferred bool) error {
	// A wait runs even when the CUDA work before it failed: what it waits
	// for is under way and must be ended (its caller counts on it).
	return s.queueWork(work{run: func() error { return errors.Join(s.idle(), safely(wait)) }, poll: poll}, deferred)
}

// queueWork queues w, starting a drain goroutine for it unless deferred.
func (s *cudaStream) queueWork(w work, deferred bool) error {
	s.mu.Lock()
	if !deferred {
		s.pushLocked(w)
		s.mu.Unlock()
		return nil
	}
	s.queue = append(s.queue, w)
	left := !s.running && !s.drainer && s.flushing == 0
	if left && len(s.queue) == 1 {
		// A new wait for the sweep to count from; deferrals onto work
		// already waiting do not restart its count.
		s.deferred++
	}
	s.mu.Unlock()
	if left {
		sweep.add(s) // outside s.mu: the sweep takes its lock, then s.mu
	}
	return nil
}

// query reports whether the stream holds no host work and its CUDA work is
// done; cuStreamQuery is skipped when nothing was issued since h was last
// found idle.
func (s *cudaStream) query() (bool, error) {
	s.mu.Lock()
	busy := s.busyLocked()
	s.mu.Unlock()
	if busy {
		return false, nil
	}
	n := s.issued.Load()
	if s.synced.Load() == n {
		return true, nil
	}
	done, err := cuda.StreamQueryIn(s.c.ctx, s.h) // one cgo call: polled in loops
	if err != nil {
		return false, fmt.Errorf("devmem: querying a stream of %v: %w", s.c.dev, err)
	}
	if done {
		s.synced.Store(n)
	}
	return done, nil
}

// startDeferred starts a drain for work deferred at the sweep before this
// one (count seen then) and still not taken by anyone.
func (s *cudaStream) startDeferred(seen uint64) (waiting bool, count uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 || s.running || s.drainer || s.flushing > 0 {
		return false, 0
	}
	if s.deferred == seen {
		s.drainer = true
		sweep.started.Add(1)
		go s.drain()
		return false, 0
	}
	return true, s.deferred
}

// sweep starts the work deferred on streams and left there: a goroutine of
// its own wakes every sweepEvery while some stream has deferred work, and
// a little longer, so that a program that defers work all the time does
// not start the sweep's goroutine each time.
var sweep sweeper

const (
	sweepEvery = time.Millisecond // what time.Sleep gives for less on Linux
	sweepIdle  = 16               // empty sweeps before the goroutine ends
)

type sweeper struct {
	mu      sync.Mutex
	streams map[*cudaStream]uint64 // deferred count seen at the last sweep
	running bool
	started atomic.Uint64 // drains the sweep started (the tests read it)
}

func (w *sweeper) add(s *cudaStream) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streams == nil {
		w.streams = map[*cudaStream]uint64{}
	}
	if _, ok := w.streams[s]; !ok {
		w.streams[s] = 0 // no count is 0 here: the next sweep only notes it
	}
	if !w.running {
		w.running = true
		go w.loop()
	}
}

func (w *sweeper) loop() {
	idle := 0
	for {
		time.Sleep(sweepEvery)
		w.mu.Lock()
		for s, seen := range w.streams {
			if waiting, count := s.startDeferred(seen); waiting {
				w.streams[s] = count
			} else {
				delete(w.streams, s)
			}
		}
		if len(w.streams) > 0 {
			idle = 0
		} else if idle++; idle >= sweepIdle {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// busyLocked reports whether host work is queued or running: later work
// must then queue behind it.
func (s *cudaStream) busyLocked() bool { return s.running || len(s.queue) > 0 }

// pushLocked queues work and starts a drain goroutine unless someone is
// already running the queue, or will (and so will run this too).
func (s *cudaStream) pushLocked(w work) {
	s.queue = append(s.queue, w)
	if !s.running && !s.drainer && s.flushing == 0 {
		s.drainer = true
		go s.drain()
	}
}

// runNextLocked runs the head of the queue, with s.mu released meanwhile.
// The queue runs one item at a time, in order, whoever runs it.
func (s *cudaStream) runNextLocked() {
	w := s.popLocked()
	s.startLocked()
	s.mu.Unlock()
	err := w.run()
	s.mu.Lock()
	s.running = false
	s.doneLocked(err)
}

// startLocked marks an item running.
func (s *cudaStream) startLocked() {
	s.running = true
	s.items++
}

func (s *cudaStream) popLocked() work {
	w := s.queue[0]
	s.queue[0] = work{}
	s.queue = s.queue[1:]
	return w
}

// doneLocked notes the end of an item that met err.
func (s *cudaStream) doneLocked(err error) {
	s.ended.Store(s.items)
	if err != nil && s.err == nil {
		s.err = err
	}
	if len(s.queue) == 0 {
		s.queue = nil
	}
	s.cond.Broadcast()
}

// pollHeadLocked runs the head of the queue, which has a poll, with s.mu
// released meanwhile: it waits for the CUDA work issued before it, then
// polls until the item is done (popping it, and reporting true) or until a
// flush wants it (leaving it at the head, and reporting false).
func (s *cudaStream) pollHeadLocked() bool {
	w := s.queue[0]
	s.startLocked()
	s.mu.Unlock()
	err := s.idle()
	done := false
	if err != nil {
		err, done = w.run(), true // the CUDA work before it failed: wait, and report it
	} else {
		s.mu.Lock()
		s.polling.Store(true)
		s.cond.Broadcast() // a flush asleep on the idle wait comes to take it
		s.mu.Unlock()
		for err == nil && !done && s.wantBack.Load() == 0 {
			done, err = safePoll(w.poll)
			if !done && err == nil {
				runtime.Gosched()
			}
		}
	}
	s.mu.Lock()
	s.polling.Store(false)
	s.running = false
	if handBack := err == nil && !done; handBack {
		s.ended.Store(s.items)
		s.cond.Broadcast()
		return false
	}
	s.popLocked()
	s.doneLocked(err)
	return true
}

// safePoll is safely for a poll.
func safePoll(poll func() (bool, error)) (done bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			done, err = true, fmt.Errorf("devmem: stream task panicked: %v", r)
		}
	}()
	return poll()
}

// drain runs the queue in order until it is empty, or until a flush has
// taken it over. (Giving a Synchronize that may be coming a few µs to take
// the work first was tried on the H200 and gained nothing measurable: the
// cost of a stream-ordered call over a plain one is in starting this
// goroutine, not in which goroutine runs the work; docs/PERFORMANCE.md.)
func (s *cudaStream) drain() {
	s.mu.Lock()
	for s.drainableLocked() {
		if s.queue[0].poll != nil {
			if !s.pollHeadLocked() {
				break // handed back to a flush
			}
			continue
		}
		s.runNextLocked()
	}
	s.drainer = false
	s.mu.Unlock()
}

// drainableLocked reports whether a drain goroutine should run the head of
// the queue: there is one, no one is running an item, and no flush, which
// would run it, is under way.
func (s *cudaStream) drainableLocked() bool {
	return len(s.queue) > 0 && !s.running && s.flushing == 0
}

// hostFunc queues fn: the stream's goroutine waits for the work issued
// before it, runs fn, and then issues what was queued after it. It returns
// at once; fn's error is returned by the next synchronize.
func (s *cudaStream) hostFunc(fn func() error) error {
	s.mu.Lock()
	s.pushLocked(work{run: s.hostWork(fn)})
	s.mu.Unlock()
	return nil
}

// idle waits for the work handed to CUDA on h, skipping the call when none
// was issued since h was last found idle.
func (s *cudaStream) idle() error {
	n := s.issued.Load()
	if s.synced.Load() == n {
		return nil
	}
	if err := s.c.do(func() error { return cuda.StreamSynchronize(s.h) }); err != nil {
		return fmt.Errorf("devmem: stream of %v: %w", s.c.dev, err)
	}
	s.synced.Store(n)
	return nil
}

// flush waits until no host work is queued and returns (and forgets) the
// first error queued work met. The caller runs queued work itself when no
// one is running it: a Synchronize right after a host function (a
// stream-ordered Send, say) then costs no hand-over between goroutines, and
// a drain goroutine that sees a flush under way leaves the queue to it.
func (s *cudaStream) flush() error {
	s.mu.Lock()
	s.flushing++
	for s.busyLocked() {
		if !s.running {
			s.runNextLocked()
			continue
		}
		if s.polling.Load() {
			// A drain goroutine polls the head, which it hands back
			// within one poll: wait for that without sleeping.
			s.wantBack.Add(1)
			s.mu.Unlock()
			for s.polling.Load() {
				runtime.Gosched()
			}
			s.mu.Lock()
			s.wantBack.Add(-1)
			continue
		}
		// A drain goroutine runs an item: spin a little for its end
		// (a small stream-ordered collective takes 20-40 µs), so that the
		// hand-back costs no wake-up, then sleep.
		if s.spinWhileRunningLocked(flushSpin) {
			continue
		}
		s.handBacks.Add(1)
		s.cond.Wait()
	}
	s.flushing--
	err := s.err
	s.err = nil
	s.mu.Unlock()
	return err
}

// flushSpin bounds how long a flush spins for an item a drain goroutine
// runs before it sleeps until woken.
const flushSpin = 50 * time.Microsecond

// spinWhileRunningLocked releases s.mu and spins, yielding, until the item
// being run ends or d passes; it reports whether the item ended.
func (s *cudaStream) spinWhileRunningLocked(d time.Duration) bool {
	item := s.items
	s.mu.Unlock()
	start := time.Now()
	for s.ended.Load() != item {
		if time.Since(start) > d {
			s.mu.Lock()
			// Still running, unless it ended or turned to polling (which
			// the flush takes over) meanwhile: its broadcast came before
			// anyone waited.
			return !s.running || s.polling.Load()
		}
		runtime.Gosched()
	}
	s.mu.Lock()
	return true
}

func (s *cudaStream) synchronize() error {
	err := s.flush()
	return errors.Join(err, s.idle())
}

func (s *cudaStream) waitEvent(e eventImpl) error {
	ev := e.(*cudaEvent)
	s.mu.Lock()
	// The record to wait for is the event's latest at this call; it may
	// itself be queued behind host work on another stream. Then the wait is
	// issued only once that record has been (a later record of the same
	// event may be queued behind work that waits for this stream).
	want, pending := ev.latest()
	if s.busyLocked() || pending {
		s.pushLocked(work{run: func() error {
			ev.awaitIssued(want)
			err := s.c.do(func() error { return cuda.StreamWaitEvent(s.h, ev.h) })
			s.issued.Add(1)
			return err
		}})
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	err := s.issue(func(h cuda.Stream) error { return cuda.StreamWaitEvent(h, ev.h) }, nil)
	if err != nil {
		return fmt.Errorf("devmem: stream of %v waiting for an event: %w", s.c.dev, err)
	}
	return nil
}

func (s *cudaStream) destroy() error {
	qerr := s.flush()
	s.c.streamsMu.Lock()
	delete(s.c.streams, s)
	s.c.streamsMu.Unlock()
	err := s.c.do(func() error {
		// Destroyed even when its work failed, so that it does not leak.
		return errors.Join(cuda.StreamSynchronize(s.h), cuda.StreamDestroy(s.h))
	})
	if err != nil {
		return errors.Join(qerr, fmt.Errorf("devmem: destroying a stream of %v: %w", s.c.dev, err))
	}
	return qerr
}

// cudaEvent is a CUDA event with timing enabled, so that Elapsed works.
// Its records are numbered when Record is called; issuedUpTo is the
// highest number handed to CUDA. A record queued behind host work is
// issued later, and waiting for the event waits for the latest record
// as of the wait.
type cudaEvent struct {
	c *cudaDriver
	h cuda.Event

	mu         sync.Mutex
	cond       *sync.Cond
	records    uint64
	issuedUpTo uint64
}

func (c *cudaDriver) newEvent() (eventImpl, error) {
	var h cuda.Event
	err := c.do(func() error {
		var err error
		h, err = cuda.EventCreate(cuda.EventDefault)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("devmem: new event on %v: %w", c.dev, err)
	}
	e := &cudaEvent{c: c, h: h}
	e.cond = sync.NewCond(&e.mu)
	return e, nil
}

// recordCalled numbers a new record of e.
func (e *cudaEvent) recordCalled() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.records++
	return e.records
}

// recordIssued notes that record seq is in CUDA.
func (e *cudaEvent) recordIssued(seq uint64) {
	e.mu.Lock()
	e.issuedUpTo = max(e.issuedUpTo, seq)
	e.cond.Broadcast()
	e.mu.Unlock()
}

// latest is the number of e's latest record and whether it is still queued.
func (e *cudaEvent) latest() (seq uint64, pending bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.records, e.issuedUpTo < e.records
}

func (e *cudaEvent) pending() bool {
	_, p := e.latest()
	return p
}

// awaitIssued waits until record seq (or a later one) is in CUDA.
func (e *cudaEvent) awaitIssued(seq uint64) {
	e.mu.Lock()
	for e.issuedUpTo < seq {
		e.cond.Wait()
	}
	e.mu.Unlock()
}

// record marks the point after s's queued work. For a nil s it records on
// the device's private stream for nil-stream work, which holds nothing
// (that work is waited for before its call returns), so the point is
// reached at once: "now", ordered after no other stream.
func (e *cudaEvent) record(s streamImpl) error {
	var err error
	if s == nil {
		seq := e.recordCalled()
		err = cuda.EventRecordIn(e.c.ctx, e.h, e.c.now)
		e.recordIssued(seq)
	} else {
		cs := s.(*cudaStream)
		var now bool
		if now, err = cs.recordNow(e); !now {
			err = cs.issueAs(func(h cuda.Stream) error { return cuda.EventRecordIn(e.c.ctx, e.h, h) }, e, false)
		}
	}
	if err != nil {
		return fmt.Errorf("devmem: recording an event on %v: %w", e.c.dev, err)
	}
	return nil
}

func (e *cudaEvent) synchronize() error {
	want, _ := e.latest()
	e.awaitIssued(want)
	if err := e.c.do(func() error { return cuda.EventSynchronize(e.h) }); err != nil {
		return fmt.Errorf("devmem: waiting for an event on %v: %w", e.c.dev, err)
	}
	return nil
}

func (e *cudaEvent) query() (bool, error) {
	if e.pending() {
		return false, nil
	}
	var done bool
	err := e.c.do(func() error {
		var err error
		done, err = cuda.EventQuery(e.h)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("devmem: querying an event on %v: %w", e.c.dev, err)
	}
	return done, nil
}

func (e *cudaEvent) elapsedSince(start eventImpl) (time.Duration, error) {
	st := start.(*cudaEvent)
	if e.pending() || st.pending() {
		return 0, fmt.Errorf("devmem: elapsed time of an event not yet reached (its record is queued behind host work): %w", ErrInvalidArgument)
	}
	var d time.Duration
	err := e.c.do(func() error {
		var err error
		d, err = cuda.EventElapsedTime(st.h, e.h)
		return err
	})
	switch {
	case err == nil:
		return d, nil
	case cuda.IsCode(err, cuda.CUDA_ERROR_NOT_READY):
		return 0, fmt.Errorf("devmem: elapsed time of an event not yet reached: %w: %w", ErrInvalidArgument, err)
	case cuda.IsCode(err, cuda.CUDA_ERROR_INVALID_HANDLE):
		return 0, fmt.Errorf("devmem: elapsed time of an event never recorded: %w: %w", ErrInvalidArgument, err)
	}
	return 0, fmt.Errorf("devmem: elapsed time on %v: %w", e.c.dev, err)
}

func (e *cudaEvent) destroy() error {
	want, _ := e.latest()
	e.awaitIssued(want) // a queued record must not meet a destroyed event
	if err := e.c.do(func() error { return cuda.EventDestroy(e.h) }); err != nil {
		return fmt.Errorf("devmem: destroying an event of %v: %w", e.c.dev, err)
	}
	return nil
}

// cudaModule is a CUmodule loaded in the device's primary context.
type cudaModule struct {
	c *cudaDriver
	h cuda.Module
}

func (c *cudaDriver) loadModule(image []byte) (moduleImpl, error) {
	var h cuda.Module
	// ModuleLoadData copies the image into C memory with the NUL that PTX needs.
	err := c.do(func() error {
		var err error
		h, err = cuda.ModuleLoadData(image)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &cudaModule{c: c, h: h}, nil
}

func (m *cudaModule) function(name string) (functionImpl, error) {
	var f cuda.Function
	err := m.c.do(func() error {
		var err error
		f, err = cuda.ModuleGetFunction(m.h, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &cudaFunction{c: m.c, h: f}, nil
}

func (m *cudaModule) unload() error {
	err := m.c.do(func() error {
		// Launches still queued may run the module's code.
		if err := cuda.CtxSynchronize(); err != nil {
			return err
		}
		return cuda.ModuleUnload(m.h)
	})
	if err != nil {
		return fmt.Errorf("devmem: unloading a module of %v: %w", m.c.dev, err)
	}
	return nil
}

type cudaFunction struct {
	c *cudaDriver
	h cuda.Function
}

func (f *cudaFunction) launch(grid, block [3]uint32, sharedBytes int, s streamImpl, params [][]byte) error {
	var cs *cudaStream
	if s != nil {
		cs = s.(*cudaStream)
	}
	g := cuda.Dim3{X: grid[0], Y: grid[1], Z: grid[2]}
	b := cuda.Dim3{X: block[0], Y: block[1], Z: block[2]}
	return f.c.enqueue(cs, func(h cuda.Stream) error {
		return cuda.LaunchKernel(f.h, g, b, sharedBytes, h, params...)
	})
}
