package mpicomm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// Direct operations hand MPI device pointers. Collectives are MPI's blocking
// ones: CUDA-aware Open MPI supports device buffers in blocking collectives
// but not in nonblocking reductions (open-mpi/ompi#9845), and the blocking
// call is what a C program would make. With a timeout, block runs the call
// aside and gives up at the deadline.

func (c *Comm) directAllReduce(o *op) error {
	call := o.call
	err := c.block(o, func() error {
		return c.coll.Allreduce(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType), mpiOp(call.Op))
	})
	if err != nil {
		return err
	}
	return c.divideOnHost(o, call.Recv)
}

func (c *Comm) directReduce(o *op) error {
	call := o.call
	err := c.block(o, func() error {
		return c.coll.Reduce(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType), mpiOp(call.Op), call.Root)
	})
	if err != nil || c.rank != call.Root {
		return err
	}
	return c.divideOnHost(o, call.Recv)
}

func (c *Comm) directBroadcast(o *op) error {
	call := o.call
	if c.rank == call.Root && call.Send.Addr() != call.Recv.Addr() {
		// MPI_Bcast has one buffer: the root's data goes to its recv first.
		if err := devmem.CopyN(call.Recv, call.Send, call.Count*call.DType.Size(), nil); err != nil {
			return err
		}
	}
	return c.block(o, func() error {
		return c.coll.Bcast(call.Recv.Addr(), call.Count, mpiType(call.DType), call.Root)
	})
}

func (c *Comm) directAllGather(o *op) error {
	call := o.call
	return c.block(o, func() error {
		return c.coll.Allgather(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType))
	})
}

// directReduceScatter in place (recv is this rank's block of send, NCCL's
// form) reduces into a scratch device buffer and copies the block back:
// MPI_IN_PLACE would leave the result in the first block, and CUDA-aware Open
// MPI 4.1 got in-place reduce-scatter of device memory wrong on an H200.
func (c *Comm) directReduceScatter(o *op) error {
	call := o.call
	dt, red := mpiType(call.DType), mpiOp(call.Op)
	n := call.Count * call.DType.Size()
	recv := call.Recv
	if call.Send.Overlaps(call.Recv) {
		tmp, err := c.dev.Alloc(n)
		if err != nil {
			return err
		}
		defer tmp.Free()
		recv = tmp
	}
	err := c.block(o, func() error {
		return c.coll.ReduceScatterBlock(call.Send.Addr(), recv.Addr(), call.Count, dt, red)
	})
	if err != nil {
		return err
	}
	if !recv.Same(call.Recv) {
		if err := devmem.CopyN(call.Recv, recv, n, nil); err != nil {
			return err
		}
	}
	return c.divideOnHost(o, call.Recv)
}

func (c *Comm) directAllToAll(o *op) error {
	call := o.call
	return c.block(o, func() error {
		return c.coll.Alltoall(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType))
	})
}

func (c *Comm) directGather(o *op) error {
	call := o.call
	return c.block(o, func() error {
		return c.coll.Gather(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType), call.Root)
	})
}

func (c *Comm) directScatter(o *op) error {
	call := o.call
	return c.block(o, func() error {
		return c.coll.Scatter(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType), call.Root)
	})
}

// divideOnHost finishes an Avg: MPI summed into buf on the device, and MPI
// cannot divide there, so the sum goes through pinned slots, is divided on
// the host and comes back, pipelined like any staged transfer.
func (c *Comm) divideOnHost(o *op, buf devmem.Buffer) error {
	call := o.call
	if call.Op != comm.Avg {
		return nil
	}
	n := call.Count * call.DType.Size()
	p := c.pipe(n, call.DType.Size())
	p.in, p.post, p.out = copyIn(buf), c.average(call, 0, n), copyOut(buf, 0)
	return c.run(o, p)
}

// directP2P posts every receive, then every send, of device memory, and
// waits for them all: a group cannot deadlock on itself. A lone Send or Recv
// without a timeout is MPI's blocking call, as a C program makes it (0.2-0.5
// µs less than Isend/Irecv and Waitall at 8 B, docs/PERFORMANCE.md), where
// MPI lets other goroutines call it meanwhile.
func (c *Comm) directP2P(o *op, ps []comm.P2P, tags []int) (err error) {
	if len(ps) == 1 && o.deadline.IsZero() && c.multiple {
		return c.blockingP2P(ps[0], tags[0])
	}
	reqs := make([]*mpi.Request, len(ps))
	defer func() {
		if err != nil && !errors.Is(err, comm.ErrTimeout) {
			if done, terr := mpi.Testall(reqs); terr != nil || !done {
				c.setBroken(fmt.Errorf("%v failed with MPI requests pending: %w", o.call.Operation, err))
			}
		}
	}()
	for _, recvs := range []bool{true, false} {
		for i, p := range ps {
			if (p.Kind == comm.RecvKind) != recvs {
				continue
			}
			dt := mpiType(p.DType)
			if recvs {
				reqs[i], err = c.p2p.Irecv(p.Buf.Addr(), p.Count, dt, p.Peer, tags[i])
			} else {
				reqs[i], err = c.p2p.Isend(p.Buf.Addr(), p.Count, dt, p.Peer, tags[i])
			}
			if err != nil {
				return err
			}
		}
	}
	if err := c.wait(o, reqs); err != nil {
		if !errors.Is(err, comm.ErrTimeout) {
			return err
		}
		var who []string
		for i, p := range ps {
			if reqs[i].Done() {
				continue
			}
			if p.Kind == comm.SendKind {
				who = append(who, fmt.Sprintf("rank %d never received %d %v (tag %d)", p.Peer, p.Count, p.DType, tags[i]))
			} else {
				who = append(who, fmt.Sprintf("rank %d never sent %d %v (tag %d)", p.Peer, p.Count, p.DType, tags[i]))
			}
		}
		return fmt.Errorf("%v: no progress after %v; %s: %w", o.call.Operation, c.timeout, strings.Join(who, "; "), comm.ErrTimeout)
	}
	for i, p := range ps {
		if p.Kind == comm.RecvKind && reqs[i].Status().Count != p.Count {
			return receivedOtherCount(p, reqs[i].Status().Count)
		}
	}
	return nil
}

func (c *Comm) blockingP2P(p comm.P2P, tag int) error {
	dt := mpiType(p.DType)
	if p.Kind == comm.SendKind {
		return c.p2p.Send(p.Buf.Addr(), p.Count, dt, p.Peer, tag)
	}
	st, err := c.p2p.Recv(p.Buf.Addr(), p.Count, dt, p.Peer, tag)
	if err != nil {
		return err
	}
	if st.Count != p.Count {
		return receivedOtherCount(p, st.Count)
	}
	return nil
}

func receivedOtherCount(p comm.P2P, got int) error {
	return fmt.Errorf("receive of %d %v from rank %d met a send of %d elements: %w", p.Count, p.DType, p.Peer, got, comm.ErrMismatch)
}
