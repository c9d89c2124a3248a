package comm

import "github.com/gpucomm/gpucomm/devmem"

// Undefined as a color to Split leaves the rank out of every new communicator.
const Undefined = -1

// Communicator connects the ranks of one group. Its methods are called by
// every rank of the group in the same order (collectives) or by the two ranks
// of a transfer (point-to-point), as with MPI and NCCL.
//
// Counts are in elements of dt. Buffers must live on Device(). send and recv
// may be the same buffer (in place) where the operation allows: every
// operation but AllToAll accepts it, AllGather and Gather when send is the
// rank's own block of recv. A nil stream makes the call complete before it
// returns.
//
// Every method checks its arguments before it touches memory: a bad count,
// root, peer, dtype, op or buffer returns an error wrapping
// ErrInvalidArgument and leaves every buffer unchanged.
type Communicator interface {
	// Rank is this rank's index in [0, Size).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// LocalRank and LocalSize place this rank among the ranks of its node.
	LocalRank() int
	LocalSize() int
	// Backend names the backend ("local", "mpi", "cudaaware", "nccl").
	Backend() string
	// Device is the device whose memory this rank's buffers must live in.
	Device() *devmem.Device

	// AllReduce reduces count elements of every rank's send into every
	// rank's recv.
	AllReduce(send, recv devmem.Buffer, count int, dt DType, op Op, s *devmem.Stream) error
	// Reduce reduces into root's recv; recv is ignored elsewhere.
	Reduce(send, recv devmem.Buffer, count int, dt DType, op Op, root int, s *devmem.Stream) error
	// Broadcast copies root's send into every rank's recv; send is ignored
	// elsewhere.
	Broadcast(send, recv devmem.Buffer, count int, dt DType, root int, s *devmem.Stream) error
	// AllGather puts rank r's count elements of send at block r of every
	// rank's recv, which holds Size()*count elements.
	AllGather(send, recv devmem.Buffer, count int, dt DType, s *devmem.Stream) error
	// ReduceScatter reduces every rank's send (Size()*count elements) and
	// leaves block r of the result in rank r's recv (count elements).
	ReduceScatter(send, recv devmem.Buffer, count int, dt DType, op Op, s *devmem.Stream) error
	// AllToAll sends block j of send (count elements) to rank j, which puts
	// it at block r of its recv.
	AllToAll(send, recv devmem.Buffer, count int, dt DType, s *devmem.Stream) error
	// Gather puts rank r's send at block r of root's recv.
	Gather(send, recv devmem.Buffer, count int, dt DType, root int, s *devmem.Stream) error
	// Scatter sends block r of root's send to rank r's recv.
	Scatter(send, recv devmem.Buffer, count int, dt DType, root int, s *devmem.Stream) error
	// Send and Recv move count elements to or from peer; messages between
	// two ranks arrive in the order sent.
	Send(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) error
	Recv(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) error
	// GroupP2P issues several sends and receives as one operation, so that
	// exchanges in both directions cannot deadlock (a halo exchange).
	GroupP2P(ops []P2P, s *devmem.Stream) error
	// Barrier returns (or, with a stream, lets the stream go on) once every
	// rank has reached it.
	Barrier(s *devmem.Stream) error
	// Split makes communicators of the ranks that give the same color,
	// ordered by key then by rank; a rank giving Undefined gets nil. Every
	// rank calls it; it is not stream-ordered.
	Split(color, key int) (Communicator, error)
	// Close releases the communicator; later calls return ErrClosed. Every
	// rank closes its communicators, as it opened them, in the same order
	// (as MPI_Comm_free and ncclCommDestroy ask). Close waits for this
	// rank's own operations on the communicator, not for the other ranks:
	// it is not a barrier, except on the mpi and cudaaware backends when a
	// timeout is set (GPUCOMM_TIMEOUT or WithTimeout), where the ranks meet
	// in Close before anything is released, so that a rank stuck elsewhere
	// is waited for there and not in MPI_Finalize. A program that needs the
	// ranks to meet calls Barrier.
	Close() error
}

// P2PKind says whether a P2P entry sends or receives.
type P2PKind int

const (
	// SendKind sends Buf to Peer.
	SendKind P2PKind = iota + 1
	// RecvKind receives from Peer into Buf.
	RecvKind
)

// P2P is one transfer of a GroupP2P.
type P2P struct {
	Kind  P2PKind
	Buf   devmem.Buffer
	Count int
	DType DType
	Peer  int
}

// SendTo is a P2P entry that sends count elements of buf to peer.
func SendTo(peer int, buf devmem.Buffer, count int, dt DType) P2P {
	return P2P{Kind: SendKind, Buf: buf, Count: count, DType: dt, Peer: peer}
}

// RecvFrom is a P2P entry that receives count elements from peer into buf.
func RecvFrom(peer int, buf devmem.Buffer, count int, dt DType) P2P {
	return P2P{Kind: RecvKind, Buf: buf, Count: count, DType: dt, Peer: peer}
}

// SendCall, RecvCall and GroupCall are the Call (for Validate and errors)
// and the transfer list of a Send, a Recv and a GroupP2P, for backends that
// run every point-to-point operation as a group. GroupCall copies ops: the
// caller may reuse its slice as soon as GroupP2P returns.
func SendCall(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) (Call, []P2P) {
	return Call{Operation: OpSend, Send: buf, Count: count, DType: dt, Root: peer, Stream: s},
		[]P2P{SendTo(peer, buf, count, dt)}
}

// RecvCall: see SendCall.
func RecvCall(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) (Call, []P2P) {
	return Call{Operation: OpRecv, Recv: buf, Count: count, DType: dt, Root: peer, Stream: s},
		[]P2P{RecvFrom(peer, buf, count, dt)}
}

// GroupCall: see SendCall.
func GroupCall(ops []P2P, s *devmem.Stream) (Call, []P2P) {
	ops = append([]P2P(nil), ops...)
	return Call{Operation: OpGroupP2P, P2P: ops, Stream: s}, ops
}
