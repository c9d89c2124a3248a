package mpicomm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/devhook"
	"github.com/gpucomm/gpucomm/internal/ipccache"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/kernels"
)

// Stream-ordered reductions through the IPC path, ordered on the GPU with
// IPC events (issue 22.1): a reduction on a stream, on a GPU, where every
// rank's part is one kernels.Reduce (at most fusedRanks ranks), no longer
// waits on the host for its stream's earlier work nor for its kernel.
//
// Each rank has two interprocess events, made and exchanged at Open:
// ready, recorded on the caller's stream where the call stands, and done,
// recorded after its kernel. The call is a task on the caller's stream
// (devhook.Task), run in stream order but without waiting for the GPU:
//
//  1. record ready on the caller's stream;
//  2. gather the shares (the handles of the buffers, as the host-ordered
//     path does); once every rank has sent its share, every rank's ready
//     is recorded;
//  3. open what this rank reads and writes, and agree that all could;
//  4. on the path's kernel stream, wait for every rank's ready (no rank's
//     send buffer is read before its stream's earlier work is done), run
//     the kernel, record done;
//  5. agree that every launch went through; once all have, every rank's
//     done is recorded;
//  6. make the caller's stream wait for every rank's done: later work on
//     it neither reads this rank's outputs before every rank has written
//     its part nor overwrites its send buffer before every rank has read
//     it.
//
// An event is recorded again only once every rank has issued its waits for
// its previous record: ready's next record comes after step 5's agreement,
// which no rank passes before it has issued step 4's waits; done's next
// record after the next call's step 2, which no rank enters before it has
// issued step 6's waits of this one. A wait is for the record latest when
// the wait is issued, so these agreements are what orders them.
//
// Where a step fails before anything is written (3), or a launch fails (5),
// the ranks fall back together to the host-staged reduction after waiting
// on the host for their streams and kernels, as the host-ordered path
// does. A fault of the kernel itself, which the GPU reports later, is
// returned by the stream's next Synchronize, as for any kernel.
//
// The handles a kernel reads and writes through stay referenced until an
// event recorded after it (between the kernel and done) is found done
// (reap, at the next call and by IPCCache), so that the cache never unmaps
// memory a queued kernel still uses, and lets go of it soon after.
//
// A rank may pass no stream where the others pass one (the stream is no
// part of a collective's signature): it takes the host-ordered path
// (ipcReduce), which reads its peers' send buffers once step 3's agreement
// is passed and returns after step 5's. A flag in the shares' gather tells
// the ordered ranks, which then wait on the host for their streams before
// step 3's agreement and for their kernels before step 5's.

// IPCEventsEnv turns the events on ("on") or off ("off") on the rank that
// sets it. The ranks agree at Open: the events are used only where every
// rank wants them, else stream-ordered reductions wait on the host.
const IPCEventsEnv = "GPUCOMM_NODE_IPC_EVENTS"

// ipcEventsDefaultRanks is the communicator size at which the events are on
// when IPCEventsEnv is unset (and no two ranks share a GPU): on the H200
// under MPS (2026-12-05, docs/PERFORMANCE.md) they took 2 ranks'
// reductions of 16 and 64 MiB from 121 to 106 µs (64 MiB AllReduce) and
// from 64-74 to 48-53 µs (16 MiB), while with 4 ranks they were no faster
// at 64 MiB and 15-35% slower at 4 and 16 MiB (each rank's stream then
// waits on four other processes' events twice a call).
const ipcEventsDefaultRanks = 2

// ipcEventsWanted reads IPCEventsEnv for the reductions of a communicator
// of size ranks, some of which share a GPU (shared): unset, on for
// ipcEventsDefaultRanks ranks on GPUs of their own. Ranks that share a GPU
// without MPS take turns on it, and a kernel or stream that waits for
// another process's event waits for that process's turn: the messages'
// events made the heat solver's steps 2-3 times slower there
// (p2pEventsWanted); the reductions wait for the peers' events as the
// messages do. The figures above were under MPS, which runs the
// processes together (set the variable on with it).
func ipcEventsWanted(size int, shared bool) (bool, error) {
	return envOnOff(IPCEventsEnv, size == ipcEventsDefaultRanks && !shared)
}

// ipcOrder is a Comm's state for stream-ordered reductions on the GPU.
type ipcOrder struct {
	ready, done []*devmem.Event // by rank: this rank's own, and the peers' opened
	s           *devmem.Stream  // the kernels' stream
	refHold                     // what queued kernels read through the cache

	reductions atomic.Int64 // reductions ordered on the GPU
}

// refHold keeps the cache's references that queued GPU work still reads
// through (a GPU-ordered reduction's kernel, a GPU-ordered receive's copy)
// until an event recorded after that work is done.
type refHold struct {
	dev  *devmem.Device
	mu   sync.Mutex
	held []heldCall      // calls whose work may still run, oldest first
	free []*devmem.Event // their events once let go, for reuse
}

// heldCall is what one call's queued work may still use: the peers'
// buffers it opened, let go once done (recorded after the work) is.
type heldCall struct {
	done *devmem.Event
	refs []*ipccache.Ref
}

// maxHeld bounds the calls whose references are kept for queued kernels:
// past it, a call waits for the oldest kernel before it lets it go.
const maxHeld = 64

// setUpOrder makes and exchanges the events, when the reductions can use
// them: every rank of c calls it where ipcAll holds (a collective). It
// leaves c.ipc.order nil where any rank cannot or does not want them.
func (c *Comm) setUpOrder() error {
	want, err := ipcEventsWanted(c.size, c.ipc.sharedGPU) // checked at Open: valid on every rank
	if err != nil {
		want = false
	}
	var mine []byte
	var ready, done *devmem.Event
	var kernelStream *devmem.Stream
	cleanup := func() {
		for _, e := range []*devmem.Event{ready, done} {
			if e != nil {
				e.Destroy()
			}
		}
		if kernelStream != nil {
			kernelStream.Destroy()
		}
	}
	if want && c.dev.Kind() == devmem.CUDA && c.size <= fusedRanks {
		mine, ready, done, kernelStream = c.makeOrderEvents()
	}
	all, err := mpi.AllgatherBytes(c.coll, mine)
	if err != nil {
		cleanup()
		return err
	}
	for _, raw := range all {
		if len(raw) != 2*len(devmem.IPCEventHandle{}) {
			cleanup()
			return nil // some rank offers none: host-ordered everywhere
		}
	}
	o := &ipcOrder{ready: make([]*devmem.Event, c.size), done: make([]*devmem.Event, c.size), s: kernelStream, refHold: refHold{dev: c.dev}}
	o.ready[c.rank], o.done[c.rank] = ready, done
	var openErr error
	for q, raw := range all {
		if q == c.rank {
			continue
		}
		for i, into := range []*[]*devmem.Event{&o.ready, &o.done} {
			var h devmem.IPCEventHandle
			copy(h[:], raw[i*len(h):])
			e, err := c.dev.OpenIPCEvent(h)
			if err != nil {
				openErr = errors.Join(openErr, fmt.Errorf("rank %d's event: %w", q, err))
				continue
			}
			(*into)[q] = e
		}
	}
	v := []int64{b2i(openErr != nil)}
	if err := mpi.AllreduceInt64s(c.coll, v, mpi.Max); err != nil {
		o.destroy()
		return errors.Join(openErr, err)
	}
	if v[0] != 0 {
		o.destroy() // a rank could not open them: host-ordered everywhere
		return nil
	}
	c.ipc.order = o
	return nil
}

// makeOrderEvents makes this rank's two events and the kernel stream, and
// returns the events' handles; nothing (and nil bytes) where it cannot.
func (c *Comm) makeOrderEvents() ([]byte, *devmem.Event, *devmem.Event, *devmem.Stream) {
	var made []*devmem.Event
	fail := func() ([]byte, *devmem.Event, *devmem.Event, *devmem.Stream) {
		for _, e := range made {
			e.Destroy()
		}
		return nil, nil, nil, nil
	}
	var handles []byte
	for range 2 {
		e, err := c.dev.NewIPCEvent()
		if err != nil {
			return fail()
		}
		made = append(made, e)
		h, err := e.ExportIPC()
		if err != nil {
			return fail()
		}
		handles = append(handles, h[:]...)
	}
	s, err := c.dev.NewStream()
	if err != nil {
		return fail()
	}
	return handles, made[0], made[1], s
}

// destroy waits for the kernel stream, lets go of what it held and destroys
// the events and the stream.
func (o *ipcOrder) destroy() error {
	var errs []error
	if o.s != nil {
		errs = append(errs, o.s.Synchronize(), o.reap(true), o.s.Destroy())
	}
	for _, es := range [][]*devmem.Event{o.ready, o.done, o.dropFree()} {
		for _, e := range es {
			if e != nil {
				errs = append(errs, e.Destroy())
			}
		}
	}
	return errors.Join(errs...)
}

// reap lets go of the references of every call whose kernel is done, or
// (wait) of every call, after waiting for its kernel.
func (o *refHold) reap(wait bool) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reapLocked(wait, len(o.held))
}

// reapLocked lets go of the oldest calls whose kernels are done, and waits
// for the first n of them.
func (o *refHold) reapLocked(wait bool, n int) error {
	var errs []error
	for len(o.held) > 0 {
		h := o.held[0]
		if wait && n > 0 {
			// Let go even where the wait failed: a device that failed
			// runs nothing more on these mappings.
			errs = append(errs, h.done.Synchronize())
			n--
		} else if done, err := h.done.Done(); err != nil || !done {
			errs = append(errs, err)
			break
		}
		errs = append(errs, release(h.refs))
		o.free = append(o.free, h.done)
		o.held[0] = heldCall{}
		o.held = o.held[1:]
	}
	return errors.Join(errs...)
}

// callEvent is an event for a call's kernel (callDone): one let go before,
// or a new one; nil where none can be made.
func (o *refHold) callEvent() *devmem.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := len(o.free); n > 0 {
		ev := o.free[n-1]
		o.free = o.free[:n-1]
		return ev
	}
	ev, err := o.dev.NewEvent()
	if err != nil {
		return nil
	}
	return ev
}

// dropFree takes the events let go for reuse, to destroy them.
func (o *refHold) dropFree() []*devmem.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	free := o.free
	o.free = nil
	return free
}

// putBack returns a call's event, done or never recorded, for reuse.
func (o *refHold) putBack(ev *devmem.Event) {
	if ev == nil {
		return
	}
	o.mu.Lock()
	o.free = append(o.free, ev)
	o.mu.Unlock()
}

// hold keeps refs until ev, recorded on the kernel stream after the call's
// kernel, is done, and lets go of the calls before it whose kernels are.
// Without ev (none could be made or recorded) it waits for the kernel
// stream and lets refs go now. Its errors are not the call's, which is
// done on every rank by then: a failed wait is the device's, which the
// stream's next Synchronize reports, and a failed release the cache's.
func (o *ipcOrder) hold(ev *devmem.Event, refs []*ipccache.Ref) {
	if ev == nil {
		o.s.Synchronize()
		release(refs)
		return
	}
	o.keep(ev, refs)
}

// keep holds refs until ev is done, and lets go of the calls before it
// whose work is; past maxHeld calls it waits for the oldest.
func (o *refHold) keep(ev *devmem.Event, refs []*ipccache.Ref) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held = append(o.held, heldCall{done: ev, refs: refs})
	o.reapLocked(true, len(o.held)-maxHeld)
}

// IPCOrdered reports whether this communicator's stream-ordered reductions
// through the IPC path are ordered on the GPU with IPC events (on), and
// how many have been.
func (c *Comm) IPCOrdered() (on bool, reductions int64) {
	ord := c.ipc.order
	if ord == nil {
		return false, 0
	}
	return true, ord.reductions.Load()
}

// orderedReduction reports whether call goes through the GPU-ordered IPC
// path: a reduction on a stream that would take the IPC path (ipcCollective)
// where the events are set up.
func (c *Comm) orderedReduction(call driver.Call) bool {
	if c.ipc.order == nil || call.Stream == nil || c.direct(call) {
		return false
	}
	switch call.Operation {
	case driver.OpAllReduce, driver.OpReduce, driver.OpReduceScatter:
		return c.ipcCollective(call)
	}
	return false
}

// collectiveOrdered queues a GPU-ordered reduction on its stream as a task
// that does not wait for the stream's GPU work, in ticket order with the
// other collectives.
func (c *Comm) collectiveOrdered(call driver.Call, fl driver.Flight, staged func(*Comm, *op) error) error {
	seq := c.tickets.Add(1)
	var ran atomic.Bool
	err := devhook.Task(call.Stream, func(ctx, h uintptr) error {
		ran.Store(true)
		fl.Started()
		err := c.runTicket(call, seq, func(c *Comm, o *op) error {
			return c.ipcReduceOrdered(o, cuda.Context(ctx), cuda.Stream(h), staged)
		})
		fl.Ended(err)
		return err
	})
	return c.queued(call, seq, err, &ran)
}

// ipcReduceOrdered is ipcReduce ordered on the GPU (see the top of this
// file); ctx and h are the caller's stream's context and CUstream.
//
// Unlike a host call, the task does not learn whether the stream's earlier
// GPU work failed: a fault there is the stream's, reported by its next
// Synchronize, and the kernel runs (or fails to launch, on a context a
// fault ended, which the ranks then agree on) as any kernel queued after
// it would.
func (c *Comm) ipcReduceOrdered(o *op, ctx cuda.Context, h cuda.Stream, staged func(*Comm, *op) error) (err error) {
	ord := c.ipc.order
	call := o.call
	// waitStream waits on the host for the caller's stream; where it fails,
	// this rank would leave the collectives the others go on to, so the
	// communicator breaks.
	waitStream := func(why string) error {
		if err := cuda.StreamSynchronizeIn(ctx, h); err != nil {
			err = fmt.Errorf("%v: waiting for the stream %s: %w", call.Operation, why, err)
			c.setBroken(err)
			return err
		}
		return nil
	}
	if c.size > fusedRanks {
		// More ranks than one kernel takes (fusedRanks is lowered by
		// tests): the host-ordered path's folds and copies, after waiting
		// for the stream, as a host call would have. Every rank decides
		// alike, and no rank has recorded anything.
		if err := waitStream("before the host-ordered reduction"); err != nil {
			return err
		}
		return c.ipcReduce(o, staged)
	}
	// What earlier calls' kernels held and are done with goes first, so
	// that the cache may close a mapping of memory a peer has freed.
	ord.reap(false)
	// stagedAfterAll waits on the host for the caller's stream (and so for
	// its earlier work, the peers' ready records it waits on being issued)
	// and for this rank's kernels, then runs the host-staged reduction, as
	// every rank does.
	stagedAfterAll := func() error {
		c.ipc.staged.Add(1)
		if err := waitStream("before the host-staged reduction"); err != nil {
			return err
		}
		if err := ord.s.Synchronize(); err != nil {
			c.setBroken(fmt.Errorf("%v: waiting for the IPC path's kernels before the host-staged reduction: %w", call.Operation, err))
			return err
		}
		ord.reap(true) // its errors are the cache's, not this call's
		return staged(c, o)
	}
	// Where the record fails, the peers' waits would take an older one:
	// this rank still takes part in every agreement, and fails the first,
	// so that no kernel reads its buffers.
	recErr := cuda.EventRecordIn(ctx, cuda.Event(devhook.EventHandle(ord.ready[c.rank])), h)
	mine, lo, hi := c.reduceShare(call)
	shares, ok, allOrdered, err := c.exchangeOrdered(o, mine, true)
	if err != nil {
		return err
	}
	// Every peer is in this call now: one that freed memory after waiting
	// for its device has waited for this rank's earlier kernels too, whose
	// references go now, so that the cache may drop that memory's stale
	// mapping before this call opens what took its place.
	ord.reap(false)
	if !ok {
		return stagedAfterAll()
	}
	// A rank that passed no stream runs the host-ordered path (ipcReduce):
	// it reads this rank's send buffer once the next agreement is passed,
	// and returns, done, after the last. With such a rank this one orders
	// its part on the host as that path does: its stream's earlier work
	// done before the next agreement, its kernel before the last.
	onHost := !allOrdered
	var prepErr error
	streamFailed := false
	if onHost {
		if err := cuda.StreamSynchronizeIn(ctx, h); err != nil {
			prepErr, streamFailed = fmt.Errorf("waiting for the stream: %w", err), true
		}
	}
	var refs []*ipccache.Ref
	var callDone *devmem.Event
	kept := false
	defer func() {
		if kept {
			return
		}
		// Every path here that queued the kernel has waited for it.
		err = errors.Join(err, release(refs))
		ord.putBack(callDone)
	}()
	r, partErr := c.nodePart(shares, call, lo, hi, &refs)
	prepErr = errors.Join(prepErr, partErr)
	if recErr != nil {
		prepErr = errors.Join(prepErr, fmt.Errorf("recording the stream's place: %w", recErr))
	}
	// A stream that failed cannot take the host-staged reduction either:
	// then every rank fails (agreeRun's second flag), none left waiting.
	failed, noStage, err := c.agreeRun(o, prepErr != nil, streamFailed)
	if err != nil {
		return err
	}
	if failed && noStage {
		var mine error
		if streamFailed {
			mine = prepErr
		}
		return c.unstageable(call, mine)
	}
	if failed {
		return stagedAfterAll()
	}
	// Step 4: every rank's ready, the kernel, this rank's done. done is
	// recorded even where the launch failed, so that no peer waits for an
	// older record than this call's. (A host-ordered peer recorded no
	// ready: the wait takes its last record, long done.)
	var runErr error
	for q := range c.size {
		if runErr = ord.s.WaitEvent(ord.ready[q]); runErr != nil {
			break
		}
	}
	if runErr == nil && reduceFault != nil {
		runErr = reduceFault(c.rank)
	}
	if runErr == nil && r.n > 0 {
		typ, opName, ferr := foldNames(call)
		if runErr = ferr; runErr == nil {
			by := 0
			if call.Op == comm.Avg {
				by = c.size
			}
			runErr = kernels.Reduce(ord.s, typ, opName, r.dsts, r.srcs, r.n, by)
		}
	}
	// The call's own event, before done, so that when the caller's
	// stream has passed its wait for done the references can go.
	callDone = ord.callEvent()
	if callDone != nil && callDone.Record(ord.s) != nil {
		ord.putBack(callDone)
		callDone = nil
	}
	if rerr := ord.done[c.rank].Record(ord.s); rerr != nil {
		runErr = errors.Join(runErr, rerr)
	}
	if onHost && runErr == nil {
		runErr = ord.s.Synchronize()
	}
	written := call.Operation != driver.OpReduce || c.rank == call.Root
	noStage = written && !call.Recv.IsZero() && call.Recv.Overlaps(call.Send)
	if runErr != nil && ord.s.Synchronize() != nil {
		noStage = true // a device that failed: the staged reduction's copies would too
	}
	// streamAfterKernels is step 6: later work on the caller's stream waits
	// for every rank's kernel. Where a wait cannot be queued, this rank
	// waits on the host for every kernel instead, which keeps its stream's
	// later work off the outputs as well.
	streamAfterKernels := func() error {
		for q := range c.size {
			if cuda.StreamWaitEventIn(ctx, h, cuda.Event(devhook.EventHandle(ord.done[q]))) != nil {
				var err error
				for q := range c.size {
					err = errors.Join(err, ord.s.WaitEvent(ord.done[q]))
				}
				return errors.Join(err, ord.s.Synchronize())
			}
		}
		return nil
	}
	anyFailed, anyNoStage, err := c.agreeRun(o, runErr != nil, noStage)
	if err != nil {
		// A timeout or MPI's failure: the peers that reached the agreement
		// have recorded their done, and this rank's stream still waits for
		// their kernels (a peer that did not may still read this rank's
		// send buffer: the communicator is broken by then). The references
		// go once this rank's kernel is done.
		return errors.Join(runErr, err, streamAfterKernels(), ord.s.Synchronize())
	}
	if anyFailed {
		// Every rank's kernel, where it ran, is done before any output is
		// written again.
		var waitErr error
		for q := range c.size {
			waitErr = errors.Join(waitErr, ord.s.WaitEvent(ord.done[q]))
		}
		waitErr = errors.Join(waitErr, ord.s.Synchronize())
		if !anyNoStage {
			// As the ranks agreed, even where the wait failed (the staged
			// reduction then fails too, with its own error).
			return errors.Join(waitErr, stagedAfterAll())
		}
		return partFailed(call, errors.Join(runErr, waitErr))
	}
	if err := streamAfterKernels(); err != nil {
		return err
	}
	kept = true
	if !onHost {
		ord.reductions.Add(1)
	}
	c.ipc.collectives.Add(1)
	ord.hold(callDone, refs)
	return nil
}

// unstageable is the error of every rank of a reduction through the IPC
// path that can neither go on nor fall back to the host-staged reduction,
// because some rank's stream failed before anything was written (err:
// this rank's, nil where it was another's).
func (c *Comm) unstageable(call driver.Call, err error) error {
	if err == nil {
		err = errPeerStream
	}
	return fmt.Errorf("%v through the IPC path: a rank's stream failed, and the host-staged reduction cannot run instead: %w", call.Operation, err)
}

// errPeerStream is unstageable's error on the ranks whose streams did not
// fail.
var errPeerStream = errors.New("another rank's stream failed")

// stagedBody is the host-staged body of a reduction.
func stagedBody(call driver.Call) func(*Comm, *op) error {
	switch call.Operation {
	case driver.OpReduce:
		return (*Comm).stagedReduce
	case driver.OpReduceScatter:
		return (*Comm).stagedReduceScatter
	}
	return (*Comm).stagedAllReduce
}
