package mpicomm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/ipccache"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/nodepath"
)

// The IPC path (issue 22): in Staged mode, a message of at least nodeMin
// bytes between two ranks of a node whose devices reach each other (the
// same GPU, GPUs with peer access, or the host device's shared memory)
// moves in one device copy. The sender exports its buffer (devmem Export)
// and sends a small control message over MPI, on the message's own
// communicator and tag; the receiver opens the handle through its cache of
// opened handles (internal/ipccache), copies the sender's bytes into its own
// buffer and answers with an acknowledgement, on a communicator of its own
// (ackP2P, ackColl), with the same tag. MPI carries only those two small
// messages.
//
// Stream order: both sides run in stream order on their call's stream
// (devhook.HostCall), so the sender's earlier work on its stream is complete before
// it sends the control message, and the receiver's before it copies; the
// sender's call completes with the acknowledgement, after the copy is
// complete, so the sender may then reuse its buffer.
//
// Where a side cannot (a buffer that cannot be exported, such as pinned
// memory from AllocPinned; a handle that does not open), the control
// message or the acknowledgement says so and that message goes through the
// host-staged pipeline instead, with the same tag. The pair's path is the
// same on both sides: whether the pair reaches (probeIPC, at Open) and
// whether the message is of nodeMin bytes or more; counts that differ
// across that size are ErrMismatch, as on the ring.
//
// It takes the place of the node path's ring (node.go) for the pairs it
// serves. GPUCOMM_NODE_BYTES=off turns both off; GPUCOMM_NODE_IPC=off this
// one only (pairs then take the ring).

// IPCEnv turns the IPC path off ("off", "0", "false") on the rank that
// sets it, and so for every pair that rank is part of.
const IPCEnv = "GPUCOMM_NODE_IPC"

// ipcWanted reads IPCEnv.
func ipcWanted() (bool, error) { return envOnOff(IPCEnv, true) }

// envOnOff reads the on/off knob name: unset when it is unset or empty; an
// error wrapping ErrInvalidArgument for a word other than on, 1, true, off,
// 0 or false (any case, blanks around).
func envOnOff(name string, unset bool) (bool, error) {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(name))); v {
	case "":
		return unset, nil
	case "on", "1", "true":
		return true, nil
	case "off", "0", "false":
		return false, nil
	default:
		return false, fmt.Errorf("%s=%q: want on or off: %w", name, v, comm.ErrInvalidArgument)
	}
}

// The control message, little-endian: magic, the message's bytes, flags,
// and the handle (zero when ctlStaged).
const (
	ctlMagic  = 0x6763495043746c31 // "gcIPCtl1"
	ctlLen    = 352                // never nodepath.HdrLen: the two are told apart by length
	ctlStaged = 1                  // no handle: the data follows through the pipeline
	ackLen    = 8
)

// The receiver's answers.
const (
	ackCopied   = 1 // the bytes are in the receiver's buffer
	ackStage    = 2 // send them through the pipeline: the handle did not open here
	ackMismatch = 3 // the receiver expected another count: nothing more comes
)

func init() {
	if ctlLen == nodepath.HdrLen || ctlEnd > ctlLen {
		panic("mpicomm: the IPC control message's length must differ from the node path header's and hold a handle and two events'")
	}
	// A staged receive's first slot is at least a chunk (the pool's
	// smallest class), and it takes an IPC control message whole only if
	// the message fits: one that did not would end as MPI's truncation,
	// not as refuseControl's ErrMismatch with the sender answered.
	if ctlLen > comm.MinChunkBytes || nodepath.HdrLen > comm.MinChunkBytes {
		panic("mpicomm: the IPC control message and the node path header must fit the smallest chunk")
	}
}

