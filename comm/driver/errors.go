package driver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

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
	ErrAborted         = errs.ErrAborted         // a rank aborted the job (comm.Aborter)
)

// Error is the error every backend returns: which backend, operation and rank
// failed, and why.
type Error struct {
	Backend string
	Op      string
	Rank    int // -1 when the rank is not known (MPI not up yet)
	Err     error
}

// Error reads "gpucomm BACKEND rank R: OP: cause"; an unknown rank (negative)
// and an empty Op are left out rather than printed as "rank -1".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("gpucomm")
	if e.Backend != "" {
		b.WriteString(" " + e.Backend)
	}
	if e.Rank >= 0 {
		b.WriteString(" rank " + strconv.Itoa(e.Rank))
	}
	b.WriteString(": ")
	if e.Op != "" {
		b.WriteString(e.Op + ": ")
	}
	fmt.Fprint(&b, e.Err)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error whose cause wraps sentinel (which may be nil). The
// sentinel's text is added to the message only when the message does not
// already say it, so that "communicator is closed" never reads twice.
func Errorf(backend, op string, rank int, sentinel error, format string, args ...any) error {
	return &Error{Backend: backend, Op: op, Rank: rank, Err: withSentinel(fmt.Errorf(format, args...), sentinel)}
}

// withSentinel makes err wrap sentinel too, without repeating its text.
func withSentinel(err, sentinel error) error {
	switch {
	case sentinel == nil || errors.Is(err, sentinel):
		return err
	case strings.Contains(err.Error(), sentinel.Error()):
		return &joined{msg: err.Error(), errs: []error{err, sentinel}}
	}
	return fmt.Errorf("%w: %w", err, sentinel)
}

// joined is an error whose text is msg and which wraps every one of errs.
type joined struct {
	msg  string
	errs []error
}

func (j *joined) Error() string   { return j.msg }
func (j *joined) Unwrap() []error { return j.errs }

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
