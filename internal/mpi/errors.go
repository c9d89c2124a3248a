package mpi

import "fmt"

// Error is a failure that MPI itself returned (every communicator of this
// package has MPI_ERRORS_RETURN). Arguments that Go can check never get this
// far: they fail with an error wrapping errs.ErrInvalidArgument instead.
type Error struct {
	Call  string // the MPI function, e.g. "MPI_Allreduce"
	Code  int    // the error code MPI returned
	Class int    // its error class (MPI_Error_class), -1 if unknown
	Msg   string // MPI_Error_string of Code

	kind error // sentinel that the class maps to, if any
}

func (e *Error) Error() string {
	return fmt.Sprintf("mpi: %s failed: %s (code %d, class %d)", e.Call, e.Msg, e.Code, e.Class)
}

// Unwrap returns errs.ErrInvalidArgument for the argument classes
// (MPI_ERR_COUNT, MPI_ERR_RANK, MPI_ERR_TRUNCATE, ...), nil otherwise.
func (e *Error) Unwrap() error { return e.kind }
