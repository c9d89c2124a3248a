package mpicomm

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/nodepath"
	"github.com/gpucomm/gpucomm/internal/pipeline"
)

// Host-staged operations: device data goes through pinned slots, chunk by
// chunk (internal/pipeline), and MPI only ever sees host memory.

// stagedStrategy is comm/mpi's (strategy.go): nothing goes to MPI direct.
type stagedStrategy struct{}

func (stagedStrategy) mode() Mode                     { return Staged }
func (stagedStrategy) direct(*Comm, driver.Call) bool { return false }
func (stagedStrategy) limit(*Comm, driver.Call) error { return nil }
func (stagedStrategy) deviceMemory() bool             { return false }
func (stagedStrategy) nodePath() bool                 { return true }
func (stagedStrategy) stagesLarge() bool              { return false }

func one(r *mpi.Request, err error) ([]*mpi.Request, error) {
	if err != nil {
		return nil, err
	}
	return []*mpi.Request{r}, nil
}

// reduction is how the chunks of a reduction meet MPI: reduced in place in
// their slot, or, when MPI's 8-bit sums saturate, widened to int32 there
// first and narrowed after (a wrapping sum, as on every other backend).
type reduction struct {
	cut  pipeline.Cut // how the pipelines it makes are cut
	in   func(buf devmem.Buffer) pipeline.Stage
	mpi  func(s *slot, off, n int) ([]*mpi.Request, error)
	post func(s *slot, off, n int, reqs []*mpi.Request) error
}

// pipeline reduces bytes bytes of send; out is left to the caller.
func (r reduction) pipe(bytes int, send devmem.Buffer) pipe {
	return pipe{Bytes: bytes, Cut: r.cut, In: r.in(send), Start: r.mpi, Post: r.post}
}

// reduction reduces the bytes of send and finishes an Avg on those in [lo, hi).
func (c *Comm) reduction(call driver.Call, lo, hi int) reduction {
	avg := c.average(call, lo, hi)
	es, op := call.DType.Size(), mpiOp(call.Op)
	if !c.widened(call) {
		dt := mpiType(call.DType)
		return reduction{cut: c.policy().Cut(es), in: pipeline.CopyIn, post: avg,
			mpi: func(s *slot, off, n int) ([]*mpi.Request, error) {
				a := s.Buf.Addr()
				return one(c.coll.Iallreduce(a, a, n/es, dt, op))
			}}
	}
	signed := call.DType == comm.Int8
	return reduction{
		cut: c.policy().Widened(),
		// The chunk lands in the last quarter of its int32 room, so that
		// widening front to back never overwrites a byte not yet read.
		in: func(buf devmem.Buffer) pipeline.Stage {
			return func(s *slot, off, n int, st *devmem.Stream) error {
				if n == 0 {
					return nil
				}
				src, err := buf.Slice(off, n)
				if err != nil {
					return err
				}
				tail, err := s.Buf.Slice(3*n, n)
				if err != nil {
					return err
				}
				return devmem.CopyN(tail, src, n, st)
			}
		},
		mpi: func(s *slot, off, n int) ([]*mpi.Request, error) {
			widen(s.Bytes(4*n), n, signed)
			a := s.Buf.Addr()
			return one(c.coll.Iallreduce(a, a, n, mpi.Int32, op))
		},
		post: func(s *slot, off, n int, reqs []*mpi.Request) error {
			narrow(s.Bytes(4*n), n)
			if avg != nil {
				return avg(s, off, n, reqs)
			}
			return nil
		},
	}
}

// widen turns the n bytes at b[3n:4n] into n int32s at b[0:4n], sign- or
// zero-extended. Front to back, each write lands on bytes already read.
func widen(b []byte, n int, signed bool) {
	w := devmem.FromBytes[int32](b[:4*n])
	for i := range n {
		v := b[3*n+i]
		if signed {
			w[i] = int32(int8(v))
		} else {
			w[i] = int32(v)
		}
	}
}

// narrow turns the n int32s at b[0:4n] into their low bytes at b[0:n], which
// wraps as 8-bit arithmetic would have. Front to back, for the same reason.
func narrow(b []byte, n int) {
	w := devmem.FromBytes[int32](b[:4*n])
	for i := range n {
		b[i] = byte(w[i])
	}
}

// average finishes an Avg on the host, in the slot, before the copy out.
func (c *Comm) average(call driver.Call, lo, hi int) func(s *slot, off, n int, _ []*mpi.Request) error {
	if call.Op != comm.Avg {
		return nil
	}
	return func(s *slot, off, n int, _ []*mpi.Request) error {
		a, b := max(off, lo), min(off+n, hi)
		if a >= b {
			return nil
		}
		return driver.DivideInto(call.DType, s.Bytes(b - off)[a-off:], c.size)
	}
}