// ipcPath is a Comm's IPC state.
type ipcPath struct {
	reach   []bool           // by rank: the pair reaches each other (both sides agree)
	cache   *ipccache.Handle // this Comm's share of the process's cache of the device
	copies  *devmem.Stream   // the collectives' copies and folds (ipcpath_reduce.go)
	batch   *copyBatch       // the receivers' copies, on a stream of their own, waited for together
	ackP2P  *mpi.Comm        // acknowledgements of the user's messages (dup of p2p)
	ackColl *mpi.Comm        // and of collectives' blocks (dup of coll)
	room    int              // bytes a control cell receives into

	cellMu sync.Mutex
	free   []devmem.Buffer // pinned cells: room bytes, then the acknowledgement
	all    []devmem.Buffer

	sent, got, staged atomic.Int64   // messages through the path; those that fell back to the pipeline
	collectives       atomic.Int64   // reductions and broadcasts through the path (ipcpath_reduce.go)
	windows           atomic.Int64   // GroupP2Ps whose messages moved together (ipcwindow.go)
	scratch           devmem.Buffer  // reductions' parts, folded before they are copied out (host device, more ranks than kernels.Reduce takes)
	scratchWas        int            // the size of the last scratch
	why               string         // why this rank reaches no one, when it does not
	peerWhy           map[int]string // by rank: why the pair has no IPC path, as the probe found
	order             *ipcOrder      // stream-ordered reductions ordered on the GPU (ipcpath_ordered.go); nil: on the host
	p2p               *p2pOrder      // messages on a stream ordered on the GPU (ipcpath_p2pordered.go); nil: on the host
	sharedGPU         bool           // two ranks of the communicator or more are on one GPU (as setUpP2POrder found)
}

// ipcFor reports whether a message of bytes bytes to or from peer takes the
// IPC path. Both sides of a pair answer alike for the same size.
func (c *Comm) ipcFor(peer, bytes int) bool {
	return c.ipc.cache != nil && c.nodeMin > 0 && bytes >= c.nodeMin && peer != c.rank && c.ipc.reach[peer]
}

// ackOn is the communicator of on's acknowledgements.
func (c *Comm) ackOn(on *mpi.Comm) *mpi.Comm {
	if on == c.p2p {
		return c.ipc.ackP2P
	}
	return c.ipc.ackColl
}

// IPCMessages counts the messages this rank sent and received through the
// IPC path, and (staged) those of them that went through the pipeline after
// all (a buffer that could not be exported or opened), with the collectives
// that did.
func (c *Comm) IPCMessages() (sent, received, staged int64) {
	return c.ipc.sent.Load(), c.ipc.got.Load(), c.ipc.staged.Load()
}

// IPCWindows is how many operations' IPC messages moved together, on one
// goroutine (ipcWindow): GroupP2Ps of two messages or more on the path.
func (c *Comm) IPCWindows() int64 { return c.ipc.windows.Load() }

// IPCCollectives counts the collectives this rank ran through the IPC path
// (reductions, Broadcast, and the blocks of AllGather, Gather, Scatter and
// AllToAll); IPCAll reports whether they can (every rank of the
// communicator on one node, every pair reaching).
func (c *Comm) IPCCollectives() int64 { return c.ipc.collectives.Load() }

// IPCAll reports whether collectives go through the IPC path (from nodeMin
// bytes): every rank of the communicator is on this node and reaches every
// other, as the ranks agreed.
func (c *Comm) IPCAll() bool { return c.ipcAll }

// IPCCache is the counters of the cache of peer buffers opened, which
// every communicator of the process on the device shares: Hits, Misses and
// InUse are this communicator's, the rest the shared cache's; the zero
// Stats when the IPC path is off.
func (c *Comm) IPCCache() ipccache.Stats {
	if c.ipc.cache == nil {
		return ipccache.Stats{}
	}
	if ord := c.ipc.order; ord != nil {
		// What GPU-ordered reductions hold for their kernels goes once
		// they are done: after a Synchronize of their streams, nothing is
		// counted in use.
		ord.reap(false)
	}
	if p := c.ipc.p2p; p != nil {
		p.reap(false) // and what GPU-ordered receives hold for their copies
	}
	return c.ipc.cache.Stats()
}

// Unreceived reports whether a message of peer's waits on the
// point-to-point communicator that no receive has taken (MPI_Iprobe, any
// tag): for tests that a refused message left nothing behind.
func (c *Comm) Unreceived(peer int) (bool, error) {
	found, _, err := c.p2p.Iprobe(peer, mpi.AnyTag, mpi.Byte)
	return found, err
}

// IPCPeers reports, by rank, which ranks this rank reaches through the IPC
// path (nil when it is off): for gpucomm info.
func (c *Comm) IPCPeers() []bool {
	if c.ipc.cache == nil {
		return nil
	}
	return append([]bool(nil), c.ipc.reach...)
}

