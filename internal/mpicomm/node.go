package mpicomm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// The node path: a staged point-to-point message of at least nodeMin bytes
// between two ranks of one node does not go through MPI's own shared-memory
// copies. The sender copies it from its device, chunk by chunk, into a ring
// of pinned slots in memory both processes map (devmem.AllocPinnedShared),
// and the receiver copies each chunk from there to its device: two copies
// by the GPUs' copy engines, where the MPI path has those two plus MPI's two
// memcpys through its own shared segment. MPI carries one small header a
// message, on the point-to-point communicator with the message's own tag,
// so that the k-th receive from a peer still matches the k-th send to it.
//
// Each ordered pair of ranks has one ring, made by the sender at its first
// such message and opened by the receiver from the header's IPC handle. Two
// counters at the ring's start say how many chunks the sender has put there
// (ready) and how many the receiver has taken out (done), over the ring's
// life; slot i%slots holds chunk i. The messages of a pair take the ring in
// the order they were called (their ticket, given with their tag), one at a
// time on each side; a message's chunks follow the previous message's
// without a gap.

const (
	// defaultNodeBytes is where the node path starts when no option says:
	// from there up a message is worth its header round.
	defaultNodeBytes = 64 << 10
	// ringSlots is how many chunks a ring holds: one being copied in, one
	// being copied out, and two in between.
	ringSlots = 4
	// ringCtlBytes is the page before the slots: the two counters, each on
	// a cache line of its own, and the sender's outgoing header.
	ringCtlBytes = 4096
	ringReadyOff = 0
	ringDoneOff  = 128
	ringHdrOff   = 1024

	hdrMagic = 0x676370636e6f6465 // "gcpcnode"
	hdrLen   = 5*8 + devmem.HandleSize
)

// isHeader reports whether b (hdrLen bytes) is a node path header.
func isHeader(b []byte) bool { return binary.LittleEndian.Uint64(b) == hdrMagic }

// hdrRoom is the receive buffer for a header: larger than one, and than
// the first chunk of any message below the node path's size, so that a
// message the sender sent through MPI (its count differs) arrives whole
// and is reported as a mismatch rather than truncated.
func (c *Comm) hdrRoom() int { return max(hdrLen+1, 4096, min(c.nodeMin, c.chunk)) }

// link is one direction of one pair's node path, as this rank sees it.
type link struct {
	peer int
	send bool

	mu      sync.Mutex
	cond    *sync.Cond
	next    uint64 // tickets handed out (under Comm.peerMu)
	serving uint64 // the ticket whose turn it is
	broken  error  // a message failed half way: the counters are out of step

	// Touched only by the message whose turn it is.
	chunks    uint64        // chunks through the ring so far
	ring      devmem.Buffer // the whole ring: own (send) or opened (receive)
	handle    devmem.IPCHandle
	slots     int
	slotBytes int
	hdr       devmem.Buffer // receive: pinned room for incoming headers
	ev        []*devmem.Event

	// A send link's chunks of completed sends, and its ring's done counter
	// (nil before the ring exists): a completed send is delivered whatever
	// the sender does next, so Close waits for the receiver to take them
	// before it frees the ring (awaitTaken).
	sent  atomic.Uint64
	taken atomic.Pointer[atomic.Uint64]
}

func (l *link) counter(off int) *atomic.Uint64 {
	b, _ := l.ring.Bytes()
	return (*atomic.Uint64)(unsafe.Pointer(&b[off]))
}

func (l *link) slot(seq uint64, n int) devmem.Buffer {
	s, _ := l.ring.Slice(ringCtlBytes+int(seq%uint64(l.slots))*l.slotBytes, n)
	return s
}

// linkKey names a link: its peer, its direction, and whether it carries
// the user's messages (on the point-to-point communicator) or those of
// collectives (AllGather, Gather, Scatter and AllToAll are built from
// messages), whose turns are taken in different orders.
type linkKey struct {
	peer       int
	send, coll bool
}

// linkTo returns the link of k, made on first use. Under peerMu.
func (c *Comm) linkTo(k linkKey) *link {
	if c.links == nil {
		c.links = map[linkKey]*link{}
	}
	l := c.links[k]
	if l == nil {
		l = &link{peer: k.peer, send: k.send}
		l.cond = sync.NewCond(&l.mu)
		c.links[k] = l
	}
	return l
}

// nodeTurnFor says whether a message of bytes bytes to (send) or from peer
// goes the node path and, if so, takes its turn on the pair's link. Called
// in the order the messages were called: under peerMu, for the user's
// messages at the call; for a collective's, in its body, which every rank
// runs in ticket order.
func (c *Comm) nodeTurnFor(peer int, send, coll bool, bytes int) (nodeTurn, bool) {
	if c.mode != Staged || c.nodeMin <= 0 || peer == c.rank || !c.onNode[peer] || bytes < c.nodeMin {
		return nodeTurn{}, false
	}
	l := c.linkTo(linkKey{peer, send, coll})
	l.mu.Lock()
	t := l.next
	l.next++
	l.mu.Unlock()
	return nodeTurn{l, t}, true
}

