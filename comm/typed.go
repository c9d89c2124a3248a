package comm

import (
	"fmt"

	"github.com/gpucomm/gpucomm/devmem"
)

// The typed helpers take counts from the slices and the DType from T.

// AllReduce reduces send (all of it) into recv on every rank.
func AllReduce[T Element](c Communicator, send, recv devmem.Slice[T], op Op, s *devmem.Stream) error {
	return c.AllReduce(send.Buffer(), recv.Buffer(), send.Len(), DTypeOf[T](), op, s)
}

// Reduce reduces send into root's recv.
func Reduce[T Element](c Communicator, send, recv devmem.Slice[T], op Op, root int, s *devmem.Stream) error {
	return c.Reduce(send.Buffer(), recv.Buffer(), send.Len(), DTypeOf[T](), op, root, s)
}

// Broadcast copies root's send into every rank's recv (all of recv).
func Broadcast[T Element](c Communicator, send, recv devmem.Slice[T], root int, s *devmem.Stream) error {
	return c.Broadcast(send.Buffer(), recv.Buffer(), recv.Len(), DTypeOf[T](), root, s)
}

// AllGather gathers every rank's send into every rank's recv.
func AllGather[T Element](c Communicator, send, recv devmem.Slice[T], s *devmem.Stream) error {
	return c.AllGather(send.Buffer(), recv.Buffer(), send.Len(), DTypeOf[T](), s)
}

// ReduceScatter reduces send and leaves this rank's block in recv (all of it).
func ReduceScatter[T Element](c Communicator, send, recv devmem.Slice[T], op Op, s *devmem.Stream) error {
	return c.ReduceScatter(send.Buffer(), recv.Buffer(), recv.Len(), DTypeOf[T](), op, s)
}

// AllToAll exchanges equal blocks of send with every rank.
func AllToAll[T Element](c Communicator, send, recv devmem.Slice[T], s *devmem.Stream) error {
	if send.Len()%c.Size() != 0 {
		return fmt.Errorf("comm: AllToAll of %d elements over %d ranks: not equal blocks: %w", send.Len(), c.Size(), ErrInvalidArgument)
	}
	return c.AllToAll(send.Buffer(), recv.Buffer(), send.Len()/c.Size(), DTypeOf[T](), s)
}

// Gather gathers every rank's send into root's recv.
func Gather[T Element](c Communicator, send, recv devmem.Slice[T], root int, s *devmem.Stream) error {
	return c.Gather(send.Buffer(), recv.Buffer(), send.Len(), DTypeOf[T](), root, s)
}

// Scatter sends block r of root's send to rank r's recv (all of it).
func Scatter[T Element](c Communicator, send, recv devmem.Slice[T], root int, s *devmem.Stream) error {
	return c.Scatter(send.Buffer(), recv.Buffer(), recv.Len(), DTypeOf[T](), root, s)
}

// Send sends all of buf to peer.
func Send[T Element](c Communicator, buf devmem.Slice[T], peer int, s *devmem.Stream) error {
	return c.Send(buf.Buffer(), buf.Len(), DTypeOf[T](), peer, s)
}

// Recv receives into all of buf from peer.
func Recv[T Element](c Communicator, buf devmem.Slice[T], peer int, s *devmem.Stream) error {
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
