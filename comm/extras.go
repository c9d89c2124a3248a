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