// awaitTurn waits until ticket t may use the link.
func (l *link) awaitTurn(o *op, t uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !o.deadline.IsZero() {
		stop := time.AfterFunc(time.Until(o.deadline), func() {
			l.mu.Lock()
			l.cond.Broadcast()
			l.mu.Unlock()
		})
		defer stop.Stop()
	}
	for l.serving != t && l.broken == nil {
		if !o.deadline.IsZero() && !time.Now().Before(o.deadline) {
			return fmt.Errorf("waited for %d earlier messages to rank %d to leave the node path: %w", t-l.serving, l.peer, comm.ErrTimeout)
		}
		l.cond.Wait()
	}
	if l.broken != nil {
		return fmt.Errorf("the node path with rank %d is broken by an earlier failure: %w", l.peer, l.broken)
	}
	return nil
}

// abandon breaks the links of turns whose messages will never run (their
// operation failed before it started), so that later messages on those
// links fail instead of waiting for a turn that never comes.
func abandon(turns []nodeTurn, cause error) {
	for _, t := range turns {
		if t.link != nil {
			t.link.mu.Lock()
			if t.link.broken == nil {
				t.link.broken = fmt.Errorf("an earlier message never ran: %w", cause)
			}
			t.link.cond.Broadcast()
			t.link.mu.Unlock()
		}
	}
}

// done passes the turn on; err, when the ring's counters may be out of step,
// breaks the link for every later message.
func (l *link) done(err error) {
	l.mu.Lock()
	if err != nil && l.broken == nil {
		l.broken = err
	}
	l.serving++
	l.cond.Broadcast()
	l.mu.Unlock()
}