// probeIPC finds, once at Open, which ranks of the node reach each other's
// device memory: each exports a small buffer of its device holding a
// pattern, and opens and reads every other's. A pair reaches when both
// sides read the other's; the rows are gathered, so both sides agree.
// mates maps node ranks to ranks. Every rank of node calls it; one that
// does not want the path takes part with no buffer. It returns nil when
// this rank reaches no one.
func (c *Comm) probeIPC(node *mpi.Comm, mates []int64, want bool) ([]bool, error) {
	me := node.Rank()
	var mine []byte
	var buf devmem.Buffer
	if want {
		var err error
		if buf, err = c.dev.Alloc(8); err == nil {
			if err = devmem.CopyFromHost(buf, probePattern(me), nil); err == nil {
				var h devmem.IPCHandle
				if h, err = buf.Export(); err == nil {
					mine, _ = h.MarshalBinary()
				}
			}
		}
		if err != nil && !buf.IsZero() {
			buf.Free()
			buf = devmem.Buffer{}
		}
	}
	all, err := mpi.AllgatherBytes(node, mine)
	row := make([]byte, node.Size())
	if err == nil && mine != nil {
		// Through the process's cache, as the path's opens: a stale entry
		// of memory a peer freed where its probe buffer now is gives way.
		if hd, herr := ipccache.Shared(c.dev, ipccache.Limits{}); herr == nil {
			for r, raw := range all {
				if r != me && len(raw) > 0 && c.probeRead(hd, raw, r) == nil {
					row[r] = 1
				}
			}
			hd.Close()
		}
	}
	var rows [][]byte
	if err == nil {
		rows, err = mpi.AllgatherBytes(node, row)
	}
	// No rank frees its buffer before every rank has read the others'.
	err = errors.Join(err, node.Barrier())
	if !buf.IsZero() {
		err = errors.Join(err, buf.Free())
	}
	if err != nil {
		return nil, err
	}
	var reach []bool
	c.ipc.peerWhy = map[int]string{}
	for q := range rows {
		switch {
		case q == me:
		case len(rows[q]) > me && rows[me][q] == 1 && rows[q][me] == 1:
			if reach == nil {
				reach = make([]bool, c.size)
			}
			reach[mates[q]] = true
		case mine == nil:
		case len(all[q]) == 0:
			c.ipc.peerWhy[int(mates[q])] = "that rank offers none (" + IPCEnv + "=off there, or its device cannot share memory)"
		case rows[me][q] == 0:
			c.ipc.peerWhy[int(mates[q])] = "this rank cannot open that rank's device memory (different GPUs without peer access?)"
		default:
			c.ipc.peerWhy[int(mates[q])] = "that rank cannot open this rank's device memory (different GPUs without peer access?)"
		}
	}
	return reach, nil
}

func probePattern(r int) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, 0x1b0e_5a5a_0000_0000|uint64(r))
	return b
}

func (c *Comm) probeRead(hd *ipccache.Handle, raw []byte, r int) error {
	var h devmem.IPCHandle
	if err := h.UnmarshalBinary(raw); err != nil {
		return err
	}
	ref, err := hd.Open(h)
	if err != nil {
		return err
	}
	got := make([]byte, 8)
	err = devmem.CopyToHost(got, ref.Buf, nil)
	if rerr := ref.Release(); err == nil {
		err = rerr
	}
	if err == nil && string(got) != string(probePattern(r)) {
		err = fmt.Errorf("local rank %d's buffer reads %x", r, got)
	}
	return err
}

// setUpIPC makes what the path needs once the ranks agreed some pair has
// it: every rank of c calls it (the dups are collective).
func (c *Comm) setUpIPC(reach []bool) error {
	var err error
	if c.ipc.ackP2P, err = c.p2p.Dup(); err != nil {
		return err
	}
	if c.ipc.ackColl, err = c.coll.Dup(); err != nil {
		return err
	}
	if reach == nil {
		return nil // this rank reaches no one: ipcFor stays false
	}
	if c.ipc.copies, err = c.dev.NewStream(); err != nil {
		return err
	}
	// The receivers' copies have a stream of their own: a synchronize
	// reports the first error since the one before it, and a
	// collective's synchronize must not take a receiver's.
	s, err := c.dev.NewStream()
	if err != nil {
		return err
	}
	c.ipc.batch = newCopyBatch(s)
	if c.ipc.cache, err = ipccache.Shared(c.dev, ipccache.Limits{}); err != nil {
		return err
	}
	c.ipc.reach = reach
	// A control cell also takes the first chunk a sender below nodeMin
	// sends instead (its count differs), so that it is told apart whole.
	c.ipc.room = max(ctlLen, nodepath.HdrLen+1, min(c.nodeMin, c.chunk))
	return nil
}

// closeIPC releases the path's cells, cache, streams and communicators.
func (c *Comm) closeIPC() error {
	var errs []error
	if c.ipc.order != nil {
		// Before the cache: the kernels still queued use what it holds.
		errs = append(errs, c.ipc.order.destroy())
		c.ipc.order = nil
	}
	if c.ipc.p2p != nil {
		errs = append(errs, c.ipc.p2p.destroy())
		c.ipc.p2p = nil
	}
	c.ipc.cellMu.Lock()
	for _, b := range c.ipc.all {
		errs = append(errs, b.Free())
	}
	c.ipc.all, c.ipc.free = nil, nil
	c.ipc.cellMu.Unlock()
	if c.ipc.cache != nil {
		errs = append(errs, c.ipc.cache.Close())
	}
	if !c.ipc.scratch.IsZero() {
		errs = append(errs, c.ipc.scratch.Free())
	}
	if c.ipc.batch != nil {
		errs = append(errs, c.ipc.batch.s.Destroy())
	}
	if c.ipc.copies != nil {
		errs = append(errs, c.ipc.copies.Destroy())
	}
	for _, m := range []*mpi.Comm{c.ipc.ackP2P, c.ipc.ackColl} {
		if m != nil {
			errs = append(errs, m.Free())
		}
	}
	return errors.Join(errs...)
}

// cell is a pinned control cell: room bytes for the control message, then
// the acknowledgement.
func (c *Comm) cell() (devmem.Buffer, error) {
	c.ipc.cellMu.Lock()
	defer c.ipc.cellMu.Unlock()
	if n := len(c.ipc.free); n > 0 {
		b := c.ipc.free[n-1]
		c.ipc.free = c.ipc.free[:n-1]
		return b, nil
	}
	b, err := c.dev.AllocPinned(c.ipc.room + ackLen)
	if err != nil {
		return b, err
	}
	c.ipc.all = append(c.ipc.all, b)
	return b, nil
}

// putCell gives a cell back; a cell MPI may still write into (a request
// left pending) is never given back.
func (c *Comm) putCell(b devmem.Buffer) {
	c.ipc.cellMu.Lock()
	c.ipc.free = append(c.ipc.free, b)
	c.ipc.cellMu.Unlock()
}

func cellBytes(b devmem.Buffer, off, n int) []byte {
	all, _ := b.Bytes()
	return all[off : off+n]
}

// ipcMove runs one transfer through the IPC path.
func (c *Comm) ipcMove(o *op, t transfer) error {
	return c.inCell(o, t, func(cell devmem.Buffer) (bool, error) {
		if t.send {
			return c.ipcSend(o, t, cell)
		}
		return c.ipcRecv(o, t, cell)
	})
}

// inCell runs move, one transfer's end on the IPC path, with a control
// cell, which goes back after it unless MPI may still write into it
// (move's keep: a request still pending).
func (c *Comm) inCell(o *op, t transfer, move func(cell devmem.Buffer) (keep bool, err error)) error {
	cell, err := c.cell()
	if err != nil {
		return err
	}
	keep, err := move(cell)
	if !keep {
		c.putCell(cell)
	}
	return c.explainTimeout(o, t, err)
}

// settled waits for reqs; on a failure with requests still pending the
// ranks are out of step and the cell stays MPI's.
func (c *Comm) settled(o *op, t transfer, reqs []*mpi.Request) (bool, error) {
	err := c.wait(o, reqs)
	if err == nil {
		return false, nil
	}
	return c.unsettled(t, reqs, err), err
}

// unsettled is a failed wait's end: whether the cell must be kept because a
// request is still pending (the communicator is then broken).
func (c *Comm) unsettled(t transfer, reqs []*mpi.Request, err error) (keep bool) {
	return c.unsettledOn("the IPC path", t, reqs, err)
}

// unsettledOn is unsettled for a request of t's on where (the IPC path, the
// pipeline), which the broken communicator's error names.
func (c *Comm) unsettledOn(where string, t transfer, reqs []*mpi.Request, err error) (keep bool) {
	if done, terr := mpi.Testall(reqs); terr == nil && done {
		return false
	}
	c.setBroken(fmt.Errorf("%v stopped half way through %s: %w", t, where, err))
	return true
}

func (c *Comm) ipcSend(o *op, t transfer, cell devmem.Buffer) (keep bool, err error) {
	return c.sendControl(o, t, cell, c.fillControl(t, cell))
}

// sendControl is a send's end once fillControl has written its control
// message into cell: the message and the acknowledgement, and the bytes
// through the pipeline where it says so (staged) or the answer asks.
func (c *Comm) sendControl(o *op, t transfer, cell devmem.Buffer, staged bool) (keep bool, err error) {
	reqs, keep, err := c.postSend(o, t, cell)
	if err != nil {
		return keep, err
	}
	if staged {
		c.ipc.staged.Add(1)
		if err := c.stagedMove(o, t); err != nil {
			c.setBroken(fmt.Errorf("%v stopped half way through the IPC path's fallback: %w", t, err))
			return true, err
		}
	}
	if keep, err := c.settled(o, t, reqs[:]); err != nil {
		return keep, err
	}
	return false, c.ipcAcked(o, t, binary.LittleEndian.Uint64(cellBytes(cell, c.ipc.room, ackLen)))
}

// fillControl writes t's control message into cell: its buffer's handle,
// or where it cannot be exported the flag that says the bytes follow
// through the pipeline (staged).
func (c *Comm) fillControl(t transfer, cell devmem.Buffer) (staged bool) {
	ctl := cellBytes(cell, 0, ctlLen)
	clear(ctl)
	binary.LittleEndian.PutUint64(ctl[0:], ctlMagic)
	binary.LittleEndian.PutUint64(ctl[8:], uint64(t.bytes))
	if h, err := c.exportRange(t.buf, t.bytes); err == nil {
		raw, _ := h.MarshalBinary()
		copy(ctl[ctlHandleAt:], raw)
		return false
	}
	binary.LittleEndian.PutUint64(ctl[16:], ctlStaged)
	return true
}

// postSend posts a send's receive of the acknowledgement, then its control
// message: the requests (control, acknowledgement) once both are posted.
func (c *Comm) postSend(o *op, t transfer, cell devmem.Buffer) (reqs [2]*mpi.Request, keep bool, err error) {
	peer := t.peers[0]
	clear(cellBytes(cell, c.ipc.room, ackLen))
	ackReq, err := c.ackOn(t.on).Irecv(cell.Addr()+uintptr(c.ipc.room), ackLen, mpi.Byte, peer, t.tag)
	if err != nil {
		return reqs, false, err
	}
	ctlReq, err := t.on.Isend(cell.Addr(), ctlLen, mpi.Byte, peer, t.tag)
	if err != nil {
		ackReq.Cancel()
		keep, _ := c.settled(o, t, []*mpi.Request{ackReq})
		return reqs, keep, err
	}
	return [2]*mpi.Request{ctlReq, ackReq}, false, nil
}

// ipcAcked is a send's end once the receiver's answer a has come.
func (c *Comm) ipcAcked(o *op, t transfer, a uint64) error {
	peer := t.peers[0]
	switch a {
	case ackCopied:
	case ackMismatch:
		return nil // as with MPI, the send completes; the receive says why
	case ackStage:
		c.ipc.staged.Add(1)
		if err := c.stagedMove(o, t); err != nil {
			return err
		}
	default:
		err := fmt.Errorf("%v: rank %d answered %d to the IPC control message: %w", t, peer, a, comm.ErrMismatch)
		c.setBroken(err)
		return err
	}
	c.ipc.sent.Add(1)
	c.nodeSent.Add(1)
	return nil
}

// exportRange exports the first n bytes of b.
func (c *Comm) exportRange(b devmem.Buffer, n int) (devmem.IPCHandle, error) {
	v, err := b.Slice(0, n)
	if err != nil {
		return devmem.IPCHandle{}, err
	}
	return v.Export()
}

func (c *Comm) ipcRecv(o *op, t transfer, cell devmem.Buffer) (keep bool, err error) {
	got, keep, err := c.recvControl(o, t, cell)
	if err != nil {
		return keep, err
	}
	return c.ipcControl(o, t, cell, got)
}

// recvControl receives t's control message (or whatever the sender sent
// in its place) into cell: the bytes that came.
func (c *Comm) recvControl(o *op, t transfer, cell devmem.Buffer) (got int, keep bool, err error) {
	req, err := t.on.Irecv(cell.Addr(), c.ipc.room, mpi.Byte, t.peers[0], t.tag)
	if err != nil {
		return 0, false, err
	}
	if keep, err := c.settled(o, t, []*mpi.Request{req}); err != nil {
		return 0, keep, err
	}
	return req.Status().Count, false, nil
}