func (c *Comm) stagedAllReduce(o *op) error {
	call := o.call
	n := call.Count * call.DType.Size()
	if c.reducesSmall(call, n) {
		return c.smallReduction(o, n, call.Recv, 0, n)
	}
	r := c.reduction(call, 0, n)
	p := r.pipe(n, call.Send)
	p.Out = pipeline.CopyOut(call.Recv, 0)
	return c.run(o, p)
}

// stagedReduce runs as an Iallreduce whose result only the root copies back:
// internal/mpi has no MPI_Ireduce, and a blocking MPI_Reduce per chunk could
// not be bounded by the timeout.
func (c *Comm) stagedReduce(o *op) error {
	call := o.call
	n := call.Count * call.DType.Size()
	if c.reducesSmall(call, n) {
		var out devmem.Buffer // only the root copies back
		if c.rank == call.Root {
			out = call.Recv
		}
		return c.smallReduction(o, n, out, 0, n)
	}
	r := c.reduction(call, 0, n)
	p := r.pipe(n, call.Send)
	p.Post = nil
	if c.rank == call.Root {
		p.Post, p.Out = r.post, pipeline.CopyOut(call.Recv, 0)
	}
	return c.run(o, p)
}

// stagedReduceScatter reduces all of send, chunk by chunk, and copies back
// the chunks (or parts of chunks) of this rank's block.
func (c *Comm) stagedReduceScatter(o *op) error {
	call := o.call
	n := call.Count * call.DType.Size()
	lo, hi := c.rank*n, (c.rank+1)*n
	if c.reducesSmall(call, c.size*n) {
		return c.smallReduction(o, c.size*n, call.Recv, lo, hi)
	}
	r := c.reduction(call, lo, hi)
	mine := pipeline.CopyOut(call.Recv, lo)
	p := r.pipe(c.size*n, call.Send)
	p.Out = func(s *slot, off, m int, st *devmem.Stream) error {
		a, b := max(off, lo), min(off+m, hi)
		if a >= b {
			return nil
		}
		part, err := s.Part(a-off, b-a)
		if err != nil {
			return err
		}
		return mine(part, a, b-a, st)
	}
	return c.run(o, p)
}

func (c *Comm) stagedBroadcast(o *op) error {
	call := o.call
	es := call.DType.Size()
	dt := mpiType(call.DType)
	if n := call.Count * es; c.blocksSmall(n, c.policy().Cut(es)) {
		return c.smallBroadcast(o, n)
	}
	p := c.cut(call.Count*es, es)
	p.Start = func(s *slot, off, n int) ([]*mpi.Request, error) {
		return one(c.coll.Ibcast(s.Buf.Addr(), n/es, dt, call.Root))
	}
	p.Out = pipeline.CopyOut(call.Recv, 0)
	if c.rank == call.Root {
		p.In = pipeline.CopyIn(call.Send)
		if call.Send.Addr() == call.Recv.Addr() {
			p.Out = nil // in place: the root's data is already there
		}
	}
	return c.run(o, p)
}

// smallBlockingBytes is the largest staged collective that goes as MPI's
// blocking call on one pinned slot, where the ranks agreed it may
// (blockSmall). The pipeline moves a message of one chunk through its
// stages one after the other anyway; what it adds for one is MPI's
// nonblocking collective and its wait (Open MPI's libnbc: on 2 ranks of one
// node an 8 B MPI_Iallreduce and its wait took 2-3 µs where MPI_Allreduce
// took 0.5), and a pipe, its closures and its slot list made per call.
const smallBlockingBytes = 64 << 10

// blocksSmall reports whether a staged collective of bytes bytes (the whole
// array a rank's MPI call covers), cut as cut says, goes as MPI's blocking
// call on one slot: one chunk, up to smallBlockingBytes, where no rank has a
// timeout (whose bound needs the nonblocking call and its bounded wait)
// and every rank's MPI lets goroutines block in it at once (below that,
// MPI's one lock would be held through a wait for peers that may first
// need this rank's other goroutines' messages). Every rank decides alike
// from what it was called with and from what the ranks agreed, since MPI
// matches no blocking collective with a nonblocking one.
func (c *Comm) blocksSmall(bytes int, cut pipeline.Cut) bool {
	return c.blockSmall && bytes > 0 && bytes <= smallBlockingBytes && bytes <= cut.Chunk
}