func (l *link) release() error {
	var errs []error
	for _, e := range l.ev {
		errs = append(errs, e.Destroy())
	}
	if !l.ring.IsZero() {
		if l.send {
			errs = append(errs, l.ring.Free())
		} else {
			errs = append(errs, l.ring.CloseIPC())
		}
	}
	if !l.hdr.IsZero() {
		errs = append(errs, l.hdr.Free())
	}
	return errors.Join(errs...)
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
	type owed struct {
		peer  int
		sent  uint64
		taken *atomic.Uint64
	}
	var all []owed
	c.peerMu.Lock()
	for _, l := range c.links {
		if p := l.taken.Load(); l.send && p != nil {
			all = append(all, owed{l.peer, l.sent.Load(), p})
		}
	}
	c.peerMu.Unlock()
	slices.SortFunc(all, func(a, b owed) int { return a.peer - b.peer })
	behind := func() []string {
		var who []string
		for _, o := range all {
			if got := o.taken.Load(); got < o.sent {
				who = append(who, fmt.Sprintf("rank %d has taken %d of the %d chunks sent it", o.peer, got, o.sent))
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

// closeLinks releases every link's ring; nothing runs any more.
func (c *Comm) closeLinks() error {
	var errs []error
	for _, l := range c.links {
		errs = append(errs, l.release())
	}
	return errors.Join(errs...)
}

func (c *Comm) newEvents(n int) ([]*devmem.Event, error) {
	evs := make([]*devmem.Event, 0, n)
	for range n {
		e, err := c.dev.NewEvent()
		if err != nil {
			for _, e := range evs {
				e.Destroy()
			}
			return nil, err
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// makeRing gives a send link its ring, on its first message.
func (c *Comm) makeRing(l *link) error {
	if !l.ring.IsZero() {
		return nil
	}
	slotBytes := c.chunk
	ring, err := c.dev.AllocPinnedShared(ringCtlBytes + ringSlots*slotBytes)
	if err != nil {
		return err
	}
	h, err := ring.Export()
	if err != nil {
		return errors.Join(err, ring.Free())
	}
	ev, err := c.newEvents(ringSlots)
	if err != nil {
		return errors.Join(err, ring.Free())
	}
	l.ring, l.handle, l.slots, l.slotBytes, l.ev = ring, h, ringSlots, slotBytes, ev
	l.taken.Store(l.counter(ringDoneOff))
	return nil
}

// poll waits until cond holds, spinning first (a chunk is tens of µs away),
// then sleeping a little longer each time, up to the deadline. failed stops
// it early (a helper goroutine failed: the caller collects its error);
// progress, when set, runs between sleeps (driving MPI on a request).
func poll(o *op, cond func() bool, failed *atomic.Bool, progress func(), what func() string) error {
	const spin = 200 * time.Microsecond
	start := time.Now()
	sleep := 10 * time.Microsecond
	for i := 0; ; i++ {
		if cond() || failed.Load() {
			return nil
		}
		if i%32 != 31 {
			runtime.Gosched()
			continue
		}
		now := time.Now()
		if !o.deadline.IsZero() && !now.Before(o.deadline) {
			return fmt.Errorf("%s: %w", what(), comm.ErrTimeout)
		}
		if now.Sub(start) > spin {
			if progress != nil {
				progress()
			}
			time.Sleep(sleep)
			sleep = min(2*sleep, time.Millisecond)
		}
	}
}

// outOfStep breaks the communicator when a node path message stopped half
// way: the peer may wait on the ring for chunks or room that never come,
// and Close then ends the job rather than hang.
func (c *Comm) outOfStep(t transfer, err error) {
	c.setBroken(fmt.Errorf("%v stopped half way through the node path: %w", t, err))
}

// chunksOf is how many slots a message of n bytes takes.
func chunksOf(n, slotBytes int) int { return (n + slotBytes - 1) / slotBytes }

// pump moves the chunks of a message of bytes bytes through the link's ring, from
// chunk base: for each in turn it waits until may (room in the ring for it,
// or it in the ring), queues copy of its bytes [off, off+n) to or from its
// slot on st (copy nil: nothing to copy, the chunk is only passed on) and
// records the slot's event; a goroutine waits for each chunk's copy, in
// order, and then publishes seq+1 (the count of chunks put in, or taken
// out). It returns once every chunk is published, or at the first error.
func (c *Comm) pump(o *op, l *link, base uint64, bytes int, st *devmem.Stream, may func(seq uint64) bool,
	copy func(off, n int, slot devmem.Buffer) error, publish func(uint64), progress func(), what func() string) error {
	k := chunksOf(bytes, l.slotBytes)
	queued := make(chan uint64, l.slots)
	helperErr := make(chan error, 1)
	var failed atomic.Bool
	go func() {
		for range k {
			seq, ok := <-queued
			if !ok {
				break
			}
			if copy != nil {
				if err := l.ev[seq%uint64(l.slots)].Synchronize(); err != nil {
					failed.Store(true)
					helperErr <- err
					return
				}
			}
			publish(seq + 1)
		}
		helperErr <- nil
	}()
	var loopErr error
	for j := range k {
		seq := base + uint64(j)
		if loopErr = poll(o, func() bool { return may(seq) }, &failed, progress, what); loopErr != nil || failed.Load() {
			break
		}
		if copy != nil {
			off := j * l.slotBytes
			n := min(l.slotBytes, bytes-off)
			if loopErr = copy(off, n, l.slot(seq, n)); loopErr == nil {
				loopErr = l.ev[seq%uint64(l.slots)].Record(st)
			}
			if loopErr != nil {
				break
			}
		}
		queued <- seq
	}
	close(queued)
	return errors.Join(loopErr, <-helperErr)
}

// nodeMove waits for t's turn on its link, moves t through the ring, and
// passes the turn on; a failure after which the two sides' counters may
// disagree (inStep false) breaks the link and the communicator.
func (c *Comm) nodeMove(o *op, t transfer) (err error) {
	l := t.link
	if err := l.awaitTurn(o, t.ticket); err != nil {
		return err
	}
	inStep := true
	defer func() {
		if err != nil && !inStep {
			l.done(err)
			c.outOfStep(t, err)
			return
		}
		l.done(nil)
	}()
	if t.send {
		return c.nodeSend(o, t, &inStep)
	}
	return c.nodeRecv(o, t, &inStep)
}

// nodeSend sends t's bytes through the pair's ring.
func (c *Comm) nodeSend(o *op, t transfer, inStep *bool) (err error) {
	l := t.link
	if err := c.makeRing(l); err != nil {
		return err
	}
	b, _ := l.ring.Bytes()
	h := b[ringHdrOff : ringHdrOff+hdrLen]
	binary.LittleEndian.PutUint64(h[0:], hdrMagic)
	binary.LittleEndian.PutUint64(h[8:], l.chunks)
	binary.LittleEndian.PutUint64(h[16:], uint64(t.bytes))
	binary.LittleEndian.PutUint64(h[24:], uint64(l.slots))
	binary.LittleEndian.PutUint64(h[32:], uint64(l.slotBytes))
	raw, _ := l.handle.MarshalBinary()
	copy(h[40:], raw)
	req, err := t.on.Isend(l.ring.Addr()+ringHdrOff, hdrLen, mpi.Byte, t.peers[0], t.tag)
	if err != nil {
		return err
	}
	*inStep = false // from here the receiver may be taking chunks
	ready, done := l.counter(ringReadyOff), l.counter(ringDoneOff)
	base := l.chunks
	k := chunksOf(t.bytes, l.slotBytes)
	err = c.pump(o, l, base, t.bytes, c.eng.D2H,
		func(seq uint64) bool { return seq-done.Load() < uint64(l.slots) },
		func(off, n int, slot devmem.Buffer) error {
			src, err := t.buf.Slice(off, n)
			if err != nil {
				return err
			}
			return devmem.CopyN(slot, src, n, c.eng.D2H)
		},
		ready.Store,
		// Below MPI_THREAD_MULTIPLE nothing else drives the header's send.
		func() { mpi.Testall([]*mpi.Request{req}) },
		func() string {
			return fmt.Sprintf("rank %d has taken %d of the message's %d chunks out of the node ring", t.peers[0], done.Load()-min(done.Load(), base), k)
		})
	if err != nil {
		return err
	}
	if err := c.wait(o, []*mpi.Request{req}); err != nil {
		return err
	}
	l.chunks = base + uint64(k)
	l.sent.Store(l.chunks)
	*inStep = true
	c.nodeSent.Add(1)
	return nil
}

// nodeRecv receives t's bytes through the sender's ring.
func (c *Comm) nodeRecv(o *op, t transfer, inStep *bool) (err error) {
	l := t.link
	room := c.hdrRoom()
	if l.hdr.IsZero() {
		if l.hdr, err = c.dev.AllocPinned(room); err != nil {
			return err
		}
	}
	req, err := t.on.Irecv(l.hdr.Addr(), room, mpi.Byte, t.peers[0], t.tag)
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
	h, _ := l.hdr.Bytes()
	if got := req.Status().Count; got != hdrLen || !isHeader(h) {
		if got+16 > c.chunk { // the first of several chunks: the chunk in whole elements
			// A message of more than one chunk through MPI: its later
			// chunks wait for receives that will not come.
			*inStep = false
		}
		return fmt.Errorf("%v: rank %d sent a message of %d bytes through MPI, not through the node path; the sender's count differs: %w",
			t, t.peers[0], got, comm.ErrMismatch)
	}
	from := binary.LittleEndian.Uint64(h[8:])
	bytes := int(binary.LittleEndian.Uint64(h[16:]))
	slots := int(binary.LittleEndian.Uint64(h[24:]))
	slotBytes := int(binary.LittleEndian.Uint64(h[32:]))
	var handle devmem.IPCHandle
	if err := handle.UnmarshalBinary(h[40:hdrLen]); err != nil {
		*inStep = false
		return fmt.Errorf("%v: node path header from rank %d: %w", t, t.peers[0], err)
	}
	if from != l.chunks || slots != ringSlots || slotBytes != c.chunk || bytes < 0 || bytes > math.MaxInt/2 ||
		!handle.Pinned() || handle.Offset() != 0 || handle.Size() != ringCtlBytes+slots*slotBytes {
		*inStep = false
		return fmt.Errorf("%v: node path header from rank %d out of step (its chunks start at %d, this rank has taken %d; %d slots of %d bytes in %d): %w",
			t, t.peers[0], from, l.chunks, slots, slotBytes, handle.Size(), comm.ErrMismatch)
	}
	if l.ring.IsZero() || l.handle != handle {
		if !l.ring.IsZero() {
			*inStep = false
			return fmt.Errorf("%v: rank %d's node ring changed: %w", t, t.peers[0], comm.ErrMismatch)
		}
		ring, err := c.dev.OpenIPC(handle)
		if err != nil {
			*inStep = false
			return fmt.Errorf("%v: opening rank %d's node ring: %w", t, t.peers[0], err)
		}
		ev, err := c.newEvents(slots)
		if err != nil {
			*inStep = false
			return errors.Join(err, ring.CloseIPC())
		}
		l.ring, l.handle, l.slots, l.slotBytes, l.ev = ring, handle, slots, slotBytes, ev
	}
	*inStep = false
	// A sender whose count differs still sends its chunks: take them out
	// without copying any, so that the ring stays in step, and say so.
	mismatch := bytes != t.bytes
	ready, done := l.counter(ringReadyOff), l.counter(ringDoneOff)
	base := l.chunks
	k := chunksOf(bytes, l.slotBytes)
	var copyOut func(off, n int, slot devmem.Buffer) error
	if !mismatch {
		copyOut = func(off, n int, slot devmem.Buffer) error {
			dst, err := t.buf.Slice(off, n)
			if err != nil {
				return err
			}
			return devmem.CopyN(dst, slot, n, c.eng.H2D)
		}
	}
	err = c.pump(o, l, base, bytes, c.eng.H2D,
		func(seq uint64) bool { return ready.Load() > seq },
		copyOut, done.Store, nil,
		func() string {
			return fmt.Sprintf("rank %d has put %d of the message's %d chunks into the node ring", t.peers[0], ready.Load()-min(ready.Load(), base), k)
		})
	if err != nil {
		return err
	}
	l.chunks = base + uint64(k)
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
