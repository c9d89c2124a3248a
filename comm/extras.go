package comm

import "github.com/gpucomm/gpucomm/devmem"

// Some backends offer more than Communicator. A program finds those extras
// by a type assertion on the Communicator it opened, as database/sql finds
// a driver's optional interfaces; a backend without them fails the
// assertion, and nothing else changes:
//
//	if w, ok := c.(comm.StreamWaiter); ok {
//		err = w.Wait(s) // returns early if a peer is gone
//	} else {
//		err = s.Synchronize()
//	}

// StreamWaiter waits for the work queued on a stream so far, as
// Stream.Synchronize does, but returns early with the communicator's own
// failure (ErrTimeout once an operation ran past the timeout, or the
// library's asynchronous error), where Synchronize could wait forever for a
// peer that is gone. The nccl backend has it.
type StreamWaiter interface {
	Wait(s *devmem.Stream) error
}

// Staging describes a communicator that moves data through pinned host
// memory in chunks: the mpi backend always, the cudaaware backend for
// half-precision and widened 8-bit reductions and for reductions of
// StageReduceBytes or more.
type Staging interface {
	// ChunkBytes is the pipelining chunk the ranks agreed on.
	ChunkBytes() int
	// StageReduceBytes is the size from which the cudaaware backend's
	// reductions go through the pipeline (0: never by size).
	StageReduceBytes() int
	// StagedReductions counts the reductions this rank staged only because
	// of their size.
	StagedReductions() int64
}

// NodePath describes a communicator that moves point-to-point messages
// between two ranks of one node through memory both processes map (the mpi
// backend).
type NodePath interface {
	// NodeBytes is the size from which messages go that way, as the ranks
	// agreed; 0 when every message goes through MPI.
	NodeBytes() int
	// NodeMessages counts the messages this rank sent and received that way.
	NodeMessages() (sent, received int64)
}

// MPIThreads tells whether MPI gave the MPI-based backends
// MPI_THREAD_MULTIPLE (goroutines may then block in MPI at once).
type MPIThreads interface {
	ThreadMultiple() bool
}

// Aborter gives up on the job of a rank that cannot go on, so that the
// other ranks are not left waiting for it in a collective or a receive
// (where, with no timeout, they would wait for ever). reason says why; it
// is the first thing the job says of the abort. Every backend has it:
//
//   - mpi, cudaaware and nccl: Abort writes "gpucomm BACKEND rank R:
//     Abort: reason" on standard error (and the flight records, with
//     recording on), then calls MPI_Abort, which ends every process of the
//     job, this one included, with a failure status: it does not return.
//     The nccl backend leaves its NCCL communicator to the process's end
//     (ncclCommAbort could itself wait on a peer).
//   - local: the ranks are goroutines of this process, which goes on. Every
//     operation of the group (and of the groups Split from it, or it from)
//     that is waiting, and every later one, fails with an error wrapping
//     ErrAborted (and reason) that names the rank that aborted; Close
//     releases each communicator as usual.
//
// Abort is for a rank's own failure, not a cancellation the ranks agree
// on: ranks that stop together simply Close.
type Aborter interface {
	Abort(reason error)
}

// Abort calls c's Abort (see Aborter); it returns false, having done
// nothing, when c is nil or has no Abort (a wrapper that hides it). A
// backend's Abort of a nil *Comm does nothing.
func Abort(c Communicator, reason error) bool {
	a, ok := c.(Aborter)
	if ok {
		a.Abort(reason)
	}
	return ok
}
