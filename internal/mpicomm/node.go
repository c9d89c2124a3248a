package mpicomm

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/nodepath"
)

// The node path (internal/nodepath): a staged point-to-point message of at
// least nodeMin bytes between two ranks of one node goes through a ring of
// pinned memory both processes map, not through MPI's own shared-memory
// copies. MPI carries one small header a message, on the point-to-point
// communicator with the message's own tag, so that the k-th receive from a
// peer still matches the k-th send to it; this file hands out the turns,
// moves the header and counts what was sent.

// nodeTurnFor says whether a message of bytes bytes to (send) or from peer
// goes the node path and, if so, takes its turn on the pair's link. Called
// in the order the messages were called: under peerMu, for the user's
// messages at the call; for a collective's, in its body, which every rank
// runs in ticket order.
func (c *Comm) nodeTurnFor(peer int, send, coll bool, bytes int) (nodepath.Turn, bool) {
	if c.nodeMin <= 0 || peer == c.rank || !c.onNode[peer] || bytes < c.nodeMin {
		return nodepath.Turn{}, false
	}
	return c.nodes.Take(nodepath.Key{Peer: peer, Send: send, Coll: coll}), true
}

// takenWarn is how long awaitTaken waits before it says on standard error
// whom it waits for.
var takenWarn = 10 * time.Second

// awaitTaken returns once every rank this rank sent node path messages to
// has taken all their chunks out of the ring: the ring is this process's
// memory, so freeing it (Close) or exiting before then would lose messages
// whose sends completed, which MPI delivers whatever the sender does next.
// Past limit (when above 0) it fails with ErrTimeout naming the ranks that
// have not taken theirs; without a limit it waits on, and past takenWarn it
// says once on standard error whom it waits for. No operation runs on c
// meanwhile (Close) or c is held open (AwaitNodeMessages).
func (c *Comm) awaitTaken(limit time.Duration) error {
	c.peerMu.Lock()
	all := c.nodes.Owed()
	c.peerMu.Unlock()
	behind := func() []string {
		var who []string
		for _, o := range all {
			if got := o.Taken.Load(); got < o.Sent {
				who = append(who, fmt.Sprintf("rank %d has taken %d of the %d chunks sent it", o.Peer, got, o.Sent))
			}
		}
		return who
	}
	start := time.Now()
	sleep := 10 * time.Microsecond
	for said := false; ; {
		who := behind()
		if len(who) == 0 {
			return nil
		}
		waited := time.Since(start)
		if limit > 0 && waited >= limit {
			return fmt.Errorf("messages this rank sent through the node path were not received within %v (%s); their ring is freed now, so their receives will fail: %w",
				limit, strings.Join(who, "; "), comm.ErrTimeout)
		}
		if !said && waited >= takenWarn {
			fmt.Fprintf(os.Stderr, "gpucomm %s rank %d: Close has waited %v for messages this rank sent through the node path to be received (%s); it waits until they are, since they live in this process's memory\n",
				c.backend, c.rank, takenWarn, strings.Join(who, "; "))
			said = true
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, time.Millisecond)
	}
}

// live is the set of communicators open in this process, for
// AwaitNodeMessages.
var live = liveSet{m: map[*Comm]struct{}{}}

type liveSet struct {
	mu sync.Mutex
	m  map[*Comm]struct{}
}

func (s *liveSet) add(c *Comm)    { s.mu.Lock(); s.m[c] = struct{}{}; s.mu.Unlock() }
func (s *liveSet) remove(c *Comm) { s.mu.Lock(); delete(s.m, c); s.mu.Unlock() }

// AwaitNodeMessages waits, on every communicator still open, until the
// peers have taken the messages this process sent them through the node
// path, as Close does (each bounded by its own timeout): for a program that
// ends MPI (comm/mpi's Finalize) and exits without closing its
// communicators, whose completed sends must still be delivered.
func AwaitNodeMessages() error {
	live.mu.Lock()
	cs := make([]*Comm, 0, len(live.m))
	for c := range live.m {
		cs = append(cs, c)
	}
	live.mu.Unlock()
	var errs []error
	for _, c := range cs {
		if c.beginUnbroken() != nil {
			continue // closed meanwhile (Close waited itself), or broken: nothing is owed
		}
		if err := c.awaitTaken(c.timeout); err != nil {
			errs = append(errs, driver.Wrap(c.backend, "Finalize", c.rank, err))
		}
		c.end()
	}
	return errors.Join(errs...)
}

// outOfStep breaks the communicator when a node path message stopped half
// way: the peer may wait on the ring for chunks or room that never come,
// and Close then ends the job rather than hang.
func (c *Comm) outOfStep(t transfer, err error) {
	c.setBroken(fmt.Errorf("%v stopped half way through the node path: %w", t, err))
}

// nodeMove waits for t's turn on its link, moves t through the ring, and
// passes the turn on; a failure after which the two sides' counters may
// disagree (inStep false) breaks the link and the communicator.
func (c *Comm) nodeMove(o *op, t transfer) (err error) {
	l := t.link
	if err := l.AwaitTurn(o.deadline, t.ticket); err != nil {
		return err
	}
	inStep := true
	defer func() {
		if err != nil && !inStep {
			l.Done(err)
			c.outOfStep(t, err)
			return
		}
		l.Done(nil)
	}()
	if t.send {
		return c.nodeSend(o, t, &inStep)
	}
	return c.nodeRecv(o, t, &inStep)
}