// refuseDrained is refuse for the control message ctl in cell, whose bytes,
// where it is staged, come through MPI after it: they are received and
// dropped first (drainStaged), so that the sender's send completes and
// nothing of the message stays in flight. Where that fails the
// communicator is broken, and the cell is no longer MPI's either way.
func (c *Comm) refuseDrained(o *op, t transfer, cell devmem.Buffer, ctl []byte, err error) (keep bool, _ error) {
	if binary.LittleEndian.Uint64(ctl[16:]) == ctlStaged {
		if derr := c.drainStaged(o, t, int(binary.LittleEndian.Uint64(ctl[8:]))); derr != nil {
			return false, errors.Join(err, derr)
		}
	}
	return c.refuse(o, t, cell, err)
}

// refuse ends a receive that does not take the sender's message (err): the
// sender, which waits for an answer, is told ackMismatch, so that its call
// ends.
func (c *Comm) refuse(o *op, t transfer, cell devmem.Buffer, err error) (keep bool, _ error) {
	if keep, aerr := c.answer(o, t, cell, ackMismatch); aerr != nil {
		return keep, errors.Join(err, aerr)
	}
	return false, err
}

// ipcControl is a receive's end once a message of got bytes has come into
// cell: the copy and the acknowledgement, or the fallback that the message
// or this side's copy calls for.
func (c *Comm) ipcControl(o *op, t transfer, cell devmem.Buffer, got int) (keep bool, err error) {
	if raw, plain := c.plainControl(t, cell, got); plain {
		if err := c.ipcCopy(t, raw); err != nil {
			return c.restage(o, t, cell, err)
		}
		c.ipc.got.Add(1)
		c.nodeGot.Add(1)
		return c.answer(o, t, cell, ackCopied)
	}
	peer := t.peers[0]
	ctl := cellBytes(cell, 0, min(got, c.ipc.room))
	if got != ctlLen || binary.LittleEndian.Uint64(ctl) != ctlMagic {
		if bytes, ok := announcement(ctl, got); ok {
			// The sender sent below nodeMin, through the pipeline, and
			// announced its chunks: they are dropped.
			return false, c.dropAnnounced(o, t, bytes)
		}
		// The sender sent below nodeMin, through the pipeline: its first
		// chunk is here, and the rest (if any) will never be received.
		if got >= c.chunk {
			c.setBroken(fmt.Errorf("%v: rank %d sent chunks through MPI that no receive takes", t, peer))
		}
		return false, fmt.Errorf("%v: rank %d sent a message of %d bytes through MPI, not through the node path; the sender's count differs: %w",
			t, peer, got, comm.ErrMismatch)
	}
	if bytes := int(binary.LittleEndian.Uint64(ctl[8:])); bytes != t.bytes {
		return c.refuseDrained(o, t, cell, ctl, fmt.Errorf("%v: rank %d sent %d bytes through the IPC path; the sender's count differs: %w",
			t, peer, bytes, comm.ErrMismatch))
	}
	switch flags := binary.LittleEndian.Uint64(ctl[16:]); flags {
	case ctlOrdered:
		return c.copyAfterReady(o, t, cell, ctl)
	case ctlStaged:
	default:
		// Not a control message this build sends: the sender is told, so
		// that its call ends (nothing follows a control message but a
		// staged one's chunks), and this receive fails.
		return c.refuse(o, t, cell, fmt.Errorf("%v: rank %d sent an IPC control message with flags %#x, which this build does not know: %w",
			t, peer, flags, comm.ErrMismatch))
	}
	// What is left (not plainControl's) is staged: the bytes follow
	// through the pipeline.
	c.ipc.staged.Add(1)
	if err := c.stagedMove(o, t); err != nil {
		return false, err
	}
	return c.answer(o, t, cell, ackCopied)
}

// restage is a receive's end when the handle did not open here or the copy
// failed (err): the sender sends the bytes again through the pipeline.
func (c *Comm) restage(o *op, t transfer, cell devmem.Buffer, err error) (keep bool, _ error) {
	c.ipc.staged.Add(1)
	if keep, aerr := c.answer(o, t, cell, ackStage); aerr != nil {
		return keep, errors.Join(err, aerr)
	}
	if err := c.stagedMove(o, t); err != nil {
		return false, err
	}
	c.ipc.got.Add(1)
	c.nodeGot.Add(1)
	return false, nil
}

