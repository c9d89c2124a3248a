package mpicomm

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/devhook"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/pipeline"
)

// directStrategy is comm/cudaaware's (strategy.go).
type directStrategy struct{}

func (directStrategy) mode() Mode         { return Direct }
func (directStrategy) deviceMemory() bool { return true }
func (directStrategy) nodePath() bool     { return false }
func (directStrategy) stagesLarge() bool  { return true }

// Direct operations hand MPI device pointers. Collectives are MPI's blocking
// ones: CUDA-aware Open MPI supports device buffers in blocking collectives
// but not in nonblocking reductions (open-mpi/ompi#9845), and the blocking
// call is what a C program would make. With a timeout, block runs the call
// aside and gives up at the deadline.

func (c *Comm) directAllReduce(o *op) error {
	if err := c.blockOp(o, (*Comm).mpiAllreduce); err != nil {
		return err
	}
	return c.divideOnHost(o, o.call.Recv)
}

func (c *Comm) directReduce(o *op) error {
	if err := c.blockOp(o, (*Comm).mpiReduce); err != nil || c.rank != o.call.Root {
		return err
	}
	return c.divideOnHost(o, o.call.Recv)
}

func (c *Comm) directBroadcast(o *op) error {
	call := &o.call
	if c.rank == call.Root && call.Send.Addr() != call.Recv.Addr() {
		// MPI_Bcast has one buffer: the root's data goes to its recv first.
		if err := devmem.CopyN(call.Recv, call.Send, call.Count*call.DType.Size(), nil); err != nil {
			return err
		}
	}
	return c.blockOp(o, (*Comm).mpiBcast)
}

func (c *Comm) directAllGather(o *op) error { return c.blockOp(o, (*Comm).mpiAllgather) }

// directReduceScatter in place (recv is this rank's block of send, NCCL's
// form) reduces into a scratch device buffer and copies the block back:
// MPI_IN_PLACE would leave the result in the first block, and CUDA-aware Open
// MPI 4.1 got in-place reduce-scatter of device memory wrong on an H200.
func (c *Comm) directReduceScatter(o *op) (err error) {
	call := &o.call
	n := call.Count * call.DType.Size()
	o.recv = call.Recv
	if call.Send.Overlaps(call.Recv) {
		tmp, err := c.dev.Alloc(n)
		if err != nil {
			return err
		}
		defer func() {
			// After a timeout the abandoned MPI call may still write into
			// tmp: it stays allocated until Close ends the job.
			if !errors.Is(err, comm.ErrTimeout) {
				tmp.Free()
			}
		}()
		o.recv = tmp
	}
	if err := c.blockOp(o, (*Comm).mpiReduceScatter); err != nil {
		return err
	}
	if !o.recv.Same(call.Recv) {
		if err := devmem.CopyN(call.Recv, o.recv, n, nil); err != nil {
			return err
		}
	}
	return c.divideOnHost(o, call.Recv)
}

func (c *Comm) directAllToAll(o *op) error { return c.blockOp(o, (*Comm).mpiAlltoall) }

func (c *Comm) directGather(o *op) error { return c.blockOp(o, (*Comm).mpiGather) }

func (c *Comm) directScatter(o *op) error { return c.blockOp(o, (*Comm).mpiScatter) }

// The blocking MPI calls of the direct collectives, on the call's device
// pointers; method expressions of these go to blockOp, so that a call makes
// no closure.

func (c *Comm) mpiAllreduce(o *op) error {
	call := &o.call
	return c.coll.Allreduce(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType), mpiOp(call.Op))
}

func (c *Comm) mpiReduce(o *op) error {
	call := &o.call
	return c.coll.Reduce(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType), mpiOp(call.Op), call.Root)
}

func (c *Comm) mpiBcast(o *op) error {
	call := &o.call
	return c.coll.Bcast(call.Recv.Addr(), call.Count, mpiType(call.DType), call.Root)
}

func (c *Comm) mpiAllgather(o *op) error {
	call := &o.call
	return c.coll.Allgather(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType))
}

func (c *Comm) mpiReduceScatter(o *op) error {
	call := &o.call
	return c.coll.ReduceScatterBlock(call.Send.Addr(), o.recv.Addr(), call.Count, mpiType(call.DType), mpiOp(call.Op))
}

func (c *Comm) mpiAlltoall(o *op) error {
	call := &o.call
	return c.coll.Alltoall(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType))
}

func (c *Comm) mpiGather(o *op) error {
	call := &o.call
	return c.coll.Gather(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType), call.Root)
}

func (c *Comm) mpiScatter(o *op) error {
	call := &o.call
	return c.coll.Scatter(call.Send.Addr(), call.Recv.Addr(), call.Count, mpiType(call.DType), call.Root)
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
	p := c.cut(n, call.DType.Size())
	p.In, p.Post, p.Out = pipeline.CopyIn(buf), c.average(call, 0, n), pipeline.CopyOut(buf, 0)
	return c.run(o, p)
}

