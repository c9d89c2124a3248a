// Package errs holds the sentinel errors shared by every layer of gpucomm.
//
// They live here, below comm and devmem, so that low-level packages can return
// them without importing comm; comm and devmem re-export the same values, so
// errors.Is works whichever name a caller uses.
package errs

import "errors"

var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrClosed          = errors.New("communicator is closed")
	ErrTimeout         = errors.New("operation timed out")
	ErrNotBuilt        = errors.New("backend not built into this binary")
	ErrUnsupported     = errors.New("unsupported")
	ErrLibraryNotFound = errors.New("library not found")
	ErrNotCUDAAware    = errors.New("MPI is not CUDA-aware")
	ErrDuplicateGPU    = errors.New("two ranks share one GPU")
	ErrBadHandle       = errors.New("bad IPC handle")
	ErrMismatch        = errors.New("the ranks' calls do not match")
	ErrAborted         = errors.New("a rank aborted the job")
)