// plainControl returns the handle of a control message of got bytes in
// cell that asks for nothing but the copy (ok): the right length, magic and
// count, and not staged. It is the one test of that case, for ipcControl and
// ipcWindow.
func (c *Comm) plainControl(t transfer, cell devmem.Buffer, got int) (raw []byte, ok bool) {
	if got != ctlLen {
		return nil, false
	}
	ctl := cellBytes(cell, 0, ctlLen)
	if binary.LittleEndian.Uint64(ctl) != ctlMagic || int(binary.LittleEndian.Uint64(ctl[8:])) != t.bytes ||
		binary.LittleEndian.Uint64(ctl[16:]) != 0 { // staged, or ordered (copyAfterReady)
		return nil, false
	}
	return ctl[ctlHandleAt:ctlReadyAt], true
}

// ipcCopy opens the sender's buffer through the cache and copies it into
// t's, waiting for the copy.
func (c *Comm) ipcCopy(t transfer, raw []byte) error {
	ref, g, err := c.ipcIssue(t, raw)
	if err != nil {
		return err
	}
	err = c.ipc.batch.await(g)
	return errors.Join(err, ref.Release())
}

// ipcIssue opens the sender's buffer through the cache and queues its copy
// into t's on the batch's stream: the copy is done once g is awaited, and
// ref must be released after that.
func (c *Comm) ipcIssue(t transfer, raw []byte) (ref *ipccache.Ref, g *copyGen, err error) {
	if ref, err = c.openSender(t, raw); err != nil {
		return nil, nil, err
	}
	if g, err = c.ipc.batch.issue(t.buf, ref.Buf, t.bytes); err != nil {
		return nil, nil, errors.Join(err, ref.Release())
	}
	return ref, g, nil
}

// answer sends the receiver's acknowledgement and waits for it to go.
func (c *Comm) answer(o *op, t transfer, cell devmem.Buffer, a uint64) (bool, error) {
	r, err := c.postAnswer(t, cell, a)
	if err != nil {
		return false, err
	}
	return c.settled(o, t, []*mpi.Request{r})
}

// postAnswer writes the acknowledgement a into cell and posts its send.
func (c *Comm) postAnswer(t transfer, cell devmem.Buffer, a uint64) (*mpi.Request, error) {
	binary.LittleEndian.PutUint64(cellBytes(cell, c.ipc.room, ackLen), a)
	return c.ackOn(t.on).Isend(cell.Addr()+uintptr(c.ipc.room), ackLen, mpi.Byte, t.peers[0], t.tag)
}

// refuseControl is a staged receive's answer to an IPC control message (the
// sender's count was above nodeMin, this receive's below): the sender is
// told, so that its call completes with ErrMismatch as this one does, and
// nothing else of the message stays in flight. Where the message's bytes
// follow through the pipeline (the sender's buffer could not be exported),
// they are received and dropped first, if this receive is one chunk (the
// pipeline then posted no other receive of the tag, which could take one of
// them) or alone (the control message came to a receive posted by itself,
// recvAnnounced's); a longer receive, or an answer that could not be sent,
// breaks the communicator instead, as when the ring path's counts differ.
func (c *Comm) refuseControl(o *op, t transfer, ctl []byte, alone bool) error {
	bytes := int(binary.LittleEndian.Uint64(ctl[8:]))
	err := fmt.Errorf("%v: rank %d sent %d bytes through the IPC path; the sender's count differs: %w", t, t.peers[0], bytes, comm.ErrMismatch)
	if binary.LittleEndian.Uint64(ctl[16:]) == ctlStaged {
		if !alone && len(c.cut(t.bytes, t.dt.Size()).Spans(t.bytes, true)) > 1 {
			err = fmt.Errorf("%w; its bytes follow through the pipeline, where this receive has posted more than one chunk", err)
			c.setBroken(err)
			return err
		}
		if derr := c.drainStaged(o, t, bytes); derr != nil {
			return errors.Join(err, derr) // the communicator is broken
		}
	}
	cell, cerr := c.cell()
	if cerr != nil {
		err = errors.Join(err, cerr)
		c.setBroken(err)
		return err
	}
	keep, aerr := c.answer(o, t, cell, ackMismatch)
	if !keep {
		c.putCell(cell)
	}
	if aerr != nil {
		err = errors.Join(err, aerr)
		c.setBroken(err)
	}
	return err
}