// directP2P posts every receive, then every send, of device memory, and
// waits for them all: a group cannot deadlock on itself. A lone Send or Recv
// without a timeout is MPI's blocking call, as a C program makes it (0.2-0.5
// µs less than Isend/Irecv and Waitall at 8 B, docs/PERFORMANCE.md), where
// MPI lets other goroutines call it meanwhile.
func (c *Comm) directP2P(o *op, ps []comm.P2P, tags []int) error {
	if len(ps) == 1 && o.deadline.IsZero() && c.multiple {
		return c.blockingP2P(ps[0], tags[0])
	}
	reqs, err := c.postP2P(o, ps, tags)
	if err != nil {
		return err
	}
	return c.completeP2P(o, ps, tags, reqs)
}

// postP2P posts every receive, then every send. When a post fails, those
// posted before it are left to MPI: unless they have completed, the ranks
// are out of step and the communicator is broken.
func (c *Comm) postP2P(o *op, ps []comm.P2P, tags []int) ([]*mpi.Request, error) {
	reqs := make([]*mpi.Request, len(ps))
	for _, recvs := range []bool{true, false} {
		for i, p := range ps {
			if (p.Kind == comm.RecvKind) != recvs {
				continue
			}
			var err error
			dt := mpiType(p.DType)
			if recvs {
				reqs[i], err = c.p2p.Irecv(p.Buf.Addr(), p.Count, dt, p.Peer, tags[i])
			} else {
				reqs[i], err = c.p2p.Isend(p.Buf.Addr(), p.Count, dt, p.Peer, tags[i])
			}
			if err != nil {
				c.leaveRequests(o, reqs, err)
				return nil, err
			}
		}
	}
	return reqs, nil
}

// leaveRequests breaks the communicator when an operation that failed with
// err leaves MPI requests pending (a timeout says so itself).
func (c *Comm) leaveRequests(o *op, reqs []*mpi.Request, err error) {
	if errors.Is(err, comm.ErrTimeout) {
		return
	}
	if done, terr := mpi.Testall(reqs); terr != nil || !done {
		c.setBroken(fmt.Errorf("%v failed with MPI requests pending: %w", o.call.Operation, err))
	}
}

