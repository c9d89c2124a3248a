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
// collective but AllToAll accepts it, AllGather and Gather when send is the
// rank's own block of recv; GroupP2P does not. A nil stream makes the call complete before it
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
	// two ranks arrive in the order sent. A receive must give the send's
	// count and dtype. The local, mpi and cudaaware backends refuse another
	// count (in bytes) with ErrMismatch, the send completing and the pair in
	// step for the next message; local and mpi leave the receive's buffer
	// as it was. cudaaware's MPI writes the buffer itself, so it may hold
	// part of the message, and on a GPU a receive shorter than its send is
	// MPI's truncation into device memory, which CUDA-aware Open MPI 4.1
	// does not survive (it copies the whole message). Only the local
	// backend refuses another dtype of the same size (the MPI backends pass
	// the bytes as sent); NCCL checks neither between two ranks (the call
	// then hangs until the timeout, or moves what was sent).
	Send(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) error
	Recv(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) error
	// GroupP2P issues several sends and receives as one operation, so that
	// exchanges in both directions cannot deadlock (a halo exchange). Its
	// transfers run in no set order: a receive's bytes may not overlap a
	// send's, so an exchange in place goes through a second buffer (such a
	// call is refused with ErrInvalidArgument); sends may share bytes, and
	// receives may (a bandwidth test's window), one of the messages left.
	// Transfers to the rank itself are allowed here alone and pair up in
	// the call, the k-th send to self with the k-th receive from self, of
	// the same count and dtype; an unpaired one is refused with
	// ErrInvalidArgument (a receive from self could never be met). A
	// receive that meets a send of another count fails the call with
	// ErrMismatch, as Recv does, and consumes the message all the same, so
	// that the next messages between the two ranks stay in step; what the
	// call's other receives wrote is then undefined (the local backend
	// writes none of them).
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
