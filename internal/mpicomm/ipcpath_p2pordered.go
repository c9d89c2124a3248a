package mpicomm

import (
	"encoding/binary"
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
)

// Point-to-point messages of the IPC path ordered on the GPU with IPC events
// (issue 22.1), where GPUCOMM_NODE_IPC_EVENTS=on says so (p2pEventsWanted:
// unset, on the host). A host-ordered message waits on the host for the sender's
// stream, for the receiver's stream and for the receiver's copy: under MPS
// on the H200 a 4 MiB message took about 20 µs where its copy takes 2
// (docs/PERFORMANCE.md), each side paying a round trip through the GPU.
// Here a Send, a Recv, or a GroupP2P of a few messages (a halo exchange's)
// on a stream, on a GPU, is a task on its stream (devhook.Task), run in
// stream order without waiting for the GPU; for each message:
//
//  1. the sender takes a pair of its own interprocess events, ready and
//     done (made once, reused), records ready on its stream and sends the
//     control message with its buffer's handle and both events' handles
//     (flag ctlOrdered);
//  2. the receiver, on its stream, waits for ready, copies the sender's
//     bytes into its buffer, records the sender's done after the copy and
//     answers ackOrdered;
//  3. the sender makes its stream wait for done: later work on it does not
//     overwrite the send buffer before the copy has read it.
//
// The receiver's later work on its stream comes after the copy. Neither
// host waits for the GPU. A pair goes back to the sender's spares only once
// the answer has come, and so after the receiver has issued its wait for
// ready and its record of done, and the sender its wait for done: a pair is
// recorded again only once every wait for its last records is issued (a
// wait is for the record latest when the wait is issued). The receiver's
// reference to the sender's buffer goes once an event recorded after its
// copy is done (refHold).
//
// A receiver on no stream, or one whose Recv goes through a host call (a
// GroupP2P of many messages: osu_bw's windows), takes an ordered control message on the
// host: its copy stream waits for ready, and it answers ackCopied once the
// copy is done, so the sender waits for nothing more. An ordered receiver
// that gets a host-ordered control message, or anything but the plain
// copy, first waits for its stream, then goes on as a host call would.
// Where a step fails before the copy is queued, the sender's bytes go
// through the host-staged pipeline (ackStage), the sender first waiting
// for its stream.

// Where the control message holds the sender's buffer's handle and, with
// ctlOrdered, its events'.
const (
	ctlHandleAt = 24
	ctlReadyAt  = ctlHandleAt + devmem.HandleSize
	ctlDoneAt   = ctlReadyAt + len(devmem.IPCEventHandle{})
	ctlEnd      = ctlDoneAt + len(devmem.IPCEventHandle{})
)

// ctlOrdered is the control message's flag for a sender ordered on the GPU:
// its events' handles follow the buffer's.
const ctlOrdered = 2

// ackOrdered is the answer of a receiver that queued its copy after the
// sender's ready and the record of the sender's done after it.
const ackOrdered = 4

// p2pOrder is a Comm's state for point-to-point messages ordered on the GPU.
type p2pOrder struct {
	refHold // what receivers' queued copies read through the cache

	pmu    sync.Mutex
	spare  []*eventPair                            // this rank's pairs, free for a send
	pairs  []*eventPair                            // every pair made, to destroy at Close
	opened map[devmem.IPCEventHandle]*devmem.Event // the senders' events, opened here

	sends, receives atomic.Int64 // messages ordered on the GPU, by side
	afterReady      atomic.Int64 // receives on the host of a message ordered on the GPU (copyAfterReady)
}

// eventPair is a sender's two interprocess events for one message at a
// time, and their handles.
type eventPair struct {
	ready, done *devmem.Event
	handles     [2]devmem.IPCEventHandle
}

// p2pEventsWanted reads IPCEventsEnv for the messages: unset, they are
// ordered on the host. Processes on one GPU take turns on it unless MPS
// runs them together, and a stream that waits for another process's event
// waits for that process's turn: on an H100 without MPS (2026-12-05,
// docs/PERFORMANCE.md) the heat solver's halo exchanges ordered on the GPU
// took its 16384² steps from 1.84 to 0.85 TB/s with 2 ranks and from 1 to
// 0.32 with 4. Under MPS a 64 MiB ping-pong went from 68-73 µs to 59, but
// the same solver with 2 ranks took 4.7-4.9 ms a step with the events in
// three runs of five (1.6-1.7 in the other two) against 1.5-2.7 without
// them (H100 and H200, 2026-12-05), and on GPUs of their own the events
// have not run yet: on is the user's choice, where measured to help.
func p2pEventsWanted() (bool, error) { return envOnOff(IPCEventsEnv, false) }