// completeP2P waits for posted transfers (within the operation's deadline)
// and checks what the receives got.
func (c *Comm) completeP2P(o *op, ps []comm.P2P, tags []int, reqs []*mpi.Request) error {
	if err := c.wait(o, reqs); err != nil {
		if !errors.Is(err, comm.ErrTimeout) {
			c.leaveRequests(o, reqs, err)
			return truncatedP2P(err)
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
	return receivedCounts(ps, reqs)
}

// receivedCounts checks that each completed receive got the count it asked
// for.
func receivedCounts(ps []comm.P2P, reqs []*mpi.Request) error {
	for i, p := range ps {
		if p.Kind == comm.RecvKind && reqs[i].Status().Count != p.Count {
			return receivedOtherCount(p, reqs[i].Status().Count)
		}
	}
	return nil
}

// deferBytes bounds the receives that p2pNow leaves for the stream's next
// Synchronize to complete (or, a lone receive, to post): messages this small
// go eagerly (Open MPI's shared-memory eager limit is 4 KiB, MPICH's larger),
// so the sender finishes without this rank's progress, and no goroutine needs
// to wait for them in the meantime.
const deferBytes = 4096

// p2pNow runs a stream-ordered Send, Recv or GroupP2P of Direct mode at
// once, on the calling goroutine, when the stream has nothing pending (no
// queued host work, its GPU work done), so that no goroutine of the stream's
// has to start for it: it posts the transfers (MPI's nonblocking calls, so
// that the call never waits for a peer) and tests them once. Transfers not
// complete then are waited for in stream order, as a wait the stream's
// goroutine polls and hands over to a Synchronize that comes meanwhile
// (devhook.HostWait): small receives start no goroutine (the next
// Synchronize, later work queued on the stream, or the sweep completes
// them), the rest start the stream's goroutine, which polls. A lone small
// receive is not even posted (recvLater). An error is, as for a queued
// call, the next Synchronize's. It reports false,
// having done nothing, where the call must be queued instead (a busy stream,
// a timeout to honour, the host-staged mode, MPI below THREAD_MULTIPLE, VMM
// memory to bounce (vmm.go), a closed or broken communicator, whose error the queued call reports).
func (c *Comm) p2pNow(call driver.Call, fl driver.Flight, ps []comm.P2P, tags []int) (bool, error) {
	if !c.direct(call) || c.timeout > 0 || !c.multiple || p2pHasVMM(ps) {
		// Below MPI_THREAD_MULTIPLE an MPI call may wait for another
		// goroutine's blocking collective: not on the caller's goroutine.
		return false, nil
	}
	if idle, err := call.Stream.Query(); err != nil || !idle {
		return false, nil
	}
	if c.beginUnbroken() != nil {
		return false, nil
	}
	fl.Started()
	if len(ps) == 1 && ps[0].Kind == comm.RecvKind && ps[0].Count*ps[0].DType.Size() <= deferBytes && c.multiple {
		return true, c.recvLater(call, fl, ps[0], tags[0])
	}
	o := op{c: c, call: call}
	reqs, err := c.postP2P(&o, ps, tags)
	if err == nil {
		var done bool
		switch done, err = mpi.Testall(reqs); {
		case err != nil:
			c.leaveRequests(&o, reqs, err)
			err = truncatedP2P(err)
		case done:
			err = receivedCounts(ps, reqs)
		default:
			return true, c.waitLater(o, fl, slices.Clone(ps), slices.Clone(tags), reqs)
		}
	}
	c.end()
	fl.Ended(err)
	if err != nil {
		err = c.finish(&o, err)
		return true, call.Stream.HostFunc(func() error { return err })
	}
	return true, nil
}

// recvLater queues a small receive whole, deferred: its message comes
// eagerly, so nothing needs posting now, and the Synchronize that completes
// it makes MPI's blocking receive, as a call on no stream does; the
// stream's goroutine, when later work starts it first, polls with
// MPI_Iprobe for the message (its tag is this message's own) and receives
// it once it is there. c.end is its, once it is done.
func (c *Comm) recvLater(call driver.Call, fl driver.Flight, p comm.P2P, tag int) error {
	o := op{c: c, call: call}
	wait := func() error {
		defer c.end()
		err := c.finish(&o, c.blockingP2P(p, tag))
		fl.Ended(err)
		return err
	}
	poll := func() (bool, error) {
		found, _, err := c.p2p.Iprobe(p.Peer, tag, mpiType(p.DType))
		switch {
		case err != nil:
			c.setBroken(fmt.Errorf("%v: MPI_Iprobe failed with the message from rank %d not received: %w", call.Operation, p.Peer, err))
		case !found:
			return false, nil
		default:
			err = c.blockingP2P(p, tag) // the message is here: MPI_Recv completes at once
		}
		c.end()
		err = c.finish(&o, err)
		fl.Ended(err)
		return true, err
	}
	if err := devhook.HostWait(call.Stream, wait, poll, true); err != nil {
		// The stream went away under the call: receive here, so that the
		// message numbers stay in step.
		return errors.Join(c.wrap(call.Operation, err), wait())
	}
	return nil
}

// waitLater queues the completion of posted transfers on the call's stream,
// as a wait the stream's goroutine may poll (devhook.HostWait); c.end
// is its, once they are done.
func (c *Comm) waitLater(o op, fl driver.Flight, ps []comm.P2P, tags []int, reqs []*mpi.Request) error {
	rest := func() error {
		defer c.end()
		err := c.finish(&o, c.completeP2P(&o, ps, tags, reqs))
		fl.Ended(err)
		return err
	}
	poll := func() (bool, error) {
		done, err := mpi.Testall(reqs)
		switch {
		case err != nil:
			c.leaveRequests(&o, reqs, err)
			err = truncatedP2P(err)
		case !done:
			return false, nil
		default:
			err = receivedCounts(ps, reqs)
		}
		c.end()
		err = c.finish(&o, err)
		fl.Ended(err)
		return true, err
	}
	pending := 0
	for i, p := range ps {
		if !reqs[i].Done() {
			pending += p.Count * p.DType.Size()
			if p.Kind == comm.SendKind {
				pending += deferBytes + 1 // a send not done at once waits for the peer
			}
		}
	}
	if err := devhook.HostWait(o.call.Stream, rest, poll, pending <= deferBytes); err != nil {
		// The stream went away under the call (destroyed meanwhile): the
		// posted transfers still complete here, so that MPI keeps no
		// requests into the user's buffers.
		return errors.Join(c.wrap(o.call.Operation, err), rest())
	}
	return nil
}

func (c *Comm) blockingP2P(p comm.P2P, tag int) error {
	dt := mpiType(p.DType)
	if p.Kind == comm.SendKind {
		return c.p2p.Send(p.Buf.Addr(), p.Count, dt, p.Peer, tag)
	}
	st, err := c.p2p.Recv(p.Buf.Addr(), p.Count, dt, p.Peer, tag)
	if mpi.Truncated(err) {
		return fmt.Errorf("receive of %d %v from rank %d met a longer send: %w", p.Count, p.DType, p.Peer, comm.ErrMismatch)
	}
	if err != nil {
		return err
	}
	if st.Count != p.Count {
		return receivedOtherCount(p, st.Count)
	}
	return nil
}

// truncatedP2P is a direct transfer's error when MPI truncated a receive's
// message (the send was longer: MPI took the message, so the send
// completes, and wrote what fit into the receive's buffer), else err as it
// is.
func truncatedP2P(err error) error {
	if !mpi.Truncated(err) {
		return err
	}
	var pe *mpi.PeerError
	if errors.As(err, &pe) {
		return fmt.Errorf("a receive from rank %d met a longer send: %w", pe.Peer, comm.ErrMismatch)
	}
	return fmt.Errorf("a receive met a longer send: %w", comm.ErrMismatch)
}

func receivedOtherCount(p comm.P2P, got int) error {
	return fmt.Errorf("receive of %d %v from rank %d met a send of %d elements: %w", p.Count, p.DType, p.Peer, got, comm.ErrMismatch)
}