// reducesSmall is blocksSmall for a reduction of bytes bytes that is not
// widened (a widened one is cut otherwise, and widens in its slot).
func (c *Comm) reducesSmall(call driver.Call, bytes int) bool {
	return !c.widened(call) && c.blocksSmall(bytes, c.policy().Cut(call.DType.Size()))
}

// smallReduction is the staged reduction of the n bytes of send as one
// MPI_Allreduce in place on one slot: the copy in, the call, an Avg
// finished on the host on bytes [lo, hi), and those bytes copied to out
// (nothing when out is zero), as the pipeline does for one chunk.
func (c *Comm) smallReduction(o *op, n int, out devmem.Buffer, lo, hi int) error {
	call := &o.call
	return c.onSmallSlot(n, func(s *pipeline.Slot) error {
		if err := devmem.CopyN(s.Buf, call.Send, n, nil); err != nil {
			return err
		}
		a, es := s.Buf.Addr(), call.DType.Size()
		if err := c.coll.Allreduce(a, a, n/es, mpiType(call.DType), mpiOp(call.Op)); err != nil {
			return err
		}
		if out.IsZero() || lo >= hi {
			return nil
		}
		if call.Op == comm.Avg {
			if err := driver.DivideInto(call.DType, s.Bytes(hi)[lo:], c.size); err != nil {
				return err
			}
		}
		mine, err := s.Buf.Slice(lo, hi-lo)
		if err != nil {
			return err
		}
		return devmem.CopyN(out, mine, hi-lo, nil)
	})
}

// onSmallSlot counts a staged collective that goes as MPI's blocking call
// and runs fn on the small collectives' slot (smallSlot), of
// smallBlockingBytes, which holds the n bytes blocksSmall let through: the
// call is blocking, so MPI is done with the slot when fn returns.
func (c *Comm) onSmallSlot(n int, fn func(s *pipeline.Slot) error) error {
	if n > smallBlockingBytes {
		return fmt.Errorf("mpicomm: a blocking small collective of %d bytes exceeds its slot of %d", n, smallBlockingBytes)
	}
	c.smallBlocking.Add(1)
	if c.smallSlot == nil {
		s, err := c.eng.Pool.Take(smallBlockingBytes)
		if err != nil {
			return err
		}
		c.smallSlot = s
	}
	return fn(c.smallSlot)
}

// smallBroadcast is the staged Broadcast of n bytes as one MPI_Bcast on one
// slot: the root copies its data in, every rank but an in-place root
// copies the slot out.
func (c *Comm) smallBroadcast(o *op, n int) error {
	call := &o.call
	return c.onSmallSlot(n, func(s *pipeline.Slot) error {
		root := c.rank == call.Root
		if root {
			if err := devmem.CopyN(s.Buf, call.Send, n, nil); err != nil {
				return err
			}
		}
		es := call.DType.Size()
		if err := c.coll.Bcast(s.Buf.Addr(), n/es, mpiType(call.DType), call.Root); err != nil {
			return err
		}
		if root && call.Send.Addr() == call.Recv.Addr() {
			return nil // in place: the root's data is already there
		}
		return devmem.CopyN(call.Recv, s.Buf, n, nil)
	})
}

// transfer is one stream of point-to-point messages: a device range sent to
// some peers, or received from one.
type transfer struct {
	send  bool
	peers []int
	buf   devmem.Buffer
	bytes int
	dt    comm.DType
	on    *mpi.Comm
	tag   int
	// link, when set, moves the message through the node path (node.go)
	// as the pair's message ticket.
	link   *nodepath.Link
	ticket uint64
	// ipc moves the message through the IPC path (ipcpath.go).
	ipc bool
	// announce: a user's message (stagedP2P), whose sends of several
	// chunks through the pipeline say their length first (announce.go).
	announce bool
}

func (t transfer) String() string {
	n := t.bytes / t.dt.Size()
	if !t.send {
		return fmt.Sprintf("receive of %d %v from rank %d (message tag %d)", n, t.dt, t.peers[0], t.tag)
	}
	to := fmt.Sprintf("rank %d", t.peers[0])
	if len(t.peers) > 1 {
		to = fmt.Sprintf("ranks %v", t.peers)
	}
	return fmt.Sprintf("send of %d %v to %s (message tag %d)", n, t.dt, to, t.tag)
}

// move runs one transfer through its own pipeline. Several transfers run
// at once, one goroutine each, so that no rank's sends wait for its own
// receives.
func (c *Comm) move(o *op, ts []transfer) error {
	if len(ts) == 1 {
		return c.moveOne(o, ts[0])
	}
	// The IPC path's messages go together on this goroutine (ipcWindow),
	// the others on a goroutine each.
	var win []int
	for i, t := range ts {
		if t.ipc {
			win = append(win, i)
		}
	}
	if len(win) < 2 {
		win = nil
	}
	// Counted as before the window: its messages that go on by themselves
	// (ipcWindow's alone) wait beside the others.
	if c.crowded(len(ts)) {
		o.crowd = true // before the goroutines: they only read it
	}
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i := range ts {
		if win == nil || !ts[i].ipc {
			wg.Go(func() { errs[i] = c.moveOne(o, ts[i]) })
		}
	}
	if win != nil {
		c.ipcWindow(o, ts, win, errs)
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Comm) moveOne(o *op, t transfer) error {
	if t.ipc {
		return c.ipcMove(o, t)
	}
	if t.link != nil {
		return c.explainTimeout(o, t, c.nodeMove(o, t))
	}
	return c.explainTimeout(o, t, c.stagedMessage(o, t))
}

// stagedMove runs one transfer through the chunk pipeline.
func (c *Comm) stagedMove(o *op, t transfer) error {
	p := c.cut(t.bytes, t.dt.Size())
	p.AtLeastOne = true
	if t.send {
		p.In = pipeline.CopyIn(t.buf)
		p.Start = func(s *slot, _, n int) ([]*mpi.Request, error) {
			var reqs []*mpi.Request
			for _, peer := range t.peers {
				r, err := t.on.Isend(s.Buf.Addr(), n, mpi.Byte, peer, t.tag)
				if err != nil {
					return reqs, err
				}
				reqs = append(reqs, r)
			}
			return reqs, nil
		}
	} else {
		p.Receives = true
		// From a rank of the node, the sender may have taken the node path
		// (its count differs): the first chunk's receive has room for the
		// header, which is then told from data by its length and magic.
		header := c.nodeMin > 0 && t.on == c.p2p && c.onNode[t.peers[0]]
		// From a rank the IPC path serves, it may be an IPC control message.
		hdrLen := nodepath.HdrLen
		if header && c.ipc.cache != nil && c.ipc.reach[t.peers[0]] {
			hdrLen = max(hdrLen, ctlLen)
		}
		// A user's receive of one chunk may meet the header of a longer
		// send (announce.go), which has room there too; not where the IPC
		// path's control message said the bytes follow unannounced.
		listen := t.announce && !t.ipc
		if listen {
			hdrLen = max(hdrLen, announceLen)
		}
		p.Start = func(s *slot, off, n int) ([]*mpi.Request, error) {
			room := n
			if (header || listen) && off == 0 && s.Buf.Len() >= hdrLen {
				room = max(n, hdrLen)
			}
			return one(t.on.Irecv(s.Buf.Addr(), room, mpi.Byte, t.peers[0], t.tag))
		}
		p.Check = func(s *slot, off, n int, reqs []*mpi.Request) error {
			got := reqs[0].Status().Count
			if listen && off == 0 && got == announceLen {
				if bytes, ok := announcement(s.Bytes(announceLen), got); ok {
					return c.dropAnnounced(o, t, bytes)
				}
			}
			if header && off == 0 && hdrLen > nodepath.HdrLen && c.isControl(s.Bytes(min(got, hdrLen)), got) {
				return c.refuseControl(o, t, s.Bytes(ctlLen), false)
			}
			if header && off == 0 && got == nodepath.HdrLen && nodepath.IsHeader(s.Bytes(nodepath.HdrLen)) {
				// Its chunks wait in its ring for a receive that will not come.
				return c.nodeSenderMismatch(t, s.Bytes(nodepath.HdrLen))
			}
			if got != n {
				return fmt.Errorf("%v: bytes [%d, %d) came as a message of %d bytes; the sender's count differs: %w",
					t, off, off+n, got, comm.ErrMismatch)
			}
			return nil
		}
		p.Out = pipeline.CopyOut(t.buf, 0)
	}
	return c.explainTimeout(o, t, truncatedMismatch(t, c.run(o, p)))
}

// explainTimeout says which peer a point-to-point transfer waited for.
func (c *Comm) explainTimeout(o *op, t transfer, err error) error {
	if err != nil && errors.Is(err, comm.ErrTimeout) && o.seq == 0 {
		who := fmt.Sprintf("rank %d never received it", t.peers[0])
		if len(t.peers) > 1 {
			who = fmt.Sprintf("ranks %v did not all receive it", t.peers)
		}
		if !t.send {
			who = fmt.Sprintf("rank %d never sent it", t.peers[0])
		}
		return fmt.Errorf("%v: no progress after %v; %s: %w", t, c.timeout, who, comm.ErrTimeout)
	}
	return err
}

// stagedP2P runs the user's sends and receives on the point-to-point
// communicator, each tagged with its message number.
func (c *Comm) stagedP2P(o *op, ps []comm.P2P, tags []int, tickets []nodepath.Turn) error {
	ts := make([]transfer, len(ps))
	for i, p := range ps {
		bytes := p.Count * p.DType.Size()
		ts[i] = transfer{send: p.Kind == comm.SendKind, peers: []int{p.Peer}, buf: p.Buf, bytes: bytes, dt: p.DType, on: c.p2p, tag: tags[i],
			link: tickets[i].Link, ticket: tickets[i].Ticket, ipc: c.ipcFor(p.Peer, bytes), announce: true}
	}
	return c.move(o, ts)
}

// stagedBlocks runs AllGather, Gather, Scatter and AllToAll as point-to-point
// transfers of whole blocks, each block chunked and pipelined on its own; a
// rank's own block is a device-to-device copy (none in place).
func (c *Comm) stagedBlocks(o *op) error {
	call := o.call
	es := call.DType.Size()
	n := call.Count * es
	tag := int(o.seq % tagSpace)
	block := func(b devmem.Buffer, j int) devmem.Buffer {
		v, _ := b.Slice(j*n, n)
		return v
	}
	others := func() []int {
		var ps []int
		for j := range c.size {
			if j != c.rank {
				ps = append(ps, j)
			}
		}
		return ps
	}
	var ts []transfer
	sendTo := func(buf devmem.Buffer, peers ...int) {
		ts = append(ts, transfer{send: true, peers: peers, buf: buf, bytes: n, dt: call.DType, on: c.coll, tag: tag})
	}
	recvFrom := func(buf devmem.Buffer, peer int) {
		ts = append(ts, transfer{peers: []int{peer}, buf: buf, bytes: n, dt: call.DType, on: c.coll, tag: tag})
	}
	var self func() error
	local := func(dst, src devmem.Buffer) {
		if dst.Addr() != src.Addr() {
			self = func() error { return devmem.CopyN(dst, src, n, nil) }
		}
	}
	// gather fills Recv with every rank's block: the others' by receiving,
	// this rank's own from Send.
	gather := func() {
		for _, j := range others() {
			recvFrom(block(call.Recv, j), j)
		}
		local(block(call.Recv, c.rank), call.Send)
	}
	root := c.rank == call.Root
	switch call.Operation {
	case driver.OpAllGather:
		if c.size > 1 {
			sendTo(call.Send, others()...)
		}
		gather()
	case driver.OpGather:
		if !root {
			sendTo(call.Send, call.Root)
			break
		}
		gather()
	case driver.OpScatter:
		if !root {
			recvFrom(call.Recv, call.Root)
			break
		}
		for _, j := range others() {
			sendTo(block(call.Send, j), j)
		}
		local(call.Recv, block(call.Send, c.rank))
	case driver.OpAllToAll:
		for _, j := range others() {
			sendTo(block(call.Send, j), j)
			recvFrom(block(call.Recv, j), j)
		}
		local(block(call.Recv, c.rank), block(call.Send, c.rank))
	}
	var selfErr error
	if self != nil {
		selfErr = self()
	}
	if len(ts) == 0 {
		return selfErr
	}
	return errors.Join(selfErr, c.move(o, c.nodeBlocks(ts)))
}

// nodeBlocks gives a collective's transfers to and from ranks of the node
// their turns on the node path (where their blocks are large enough),
// splitting a send to several peers into one send a node peer beside one
// through MPI to the rest. Every rank makes its transfers in the same order
// within the collective, and runs its collectives one at a time in ticket
// order, so both sides of a pair take their turns in the same order.
func (c *Comm) nodeBlocks(ts []transfer) []transfer {
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	var out []transfer
	for _, t := range ts {
		var rest []int
		for _, peer := range t.peers {
			if c.ipcFor(peer, t.bytes) {
				one := t
				one.peers, one.ipc = []int{peer}, true
				out = append(out, one)
				continue
			}
			turn, ok := c.nodeTurnFor(peer, t.send, true, t.bytes)
			if !ok {
				rest = append(rest, peer)
				continue
			}
			one := t
			one.peers, one.link, one.ticket = []int{peer}, turn.Link, turn.Ticket
			out = append(out, one)
		}
		if len(rest) > 0 {
			t.peers = rest
			out = append(out, t)
		}
	}
	return out
}
