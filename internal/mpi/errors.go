package mpi

import (
	"errors"
	"fmt"
)

// Error is a failure that MPI itself returned (every communicator of this
// package has MPI_ERRORS_RETURN). Arguments that Go can check never get this
// far: they fail with an error wrapping errs.ErrInvalidArgument instead.
type Error struct {
	Call  string // the MPI function, e.g. "MPI_Allreduce"
	Code  int    // the error code MPI returned
	Class int    // its error class (MPI_Error_class), -1 if unknown
	Msg   string // MPI_Error_string of Code

	kind      error // sentinel that the class maps to, if any
	truncated bool  // the class is MPI_ERR_TRUNCATE
}

// Truncated reports whether err holds MPI's MPI_ERR_TRUNCATE: a receive
// matched a message longer than its buffer. MPI has then taken the message
// (the sender's call completes) and dropped what did not fit.
func Truncated(err error) bool {
	if err == nil {
		return false // before e, which escapes: the calls that succeed allocate nothing
	}
	var e *Error
	return errors.As(err, &e) && e.truncated
}

func (e *Error) Error() string {
	return fmt.Sprintf("mpi: %s failed: %s (code %d, class %d)", e.Call, e.Msg, e.Code, e.Class)
}

// Unwrap returns errs.ErrInvalidArgument for the argument classes
// (MPI_ERR_COUNT, MPI_ERR_RANK, MPI_ERR_TRUNCATE, ...), nil otherwise.
func (e *Error) Unwrap() error { return e.kind }

// PeerError is a point-to-point request that MPI failed to post (Isend,
// Irecv) or completed with an error (Wait, Test, Waitall, Testall,
// WaitTimeout): Err, MPI's *Error, with the
// rank the request sent to or received from, in its communicator. A peer
// that died or cannot be reached fails this way.
type PeerError struct {
	Peer int  // the destination of a send, the source of a receive
	Send bool // a send (Isend), else a receive (Irecv)
	Err  error
}

func (e *PeerError) Error() string {
	if e.Send {
		return fmt.Sprintf("send to rank %d: %v", e.Peer, e.Err)
	}
	return fmt.Sprintf("receive from rank %d: %v", e.Peer, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }
