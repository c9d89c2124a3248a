package comm

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// Sentinel errors; every backend's errors wrap one of them.
var (
	ErrInvalidArgument = errs.ErrInvalidArgument // a bad count, root, peer, dtype, op or buffer
	ErrClosed          = errs.ErrClosed          // the communicator was closed
	ErrTimeout         = errs.ErrTimeout         // GPUCOMM_TIMEOUT passed before the operation finished
	ErrNotBuilt        = errs.ErrNotBuilt        // the backend was not compiled into this binary
	ErrUnsupported     = errs.ErrUnsupported     // the backend or device cannot do this
	ErrLibraryNotFound = errs.ErrLibraryNotFound // CUDA, NVRTC or NCCL could not be loaded
	ErrNotCUDAAware    = errs.ErrNotCUDAAware    // MPI cannot take device pointers
	ErrDuplicateGPU    = errs.ErrDuplicateGPU    // two ranks on one GPU where the backend forbids it
	ErrBadHandle       = errs.ErrBadHandle       // an IPC handle that cannot be opened here
	ErrMismatch        = errs.ErrMismatch        // ranks called different collectives
)

// Error is the error every backend returns: which backend, operation and rank
// failed, and why.
type Error struct {
	Backend string
	Op      string
	Rank    int
	Err     error
}

func (e *Error) Error() string {
	return fmt.Sprintf("gpucomm %s rank %d: %s: %v", e.Backend, e.Rank, e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error whose cause wraps sentinel (which may be nil).
func Errorf(backend, op string, rank int, sentinel error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if sentinel != nil && !errors.Is(err, sentinel) {
		err = fmt.Errorf("%w: %w", err, sentinel)
	}
	return &Error{Backend: backend, Op: op, Rank: rank, Err: err}
}

// Wrap makes err an *Error of the given backend, operation and rank, unless
// it is nil or already one.
func Wrap(backend, op string, rank int, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Backend: backend, Op: op, Rank: rank, Err: err}
}