// setUpP2POrder finds whether ranks share a GPU (for the reductions'
// default too, setUpOrder's) and turns the ordered messages on where every
// rank wants them (p2pEventsWanted) and is on a GPU: every rank of c calls
// it once the IPC path is set up (collectives on c.ctl).
func (c *Comm) setUpP2POrder() error {
	id := c.dev.UUID()
	ids, err := mpi.AllgatherBytes(c.ctl, id[:])
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	shared := false
	for _, b := range ids {
		shared = shared || seen[string(b)]
		seen[string(b)] = true
	}
	c.ipc.sharedGPU = shared
	want, err := p2pEventsWanted() // checked at Open: valid on every rank
	can := err == nil && want && c.dev.Kind() == devmem.CUDA
	v := []int64{b2i(!can)}
	if err := mpi.AllreduceInt64s(c.ctl, v, mpi.Max); err != nil {
		return err
	}
	if v[0] == 0 && c.ipc.cache != nil {
		c.ipc.p2p = &p2pOrder{refHold: refHold{dev: c.dev}, opened: map[devmem.IPCEventHandle]*devmem.Event{}}
	}
	return nil
}

// IPCOrderedP2P reports whether this communicator's messages on a stream
// through the IPC path (a Send, a Recv, a GroupP2P that is not crowded)
// are ordered on the GPU with IPC events (on), and how many sends and
// receives have been.
func (c *Comm) IPCOrderedP2P() (on bool, sends, receives int64) {
	p := c.ipc.p2p
	if p == nil {
		return false, 0, 0
	}
	return true, p.sends.Load(), p.receives.Load()
}

// take is the spare pair given back first where both its events' last
// records are done, else a new pair; nil where none can be made.
//
// A spare's waits are all issued, but on another stream (the sender's
// next message may be on any) its last records may still be queued: a
// receiver's wait for ready and record of done behind slow work on its
// stream, or ready itself on the sender's stream where the receiver waited
// for nothing (a count that differed). Recorded again meanwhile, the two
// records of one interprocess event would be outstanding at once, which
// CUDA does not order; and destroy waits only for each event's last
// record. So a spare is taken only once both are done (done, recorded by
// the receiver after its wait for ready, covers ready where the receiver
// answered ackOrdered).
func (p *p2pOrder) take() *eventPair {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	if len(p.spare) > 0 && p.spare[0].settled() {
		e := p.spare[0]
		p.spare = p.spare[1:]
		return e
	}
	e := &eventPair{}
	for i, ev := range []**devmem.Event{&e.ready, &e.done} {
		made, err := p.dev.NewIPCEvent()
		if err == nil {
			*ev = made
			e.handles[i], err = made.ExportIPC()
		}
		if err != nil {
			for _, m := range []*devmem.Event{e.ready, e.done} {
				if m != nil {
					m.Destroy()
				}
			}
			return nil
		}
	}
	p.pairs = append(p.pairs, e)
	return e
}

// settled reports whether both of e's last records are done.
func (e *eventPair) settled() bool {
	for _, ev := range []*devmem.Event{e.ready, e.done} {
		if done, err := ev.Done(); err != nil || !done {
			return false
		}
	}
	return true
}

// give returns a pair whose waits are all issued, to take's queue.
func (p *p2pOrder) give(e *eventPair) {
	p.pmu.Lock()
	p.spare = append(p.spare, e)
	p.pmu.Unlock()
}

// open is the sender's event h, opened here once.
func (p *p2pOrder) open(h devmem.IPCEventHandle) (*devmem.Event, error) {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	if e, ok := p.opened[h]; ok {
		return e, nil
	}
	e, err := p.dev.OpenIPCEvent(h)
	if err != nil {
		return nil, err
	}
	p.opened[h] = e
	return e, nil
}

// destroy waits for what this rank's queued copies and the peers' copies
// of its buffers hold, then destroys the events: each pair's last ready and
// done are waited for (every earlier record was done before the pair was
// taken again), done being recorded by a receiver after its wait for ready
// and its copy, so that no peer's stream still has work on the pair queued.
func (p *p2pOrder) destroy() error {
	errs := []error{p.reap(true)}
	p.pmu.Lock()
	defer p.pmu.Unlock()
	for _, e := range p.pairs {
		errs = append(errs, e.ready.Synchronize(), e.done.Synchronize(), e.ready.Destroy(), e.done.Destroy())
	}
	for _, e := range p.opened {
		errs = append(errs, e.Destroy())
	}
	for _, e := range p.dropFree() {
		errs = append(errs, e.Destroy())
	}
	p.pairs, p.spare, p.opened = nil, nil, nil
	return errors.Join(errs...)
}

// orderedP2P reports whether a call of the transfers ps on a stream goes
// ordered on the GPU: every message through the IPC path, with the events
// on, and no more messages than the node's CPUs hold waiting at once (a
// halo exchange's, say; osu_bw's windows of 64 go together on the host,
// ipcwindow.go).
func (c *Comm) orderedP2P(call driver.Call, ps []comm.P2P) bool {
	if c.ipc.p2p == nil || call.Stream == nil || len(ps) == 0 || c.crowded(len(ps)) || c.direct(call) {
		return false
	}
	for _, p := range ps {
		if !c.ipcFor(p.Peer, p.Count*p.DType.Size()) {
			return false
		}
	}
	return true
}

// p2pOrdered queues the messages ps, numbered tags, on their stream as a
// task that does not wait for the stream's GPU work.
func (c *Comm) p2pOrdered(call driver.Call, fl driver.Flight, ps []comm.P2P, tags []int) error {
	ts := make([]transfer, len(ps)) // the queued call outlives the caller's slices
	for i, p := range ps {
		ts[i] = transfer{send: p.Kind == comm.SendKind, peers: []int{p.Peer}, buf: p.Buf, bytes: p.Count * p.DType.Size(),
			dt: p.DType, on: c.p2p, tag: tags[i], ipc: true}
	}
	var ran atomic.Bool
	err := devhook.Task(call.Stream, func(ctx, h uintptr) error {
		ran.Store(true)
		fl.Started()
		err := c.runP2POrdered(call, ts, cuda.Context(ctx), cuda.Stream(h))
		fl.Ended(err)
		return err
	})
	return c.queued(call, 0, err, &ran)
}

// runP2POrdered is runP2P for ordered messages, a goroutine each where
// there are several (so that a pair's sends and receives of one call never
// wait for each other); ctx and h are the caller's stream's context and
// CUstream, on which every receive queues its copy and every send its
// wait.
func (c *Comm) runP2POrdered(call driver.Call, ts []transfer, ctx cuda.Context, h cuda.Stream) error {
	if err := c.beginUnbroken(); err != nil {
		return c.wrap(call.Operation, err)
	}
	defer c.end()
	o := c.newOp(call, 0)
	if len(ts) == 1 {
		return c.finish(o, c.moveOrdered(o, ts[0], ctx, h))
	}
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i := range ts {
		wg.Go(func() { errs[i] = c.moveOrdered(o, ts[i], ctx, h) })
	}
	wg.Wait()
	return c.finish(o, errors.Join(errs...))
}

// moveOrdered moves one ordered message.
func (c *Comm) moveOrdered(o *op, t transfer, ctx cuda.Context, h cuda.Stream) error {
	return c.inCell(o, t, func(cell devmem.Buffer) (bool, error) {
		if t.send {
			return c.sendOrdered(o, t, cell, ctx, h)
		}
		return c.recvOrdered(o, t, cell, ctx, h)
	})
}

// waitStreamIn waits on the host for the caller's stream before t goes on
// as a host call would; where that fails, t's peer is left waiting for a
// message or an answer, so the communicator breaks.
func (c *Comm) waitStreamIn(t transfer, ctx cuda.Context, h cuda.Stream) error {
	if err := cuda.StreamSynchronizeIn(ctx, h); err != nil {
		err = fmt.Errorf("%v: waiting for the stream: %w", t, err)
		c.setBroken(err)
		return err
	}
	return nil
}

// sendOrdered is a send's steps 1 and 3 (see the top of this file).
func (c *Comm) sendOrdered(o *op, t transfer, cell devmem.Buffer, ctx cuda.Context, h cuda.Stream) (keep bool, err error) {
	ord := c.ipc.p2p
	staged := c.fillControl(t, cell)
	var pair *eventPair
	if !staged {
		pair = ord.take()
	}
	if pair != nil && cuda.EventRecordIn(ctx, cuda.Event(devhook.EventHandle(pair.ready)), h) != nil {
		ord.give(pair) // recorded nowhere: no one waits for it
		pair = nil
	}
	if pair == nil {
		// As a host call: the stream's earlier work first.
		if err := c.waitStreamIn(t, ctx, h); err != nil {
			return false, err
		}
		return c.sendControl(o, t, cell, staged)
	}
	ctl := cellBytes(cell, 0, ctlLen)
	binary.LittleEndian.PutUint64(ctl[16:], ctlOrdered)
	copy(ctl[ctlReadyAt:], pair.handles[0][:])
	copy(ctl[ctlDoneAt:], pair.handles[1][:])
	// From here the pair is reused only once the answer has come: a
	// receiver that got the control message may still wait for ready.
	reqs, keep, err := c.postSend(o, t, cell)
	if err != nil {
		return keep, err
	}
	if keep, err := c.settled(o, t, reqs[:]); err != nil {
		return keep, err
	}
	a := binary.LittleEndian.Uint64(cellBytes(cell, c.ipc.room, ackLen))
	switch a {
	case ackOrdered:
		done := cuda.Event(devhook.EventHandle(pair.done))
		if werr := cuda.StreamWaitEventIn(ctx, h, done); werr != nil {
			// Later work on the stream must still not overwrite the
			// send buffer before the copy has read it: wait here.
			if serr := cuda.EventSynchronizeIn(ctx, done); serr != nil {
				return false, fmt.Errorf("%v: waiting for rank %d's copy: %w", t, t.peers[0], errors.Join(werr, serr))
			}
		}
		ord.sends.Add(1)
		a = ackCopied
	case ackStage:
		// The pipeline reads the send buffer on the host.
		if err := c.waitStreamIn(t, ctx, h); err != nil {
			ord.give(pair)
			return false, err
		}
	}
	ord.give(pair)
	return false, c.ipcAcked(o, t, a)
}

// recvOrdered is a receive's step 2 (see the top of this file).
func (c *Comm) recvOrdered(o *op, t transfer, cell devmem.Buffer, ctx cuda.Context, h cuda.Stream) (keep bool, err error) {
	got, keep, err := c.recvControl(o, t, cell)
	if err != nil {
		return keep, err
	}
	ctl, ok := orderedControl(t, cell, got)
	if !ok {
		// A host-ordered sender, or more than the plain copy: as a host
		// call, the stream's earlier work first.
		if err := c.waitStreamIn(t, ctx, h); err != nil {
			return c.streamFailed(o, t, cell, got, err)
		}
		return c.ipcControl(o, t, cell, got)
	}
	ord := c.ipc.p2p
	ref, err := c.openSender(t, ctl[ctlHandleAt:ctlReadyAt])
	var ready, done *devmem.Event
	if err == nil {
		if ready, err = ord.open(eventHandleAt(ctl, ctlReadyAt)); err == nil {
			done, err = ord.open(eventHandleAt(ctl, ctlDoneAt))
		}
	}
	if err == nil {
		if err = cuda.StreamWaitEventIn(ctx, h, cuda.Event(devhook.EventHandle(ready))); err == nil {
			err = cuda.MemcpyDtoDAsyncIn(ctx, cuda.DevicePtr(t.buf.Addr()), cuda.DevicePtr(ref.Buf.Addr()), t.bytes, h)
		}
	}
	if err != nil {
		// Nothing copied: the bytes come through the pipeline, which
		// writes the receive buffer from the host once the stream's earlier
		// work (and the wait, where it was queued) is done.
		if serr := c.waitStreamIn(t, ctx, h); serr != nil {
			return c.streamFailed(o, t, cell, got, errors.Join(err, serr, releaseRef(ref)))
		}
		return c.restage(o, t, cell, errors.Join(err, releaseRef(ref)))
	}
	answer := uint64(ackOrdered)
	if cuda.EventRecordIn(ctx, cuda.Event(devhook.EventHandle(done)), h) != nil {
		// The sender cannot wait for the copy: it is waited for here.
		if err := c.waitStreamIn(t, ctx, h); err != nil {
			return c.streamFailed(o, t, cell, got, errors.Join(err, releaseRef(ref)))
		}
		answer = ackCopied
	}
	// The answer goes first: the sender need not wait for the bookkeeping.
	r, aerr := c.postAnswer(t, cell, answer)
	ord.holdRef(ctx, h, ref)
	if answer == ackOrdered {
		ord.receives.Add(1)
	}
	c.ipc.got.Add(1)
	c.nodeGot.Add(1)
	if aerr != nil {
		return false, aerr
	}
	return c.settled(o, t, []*mpi.Request{r})
}

// streamFailed ends a receive whose own stream failed (err, the
// communicator broken by waitStreamIn) once got bytes came into cell: a
// sender that waits for an answer (an IPC control message) is told
// ackMismatch, so that its call ends instead of waiting, a staged one's
// chunks received and dropped first; the receive's error says why.
func (c *Comm) streamFailed(o *op, t transfer, cell devmem.Buffer, got int, err error) (keep bool, _ error) {
	ctl := cellBytes(cell, 0, min(got, c.ipc.room))
	if !c.isControl(ctl, got) {
		return false, err
	}
	return c.refuseDrained(o, t, cell, ctl, err)
}

// orderedControl returns a control message of got bytes in cell from a
// sender ordered on the GPU that asks for nothing but the copy: the right
// length, magic and count, and the flag.
func orderedControl(t transfer, cell devmem.Buffer, got int) (ctl []byte, ok bool) {
	if got != ctlLen {
		return nil, false
	}
	ctl = cellBytes(cell, 0, ctlLen)
	if binary.LittleEndian.Uint64(ctl) != ctlMagic || int(binary.LittleEndian.Uint64(ctl[8:])) != t.bytes ||
		binary.LittleEndian.Uint64(ctl[16:]) != ctlOrdered {
		return nil, false
	}
	return ctl, true
}

func eventHandleAt(ctl []byte, at int) (h devmem.IPCEventHandle) {
	copy(h[:], ctl[at:])
	return h
}

// openSender opens the sender's buffer, named by the handle raw, through
// the cache.
func (c *Comm) openSender(t transfer, raw []byte) (*ipccache.Ref, error) {
	var h devmem.IPCHandle
	if err := h.UnmarshalBinary(raw); err != nil {
		return nil, err
	}
	if h.Size() != t.bytes {
		return nil, fmt.Errorf("%v: the handle names %d bytes: %w", t, h.Size(), comm.ErrMismatch)
	}
	return c.ipc.cache.Open(h)
}

// releaseRef releases ref, if any.
func releaseRef(ref *ipccache.Ref) error {
	if ref == nil {
		return nil
	}
	return ref.Release()
}

// holdRef keeps ref until an event recorded on h after the copy queued
// there is done; where no event can be recorded, it waits for h and lets
// ref go now (its errors are the stream's, which its next Synchronize
// reports).
func (p *p2pOrder) holdRef(ctx cuda.Context, h cuda.Stream, ref *ipccache.Ref) {
	p.reap(false)
	ev := p.callEvent()
	if ev != nil && cuda.EventRecordIn(ctx, cuda.Event(devhook.EventHandle(ev)), h) != nil {
		p.putBack(ev)
		ev = nil
	}
	if ev == nil {
		cuda.StreamSynchronizeIn(ctx, h)
		ref.Release()
		return
	}
	p.keep(ev, []*ipccache.Ref{ref})
}

// copyAfterReady is a host-ordered receive's end for a control message
// ctl from a sender ordered on the GPU: the copy waits for the sender's
// ready, and the receiver answers once it is done.
func (c *Comm) copyAfterReady(o *op, t transfer, cell devmem.Buffer, ctl []byte) (keep bool, err error) {
	ord := c.ipc.p2p
	if ord == nil {
		// Not possible where the ranks agreed at Open; the sender then
		// sends through the pipeline.
		return c.restage(o, t, cell, errors.New("the IPC events are off on this rank"))
	}
	ready, err := ord.open(eventHandleAt(ctl, ctlReadyAt))
	if err == nil {
		err = c.ipc.batch.s.WaitEvent(ready)
	}
	if err == nil {
		err = c.ipcCopy(t, ctl[ctlHandleAt:ctlReadyAt])
	}
	if err != nil {
		return c.restage(o, t, cell, err)
	}
	ord.afterReady.Add(1)
	c.ipc.got.Add(1)
	c.nodeGot.Add(1)
	return c.answer(o, t, cell, ackCopied)
}
