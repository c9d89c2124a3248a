//go:build cgo

package devmem

import (
	"errors"
	"fmt"
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

	hostQueue

	issued atomic.Uint64 // work handed to CUDA on h
	synced atomic.Uint64 // issued as it was when h was last found idle
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
	s.init(s.idle)
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

// enqueueNow runs fn with the context and s's handle at once when nothing
// is queued on the host before it, as issueAs does, without the closure
// issueAs takes (every stream-ordered NCCL call comes here); false when s is
// busy and fn must be queued.
func (s *cudaStream) enqueueNow(fn func(ctx, handle uintptr) error) (bool, error) {
	s.mu.Lock()
	if s.busyLocked() {
		s.mu.Unlock()
		return false, nil
	}
	s.mu.Unlock()
	err := fn(uintptr(s.c.ctx), uintptr(s.h))
	s.issued.Add(1) // after: idle must not count it as waited for before it is in CUDA
	return true, err
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

// was issued since h was last found idle.
func (s *cudaStream) idle() error {
	n := s.issued.Load()
	if s.synced.Load() == n {
		return nil
	}
	if err := cuda.StreamSynchronizeIn(s.c.ctx, s.h); err != nil {
		return fmt.Errorf("devmem: stream of %v: %w", s.c.dev, err)
	}
	s.synced.Store(n)
	return nil
}

// flush waits until no host work is queued and returns (and forgets) the
// first error queued work met. The caller runs queued work itself when no

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
			err := cuda.StreamWaitEventIn(s.c.ctx, s.h, ev.h)
			s.issued.Add(1)
			return err
		}})
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	err := s.issueAs(func(h cuda.Stream) error { return cuda.StreamWaitEventIn(s.c.ctx, h, ev.h) }, nil, false)
	if err != nil {
		return fmt.Errorf("devmem: stream of %v waiting for an event: %w", s.c.dev, err)
	}
	return nil
}

// task queues fn behind the host work on the stream, as an item that does
// not wait for the stream's GPU work first (a host function's before does),
// always for the drain goroutine or a Synchronize to run: fn may block for
// long (in MPI), and its caller must not. fn issues work on h itself, so
// issued counts it once fn returns, as enqueueNow does: a Synchronize or
// Query that comes later then looks at h instead of taking it for idle.
// Work queued on the stream after the task waits behind it on the host,
// and so reaches CUDA after whatever fn issued.
func (s *cudaStream) task(fn func(ctx, handle uintptr) error) error {
	ctx, h := uintptr(s.c.ctx), uintptr(s.h)
	s.mu.Lock()
	s.pushLocked(work{run: func() error {
		err := safely(func() error { return fn(ctx, h) })
		s.issued.Add(1)
		return err
	}})
	s.mu.Unlock()
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

// cudaEvent is a CUDA event: NewEvent's with timing enabled, so that
// Elapsed works, or an interprocess one (kind). Its records are numbered
// when Record is called; issuedUpTo is the highest number handed to CUDA.
// A record queued behind host work is issued later, and waiting for the
// event waits for the latest record as of the wait. An event opened from
// another process is never recorded here, so it has no record pending:
// waits for it are issued at once, or behind the stream's host work.
type cudaEvent struct {
	c    *cudaDriver
	h    cuda.Event
	kind eventKind

	mu         sync.Mutex
	cond       *sync.Cond
	records    uint64
	issuedUpTo uint64
	exported   *IPCEventHandle // an eventIPC's handle, once ExportIPC asked for it
}

// eventKind says where a cudaEvent comes from.
type eventKind uint8

const (
	eventTimed  eventKind = iota // NewEvent
	eventIPC                     // NewIPCEvent: interprocess, so no timing
	eventOpened                  // OpenIPCEvent: another process's eventIPC
)

func (c *cudaDriver) newEvent() (eventImpl, error) {
	return c.createEvent(cuda.EventDefault, eventTimed, "event")
}

// createEvent makes an event of kind with flags in the device's context.
func (c *cudaDriver) createEvent(flags uint32, kind eventKind, what string) (eventImpl, error) {
	var h cuda.Event
	err := c.do(func() error {
		var err error
		h, err = cuda.EventCreate(flags)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("devmem: new %s on %v: %w", what, c.dev, err)
	}
	return c.wrapEvent(h, kind), nil
}

func (c *cudaDriver) wrapEvent(h cuda.Event, kind eventKind) *cudaEvent {
	e := &cudaEvent{c: c, h: h, kind: kind}
	e.cond = sync.NewCond(&e.mu)
	return e
}

// newIPCEvent makes an event another process can open. CUDA refuses timing
// on interprocess events.
func (c *cudaDriver) newIPCEvent() (eventImpl, error) {
	return c.createEvent(cuda.EventDisableTiming|cuda.EventInterprocess, eventIPC, "interprocess event")
}

// openIPCEvent opens another process's event in the device's context.
// CUDA documents no code for a handle it cannot open, so any refusal of
// cuIpcOpenEventHandle's is the handle's, short of those that say the
// driver or the machine cannot (notTheHandlesFault).
func (c *cudaDriver) openIPCEvent(h IPCEventHandle) (eventImpl, error) {
	var ev cuda.Event
	err := c.do(func() error {
		var err error
		ev, err = cuda.IpcOpenEventHandle(cuda.IpcEventHandle(h))
		return err
	})
	if err == nil {
		return c.wrapEvent(ev, eventOpened), nil
	}
	var ce *cuda.Error
	if !errors.As(err, &ce) || ce.Call != "cuIpcOpenEventHandle" || notTheHandlesFault[ce.Code] {
		return nil, fmt.Errorf("devmem: OpenIPCEvent on %v: %w", c.dev, err)
	}
	return nil, fmt.Errorf("devmem: OpenIPCEvent on %v: the handle names no event this process can open: %w: %w", c.dev, ErrInvalidArgument, err)
}

// notTheHandlesFault are the codes of a failed cuIpcOpenEventHandle that are
// not the handle's fault.
var notTheHandlesFault = map[int]bool{
	cuda.CUDA_ERROR_OUT_OF_MEMORY:          true,
	cuda.CUDA_ERROR_NOT_INITIALIZED:        true,
	cuda.CUDA_ERROR_DEINITIALIZED:          true,
	cuda.CUDA_ERROR_CONTEXT_IS_DESTROYED:   true,
	cuda.CUDA_ERROR_NOT_SUPPORTED:          true, // no CUDA IPC here (WSL, say)
	cuda.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: true,
}

// exportIPC returns an eventIPC's handle, asked of CUDA once.
func (e *cudaEvent) exportIPC() (IPCEventHandle, error) {
	if e.kind != eventIPC {
		what := "NewEvent"
		if e.kind == eventOpened {
			what = "OpenIPCEvent"
		}
		return IPCEventHandle{}, fmt.Errorf("devmem: ExportIPC of an event of %s on %v: only NewIPCEvent's export: %w", what, e.c.dev, ErrInvalidArgument)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.exported != nil {
		return *e.exported, nil
	}
	var h cuda.IpcEventHandle
	err := e.c.do(func() error {
		var err error
		h, err = cuda.IpcGetEventHandle(e.h)
		return err
	})
	if err != nil {
		return IPCEventHandle{}, fmt.Errorf("devmem: ExportIPC of an event of %v: %w", e.c.dev, err)
	}
	x := IPCEventHandle(h)
	e.exported = &x
	return x, nil
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
	if e.kind == eventOpened {
		return fmt.Errorf("devmem: Record of an event opened from another process on %v: only its exporter records it: %w", e.c.dev, ErrUnsupported)
	}
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
	if err := cuda.EventSynchronizeIn(e.c.ctx, e.h); err != nil {
		return fmt.Errorf("devmem: waiting for an event on %v: %w", e.c.dev, err)
	}
	return nil
}

func (e *cudaEvent) query() (bool, error) {
	if e.pending() {
		return false, nil
	}
	done, err := cuda.EventQueryIn(e.c.ctx, e.h) // one cgo call: polled in loops
	if err != nil {
		return false, fmt.Errorf("devmem: querying an event on %v: %w", e.c.dev, err)
	}
	return done, nil
}

func (e *cudaEvent) elapsedSince(start eventImpl) (time.Duration, error) {
	st := start.(*cudaEvent)
	if e.kind != eventTimed || st.kind != eventTimed {
		// CUDA would call it an invalid handle, as for an event never recorded.
		return 0, fmt.Errorf("devmem: elapsed time of an interprocess event, which has no timing: %w", ErrInvalidArgument)
	}
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
	return f.c.enqueueIn(cs, func(ctx cuda.Context, h cuda.Stream) error {
		return cuda.LaunchKernelIn(ctx, f.h, g, b, sharedBytes, h, params...)
	})
}
