package comm

import (
	"fmt"

	"github.com/gpucomm/gpucomm/devmem"
)

// noComm is the error of a typed helper given a nil Communicator.
func noComm(op string) error {
	return fmt.Errorf("comm: %s on a nil Communicator: %w", op, ErrInvalidArgument)
}

// The typed helpers take the DType from T and the count from one slice:
// send's length where every rank contributes all of send (AllReduce, Reduce,
// AllGather, Gather, AllToAll), recv's where every rank receives all of recv
// (Broadcast, ReduceScatter, Scatter); Send and Recv take their one slice's.
// The other slice must hold at least what the operation needs.

// AllReduce reduces send (all of it: the count is send.Len()) into recv on
// every rank; recv holds at least send.Len() elements.
func AllReduce[T Element](c Communicator, send, recv devmem.Slice[T], op Op, s *devmem.Stream) error {
	if c == nil {
		return noComm("AllReduce")
	}
	return c.AllReduce(send.Buffer(), recv.Buffer(), send.Len(), DTypeOf[T](), op, s)
}

// Reduce reduces send (the count is send.Len()) into root's recv, which
// holds at least send.Len() elements; recv is ignored elsewhere.
func Reduce[T Element](c Communicator, send, recv devmem.Slice[T], op Op, root int, s *devmem.Stream) error {
	if c == nil {
		return noComm("Reduce")
	}
	return c.Reduce(send.Buffer(), recv.Buffer(), send.Len(), DTypeOf[T](), op, root, s)
}

// Broadcast copies root's send into every rank's recv (all of it: the count
// is recv.Len()); root's send holds at least recv.Len() elements.
func Broadcast[T Element](c Communicator, send, recv devmem.Slice[T], root int, s *devmem.Stream) error {
	if c == nil {
		return noComm("Broadcast")
	}
	return c.Broadcast(send.Buffer(), recv.Buffer(), recv.Len(), DTypeOf[T](), root, s)
}

// AllGather gathers every rank's send (the count is send.Len()) into every
// rank's recv, which holds at least Size()·send.Len() elements.
func AllGather[T Element](c Communicator, send, recv devmem.Slice[T], s *devmem.Stream) error {
	if c == nil {
		return noComm("AllGather")
	}
	return c.AllGather(send.Buffer(), recv.Buffer(), send.Len(), DTypeOf[T](), s)
}

// ReduceScatter reduces send and leaves this rank's block in recv (all of
// it: the count is recv.Len()); send holds at least Size()·recv.Len().
func ReduceScatter[T Element](c Communicator, send, recv devmem.Slice[T], op Op, s *devmem.Stream) error {
	if c == nil {
		return noComm("ReduceScatter")
	}
	return c.ReduceScatter(send.Buffer(), recv.Buffer(), recv.Len(), DTypeOf[T](), op, s)
}

// AllToAll exchanges equal blocks of send with every rank: the count is
// send.Len()/Size(), which must divide evenly; recv holds at least send.Len().
func AllToAll[T Element](c Communicator, send, recv devmem.Slice[T], s *devmem.Stream) error {
	if c == nil {
		return noComm("AllToAll")
	}
	n := c.Size()
	if n <= 0 {
		// No communicator (a nil or zero *local.Comm, say): its own call
		// says why, before any arithmetic on its size; one that takes the
		// call anyway is refused here.
		if err := c.AllToAll(send.Buffer(), recv.Buffer(), 0, DTypeOf[T](), s); err != nil {
			return err
		}
		return fmt.Errorf("comm: AllToAll over a communicator of %d ranks: %w", n, ErrInvalidArgument)
	}
	if send.Len()%n != 0 {
		return fmt.Errorf("comm: AllToAll of %d elements over %d ranks: not equal blocks: %w", send.Len(), n, ErrInvalidArgument)
	}
	return c.AllToAll(send.Buffer(), recv.Buffer(), send.Len()/n, DTypeOf[T](), s)
}

// Gather gathers every rank's send (the count is send.Len()) into root's
// recv, which holds at least Size()·send.Len() elements.
func Gather[T Element](c Communicator, send, recv devmem.Slice[T], root int, s *devmem.Stream) error {
	if c == nil {
		return noComm("Gather")
	}
	return c.Gather(send.Buffer(), recv.Buffer(), send.Len(), DTypeOf[T](), root, s)
}

// Scatter sends block r of root's send to rank r's recv (all of it: the
// count is recv.Len()); root's send holds at least Size()·recv.Len().
func Scatter[T Element](c Communicator, send, recv devmem.Slice[T], root int, s *devmem.Stream) error {
	if c == nil {
		return noComm("Scatter")
	}
	return c.Scatter(send.Buffer(), recv.Buffer(), recv.Len(), DTypeOf[T](), root, s)
}

// Send sends all of buf to peer.
func Send[T Element](c Communicator, buf devmem.Slice[T], peer int, s *devmem.Stream) error {
	if c == nil {
		return noComm("Send")
	}
	return c.Send(buf.Buffer(), buf.Len(), DTypeOf[T](), peer, s)
}

// Recv receives into all of buf from peer.
func Recv[T Element](c Communicator, buf devmem.Slice[T], peer int, s *devmem.Stream) error {
	if c == nil {
		return noComm("Recv")
	}
	return c.Recv(buf.Buffer(), buf.Len(), DTypeOf[T](), peer, s)
}

// SendSlice is a GroupP2P entry sending all of buf to peer.
func SendSlice[T Element](peer int, buf devmem.Slice[T]) P2P {
	return SendTo(peer, buf.Buffer(), buf.Len(), DTypeOf[T]())
}

// RecvSlice is a GroupP2P entry receiving into all of buf from peer.
func RecvSlice[T Element](peer int, buf devmem.Slice[T]) P2P {
	return RecvFrom(peer, buf.Buffer(), buf.Len(), DTypeOf[T]())
}