// drainStaged receives and drops the bytes bytes that a staged sender sends
// after its control message (its chunks on t's tag, none larger than the
// message or the policy's largest chunk; one empty chunk for an empty
// message), so that its send completes and nothing of the message stays in
// flight. Only where no other receive of t's tag is posted. Where a receive
// fails, the communicator is broken, and a slot that MPI may still write
// (a receive left pending) stays MPI's, out of the pool.
func (c *Comm) drainStaged(o *op, t transfer, bytes int) error {
	room := max(1, min(c.policy().Cut(1).MaxChunk, bytes))
	s, err := c.eng.Pool.Take(room)
	if err != nil {
		err = fmt.Errorf("%v: no slot to drop the sender's chunks: %w", t, err)
		c.setBroken(err)
		return err
	}
	for got, first := 0, true; first || got < bytes; first = false {
		r, err := t.on.Irecv(s.Buf.Addr(), room, mpi.Byte, t.peers[0], t.tag)
		if err == nil {
			var keep bool
			if keep, err = c.settled(o, t, []*mpi.Request{r}); keep {
				return err // broken: MPI may still write the slot
			}
		}
		if err != nil {
			c.eng.Pool.Give(s)
			err = fmt.Errorf("%v: dropping the sender's chunks: %w", t, err)
			c.setBroken(err)
			return err
		}
		n := r.Status().Count
		if n == 0 {
			break
		}
		got += n
	}
	c.eng.Pool.Give(s)
	return nil
}

// isControl reports whether b, a message of got bytes, is an IPC control
// message: its length, its magic, and a count that the IPC path takes (at
// least nodeMin), which a receive under nodeMin (a staged one, where this
// is asked) never expects, so that a data message that happens to look like
// one is not refused.
func (c *Comm) isControl(b []byte, got int) bool {
	return got == ctlLen && len(b) >= ctlLen && binary.LittleEndian.Uint64(b) == ctlMagic &&
		c.nodeMin > 0 && binary.LittleEndian.Uint64(b[8:]) >= uint64(c.nodeMin)
}

// reachesAll reports whether reach holds every rank but me.
func reachesAll(reach []bool, me int) bool {
	if reach == nil {
		return false
	}
	for q, ok := range reach {
		if q != me && !ok {
			return false
		}
	}
	return true
}

// NodeRoutes says, for every other rank, which way a message of NodeBytes
// or more to it goes and why: for gpucomm info.
func (c *Comm) NodeRoutes() []string {
	var out []string
	for q := range c.size {
		if q == c.rank {
			continue
		}
		var how string
		switch {
		case c.onNode == nil || !c.onNode[q]:
			how = "MPI (host-staged): another node"
		case c.nodeMin <= 0:
			how = "MPI (host-staged): the node path is off (GPUCOMM_NODE_BYTES=off on some rank, or the ranks cannot map each other's pinned memory)"
		case c.ipcFor(q, c.nodeMin):
			how = fmt.Sprintf("IPC from %d bytes: one device copy, the devices reach each other (same device, peer access or shared memory)", c.nodeMin)
		default:
			why := c.ipc.why
			if why == "" {
				why = c.ipc.peerWhy[q]
			}
			if why == "" {
				why = "the devices cannot open each other's memory (different GPUs without peer access), or " + IPCEnv + "=off on that rank"
			}
			how = fmt.Sprintf("pinned ring from %d bytes: no IPC: %s", c.nodeMin, why)
		}
		out = append(out, fmt.Sprintf("rank %d: %s", q, how))
	}
	return out
}

// CollectiveRoute says which way reductions and Broadcast of NodeBytes or
// more go and why: for gpucomm info.
func (c *Comm) CollectiveRoute() string {
	switch {
	case c.nodeMin <= 0:
		return "reductions and Broadcast: MPI (host-staged): the node path is off"
	case c.ipcAll:
		return fmt.Sprintf("reductions and Broadcast: IPC from %d bytes: every rank reads its peers' buffers on the device (every rank is on this node and reaches every other); so do the blocks of AllGather, Gather, Scatter and AllToAll", c.nodeMin)
	default:
		return "reductions and Broadcast: MPI (host-staged): not every rank of the communicator is on this node and reaches every other through IPC"
	}
}