// nodeSend sends t's bytes through the pair's ring.
func (c *Comm) nodeSend(o *op, t transfer, inStep *bool) (err error) {
	l := t.link
	h, err := l.Header(c.dev, c.chunk, t.bytes)
	if err != nil {
		return err
	}
	req, err := t.on.Isend(h.Addr(), nodepath.HdrLen, mpi.Byte, t.peers[0], t.tag)
	if err != nil {
		return err
	}
	*inStep = false // from here the receiver may be taking chunks
	// Below MPI_THREAD_MULTIPLE nothing else drives the header's send.
	progress := func() { mpi.Testall([]*mpi.Request{req}) }
	if err := l.SendChunks(o.deadline, t.buf, t.bytes, c.eng.D2H, progress); err != nil {
		return err
	}
	if err := c.wait(o, []*mpi.Request{req}); err != nil {
		return err
	}
	l.SendDone()
	*inStep = true
	c.nodeSent.Add(1)
	return nil
}

// nodeRecv receives t's bytes through the sender's ring.
func (c *Comm) nodeRecv(o *op, t transfer, inStep *bool) (err error) {
	l := t.link
	room := nodepath.HdrRoom(c.nodeMin, c.chunk)
	hdr, err := l.HeaderRoom(c.dev, room)
	if err != nil {
		return err
	}
	req, err := t.on.Irecv(hdr.Addr(), room, mpi.Byte, t.peers[0], t.tag)
	if err != nil {
		return err
	}
	if err := c.wait(o, []*mpi.Request{req}); err != nil {
		if errors.Is(err, comm.ErrTimeout) {
			// The header receive is still posted: whatever comes next from
			// the peer with this tag would land in it.
			*inStep = false
		}
		return err
	}
	got := req.Status().Count
	if hb, _ := hdr.Bytes(); got == announceLen {
		if bytes, ok := announcement(hb, got); ok {
			// A send below nodeMin through the pipeline, announced: its
			// chunks are dropped, and the ring is untouched.
			return c.dropAnnounced(o, t, bytes)
		}
	}
	bytes, ok, err := l.Accept(c.dev, got, c.chunk)
	if err != nil {
		*inStep = ok
		return fmt.Errorf("%v: %w", t, err)
	}
	*inStep = false
	// A sender whose count differs still sends its chunks: take them out
	// without copying any, so that the ring stays in step, and say so.
	mismatch := bytes != t.bytes
	if err := l.RecvChunks(o.deadline, t.buf, mismatch, bytes, c.eng.H2D); err != nil {
		return err
	}
	*inStep = true
	if mismatch {
		return fmt.Errorf("%v: rank %d sent %d bytes; the sender's count differs: %w", t, t.peers[0], bytes, comm.ErrMismatch)
	}
	c.nodeGot.Add(1)
	return nil
}

// NodeBytes is the size from which point-to-point messages to and from the
// ranks of this node go the node path, as the ranks agreed; 0 when they
// all go through MPI.
func (c *Comm) NodeBytes() int { return c.nodeMin }

// NodeMessages counts the messages this rank has sent and received through
// the node path.
func (c *Comm) NodeMessages() (sent, received int64) { return c.nodeSent.Load(), c.nodeGot.Load() }

// probeNode checks, once at Open, that every rank of the node can map every
// other's AllocPinnedShared memory (processes of one user, in one PID
// namespace): each exports a page holding its local rank, and each opens
// and reads the others'. Every rank of node calls it; one that does not want
// the node path (or could not set up) takes part with no page. An error on
// any rank turns the node path off there; build's Allreduce then turns it
// off everywhere.
func (c *Comm) probeNode(node *mpi.Comm, want bool) error {
	var mine []byte
	var page devmem.Buffer
	if want {
		var err error
		if page, err = c.dev.AllocPinnedShared(1); err == nil {
			b, _ := page.Bytes()
			b[0] = byte(node.Rank())
			var h devmem.IPCHandle
			if h, err = page.Export(); err == nil {
				mine, _ = h.MarshalBinary()
			}
		}
		if err != nil && !page.IsZero() {
			page.Free()
			page = devmem.Buffer{}
		}
	}
	all, err := mpi.AllgatherBytes(node, mine)
	if err == nil {
		for r, raw := range all {
			if r == node.Rank() {
				continue
			}
			if err = c.probeOpen(raw, r); err != nil {
				break
			}
		}
	}
	if mine == nil && err == nil {
		err = errors.New("node path not wanted here")
	}
	// No rank frees its page before every rank has read the others'.
	err = errors.Join(err, node.Barrier())
	if !page.IsZero() {
		err = errors.Join(err, page.Free())
	}
	return err
}

func (c *Comm) probeOpen(raw []byte, r int) error {
	if len(raw) == 0 {
		return fmt.Errorf("local rank %d has no page", r)
	}
	var h devmem.IPCHandle
	if err := h.UnmarshalBinary(raw); err != nil {
		return err
	}
	v, err := c.dev.OpenIPC(h)
	if err != nil {
		return err
	}
	b, _ := v.Bytes()
	got := b[0]
	if err := v.CloseIPC(); err != nil {
		return err
	}
	if int(got) != r%256 {
		return fmt.Errorf("local rank %d's page reads %d", r, got)
	}
	return nil
}
