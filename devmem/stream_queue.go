package devmem

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// hostQueue is the host-work queue of a stream, shared by the host and the
// cuda drivers: host functions, deferred work and polled waits run one at a
// time, in order. Whoever comes first runs the head of the queue: a
// Synchronize (flush) that finds it not started runs it on its own
// goroutine, so that a stream-ordered call followed by a Synchronize costs
// no hand-over between goroutines; otherwise a drain goroutine started when
// the work was queued runs it, so that queued work never waits for a later
// call (deferred work excepted: the sweep starts it).
//
// before, when not nil, waits for the stream's work that is not host work
// (the cuda driver's: what it handed to CUDA), and runs before each item.
type hostQueue struct {
	before func() error

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []work // work behind a host function, in order, from queue[head]
	head    int
	running bool  // an item of queue is being run, by drain or by flush
	drainer bool  // a drain goroutine is alive
	err     error // the first error of queued work since the last synchronize

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

	// deferred counts the hostFuncDeferred calls that found no goroutine
	// to run the queue (under mu); the sweep starts a drain for a stream
	// whose count has not moved while its queue waited a whole sweep.
	deferred uint64

	// drainFn is drain, bound once by init: "go s.drain()" would make a
	// closure for the method call each time (one allocation a
	// stream-ordered call whose drain goroutine had ended), "go
	// s.drainFn()" makes none.
	drainFn func()
}

// maxKeptQueue bounds the queue's array kept for reuse once it is empty.
const maxKeptQueue = 64

// init readies q; before may be nil.
func (q *hostQueue) init(before func() error) {
	if before == nil {
		before = func() error { return nil }
	}
	q.before = before
	q.cond = sync.NewCond(&q.mu)
	q.drainFn = q.drain
}

// work is an item of the host queue. run does it. poll, when not nil, says
// without blocking whether what run would wait for is done, and finishes it
// then: a drain goroutine polls such an item instead of blocking in run, so
// that it can hand it back to a flush that comes meanwhile, whose goroutine
// then runs it without sleeping while another goroutine waits.
// fn, when run is nil, is a host function: it runs (safely) once before
// has returned, and not when before fails; so a host function costs no
// closure of its own. call, when run and fn are nil, is a host call: it
// runs (safely) once before has returned, given before's error.
type work struct {
	run  func() error
	fn   func() error
	call func(before error) error
	poll func() (bool, error)
}

// do runs w.
func (s *hostQueue) do(w work) error {
	if w.run != nil {
		return w.run()
	}
	if w.call != nil {
		if err := s.before(); err != nil {
			return errors.Join(err, safeCall(w.call, err))
		}
		return safeCall(w.call, nil)
	}
	if err := s.before(); err != nil {
		return err
	}
	return safely(w.fn)
}

// safeCall is safely for a host call.
func safeCall(call func(before error) error, before error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("devmem: stream task panicked: %v", r)
		}
	}()
	return call(before)
}

// lenLocked is the number of items queued and not started.
func (s *hostQueue) lenLocked() int { return len(s.queue) - s.head }

// hostFuncDeferred queues fn like hostFunc, but starts no goroutine for it:
// the next synchronize runs it, or the drain that later work starts, or
// the sweep, which starts a drain for work left waiting a whole sweep.
func (s *hostQueue) hostFuncDeferred(fn func() error) error {
	return s.queueWork(work{fn: fn}, true)
}

// hostWait queues wait, with poll (when not nil) for a drain goroutine to
// poll instead; deferred, it starts no goroutine (hostFuncDeferred).
func (s *hostQueue) hostWait(wait func() error, poll func() (bool, error), deferred bool) error {
	// A wait runs even when the CUDA work before it failed: what it waits
	// for is under way and must be ended (its caller counts on it).
	return s.queueWork(work{run: func() error { return errors.Join(s.before(), safely(wait)) }, poll: poll}, deferred)
}

// queueWork queues w, starting a drain goroutine for it unless deferred.
func (s *hostQueue) queueWork(w work, deferred bool) error {
	s.mu.Lock()
	if !deferred {
		s.pushLocked(w)
		s.mu.Unlock()
		return nil
	}
	s.queue = append(s.queue, w)
	left := !s.running && !s.drainer && s.flushing == 0
	if left && s.lenLocked() == 1 {
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

// startDeferred starts a drain for work deferred at the sweep before this
// one (count seen then) and still not taken by anyone.
func (s *hostQueue) startDeferred(seen uint64) (waiting bool, count uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lenLocked() == 0 || s.running || s.drainer || s.flushing > 0 {
		return false, 0
	}
	if s.deferred == seen {
		s.drainer = true
		sweep.started.Add(1)
		go s.drainFn()
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
	streams map[*hostQueue]uint64 // deferred count seen at the last sweep
	running bool
	started atomic.Uint64 // drains the sweep started (the tests read it)
}

func (w *sweeper) add(s *hostQueue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streams == nil {
		w.streams = map[*hostQueue]uint64{}
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
func (s *hostQueue) busyLocked() bool { return s.running || s.lenLocked() > 0 }

// pushIfBusy queues w, as pushLocked does, when host work is queued or
// running, and reports whether it did; an idle queue is left as it is.
func (s *hostQueue) pushIfBusy(w work) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.busyLocked() {
		return false
	}
	s.pushLocked(w)
	return true
}

// hq is the stream's host queue (streamImpl.hq).
func (s *hostQueue) hq() *hostQueue { return s }

// pushLocked queues work and starts a drain goroutine unless someone is
// already running the queue, or will (and so will run this too).
func (s *hostQueue) pushLocked(w work) {
	s.queue = append(s.queue, w)
	if !s.running && !s.drainer && s.flushing == 0 {
		s.drainer = true
		go s.drainFn()
	}
}

// runNextLocked runs the head of the queue, with s.mu released meanwhile.
// The queue runs one item at a time, in order, whoever runs it.
func (s *hostQueue) runNextLocked() {
	w := s.popLocked()
	s.startLocked()
	s.mu.Unlock()
	err := s.do(w)
	s.mu.Lock()
	s.running = false
	s.doneLocked(err)
}

// startLocked marks an item running.
func (s *hostQueue) startLocked() {
	s.running = true
	s.items++
}

func (s *hostQueue) popLocked() work {
	w := s.queue[s.head]
	s.queue[s.head] = work{}
	if s.head++; s.head == len(s.queue) {
		// Empty: the next item goes first in the same array, unless a
		// burst of work grew it.
		s.queue, s.head = s.queue[:0], 0
		if cap(s.queue) > maxKeptQueue {
			s.queue = nil
		}
	}
	return w
}

// doneLocked notes the end of an item that met err.
func (s *hostQueue) doneLocked(err error) {
	s.ended.Store(s.items)
	if err != nil && s.err == nil {
		s.err = err
	}
	s.cond.Broadcast()
}

// pollHeadLocked runs the head of the queue, which has a poll, with s.mu
// released meanwhile: it waits for the CUDA work issued before it, then
// polls until the item is done (popping it, and reporting true) or until a
// flush wants it (leaving it at the head, and reporting false).
func (s *hostQueue) pollHeadLocked() bool {
	w := s.queue[s.head]
	s.startLocked()
	s.mu.Unlock()
	err := s.before()
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
func (s *hostQueue) drain() {
	s.mu.Lock()
	for s.drainableLocked() {
		if s.queue[s.head].poll != nil {
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
func (s *hostQueue) drainableLocked() bool {
	return s.lenLocked() > 0 && !s.running && s.flushing == 0
}

// hostFunc queues fn: the stream's goroutine waits for the work issued
// before it, runs fn, and then issues what was queued after it. It returns
// at once; fn's error is returned by the next synchronize.
func (s *hostQueue) hostFunc(fn func() error) error {
	s.mu.Lock()
	s.pushLocked(work{fn: fn})
	s.mu.Unlock()
	return nil
}

// hostCall queues call as hostFunc queues a host function, but call also
// runs when the work before it failed, given that failure
// (internal/devhook.HostCall).
func (s *hostQueue) hostCall(call func(before error) error) error {
	s.mu.Lock()
	s.pushLocked(work{call: call})
	s.mu.Unlock()
	return nil
}

// idle waits for the work handed to CUDA on h, skipping the call when none
// one is running it: a Synchronize right after a host function (a
// stream-ordered Send, say) then costs no hand-over between goroutines, and
// a drain goroutine that sees a flush under way leaves the queue to it.
func (s *hostQueue) flush() error {
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
func (s *hostQueue) spinWhileRunningLocked(d time.Duration) bool {
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
