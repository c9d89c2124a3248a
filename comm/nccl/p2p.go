package nccl

import (
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// NCCL has no Gather, Scatter or AllToAll of its own: they are sends and
// receives issued as one NCCL group, as NVIDIA's documentation shows. A
// rank's own block is a device-to-device copy on the same stream, since
// NCCL refuses a send to self without its receive in the same group.

// plan is an operation as copies to self and one group of transfers.
type plan struct {
	self   []selfCopy
	remote []comm.P2P
}

type selfCopy struct {
	dst, src devmem.Buffer
	n        int // bytes
}

func (p *plan) transfer(kind comm.P2PKind, peer int, buf devmem.Buffer, off, count int, dt comm.DType) {
	if count == 0 {
		return // both sides skip it, so nothing waits for it
	}
	v, _ := buf.Slice(off, count*dt.Size()) // Validate checked the lengths
	p.remote = append(p.remote, comm.P2P{Kind: kind, Buf: v, Count: count, DType: dt, Peer: peer})
}

func (p *plan) copy(dst devmem.Buffer, dstOff int, src devmem.Buffer, srcOff, n int) {
	if n == 0 || dst.Addr()+uintptr(dstOff) == src.Addr()+uintptr(srcOff) {
		return // in place: the block is already there
	}
	d, _ := dst.Slice(dstOff, n)
	s, _ := src.Slice(srcOff, n)
	p.self = append(p.self, selfCopy{dst: d, src: s, n: n})
}

// enqueue queues the copies, then the group, on s.
func (c *Comm) enqueuePlan(p plan, s *devmem.Stream) error {
	for _, cp := range p.self {
		if err := devmem.CopyN(cp.dst, cp.src, cp.n, s); err != nil {
			return err
		}
	}
	if len(p.remote) == 0 {
		return nil
	}
	return c.eng.group(p.remote, s)
}

func (c *Comm) gather(call driver.Call, fl driver.Flight) error {
	return c.collective(&call, fl, c.rootedPlan(call, true).enqueueOn(c))
}

func (c *Comm) scatter(call driver.Call, fl driver.Flight) error {
	return c.collective(&call, fl, c.rootedPlan(call, false).enqueueOn(c))
}

// rootedPlan is Gather's plan (gather) or Scatter's: the root receives
// block j of its receive buffer from rank j (Gather) or sends block j of
// its send buffer to it (Scatter), and copies its own block; every other
// rank sends or receives its one block.
func (c *Comm) rootedPlan(call driver.Call, gather bool) plan {
	send, recv, count, dt, root := call.Send, call.Recv, call.Count, call.DType, call.Root
	// The root's blocks, and which way they go there and off the root.
	blocks, atRoot, offRoot := send, comm.SendKind, comm.RecvKind
	if gather {
		blocks, atRoot, offRoot = recv, comm.RecvKind, comm.SendKind
	}
	var p plan
	n := count * dt.Size()
	if c.rank != root {
		one := recv
		if gather {
			one = send
		}
		p.transfer(offRoot, root, one, 0, count, dt)
		return p
	}
	for j := range c.size {
		switch {
		case j != root:
			p.transfer(atRoot, j, blocks, j*n, count, dt)
		case gather:
			p.copy(recv, j*n, send, 0, n)
		default:
			p.copy(recv, 0, send, j*n, n)
		}
	}
	return p
}

// enqueueOn is the function that queues p on a stream, for collective.
func (p plan) enqueueOn(c *Comm) func(s *devmem.Stream) error {
	return func(s *devmem.Stream) error { return c.enqueuePlan(p, s) }
}

func (c *Comm) allToAll(call driver.Call, fl driver.Flight) error {
	send, recv, count, dt := call.Send, call.Recv, call.Count, call.DType
	var p plan
	n := count * dt.Size()
	for j := range c.size {
		if j == c.rank {
			p.copy(recv, j*n, send, j*n, n)
			continue
		}
		p.transfer(comm.SendKind, j, send, j*n, count, dt)
		p.transfer(comm.RecvKind, j, recv, j*n, count, dt)
	}
	return c.collective(&call, fl, p.enqueueOn(c))
}

// pointToPoint issues a Send's, a Recv's or a GroupP2P's transfers as one
// NCCL group. Transfers to self pair up in order, the k-th send to self
// with the k-th receive from self, as NCCL pairs them; each pair must agree
// on count and type.
func (c *Comm) pointToPoint(call driver.Call, ops []comm.P2P, fl driver.Flight) error {
	p := c.p2pPlan(ops)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked(call.Operation); err != nil {
		return err
	}
	if len(p.self) == 0 && len(p.remote) == 0 {
		return nil
	}
	return c.runLocked(&call, fl, p.enqueueOn(c))
}

func (c *Comm) p2pPlan(ops []comm.P2P) plan {
	var p plan
	var sends, recvs []comm.P2P // to and from self
	for _, o := range ops {
		switch {
		case o.Peer != c.rank:
			p.transfer(o.Kind, o.Peer, o.Buf, 0, o.Count, o.DType)
		case o.Kind == comm.SendKind:
			sends = append(sends, o)
		default:
			recvs = append(recvs, o)
		}
	}
	// Validate (checkSelfPairs) paired them: as many of each, the k-th of
	// each agreeing on count and type.
	for k, snd := range sends {
		rcv := recvs[k]
		p.copy(rcv.Buf, 0, snd.Buf, 0, snd.Count*snd.DType.Size())
	}
	return p
}
