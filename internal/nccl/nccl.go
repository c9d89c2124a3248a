package nccl

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// EnvLib names the environment variable that overrides the library path.
const EnvLib = "GPUCOMM_NCCL_LIB"

// MinVersion is the oldest NCCL gpucomm accepts, in NCCL's version code.
const MinVersion = 21200

// Comm is an ncclComm_t.
type Comm uintptr

// UniqueID is an ncclUniqueId: made by one rank, sent to all (by MPI_Bcast).
type UniqueID [128]byte

// SplitNoColor as CommSplit's color leaves the caller out of every new
// communicator.
const SplitNoColor = -1

// Config holds the communicator settings gpucomm sets; the zero value is
// NCCL's default.
type Config struct {
	// NonBlocking makes calls on the communicator return at once; poll
	// CommGetAsyncError until it is no longer InProgress.
	NonBlocking bool
}

// DataType is an ncclDataType_t.
type DataType int32

const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	Bfloat16 DataType = 9
)

// Size returns the bytes of one element, or 0 for an unknown type.
func (d DataType) Size() int {
	switch d {
	case Int8, Uint8:
		return 1
	case Float16, Bfloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// RedOp is an ncclRedOp_t.
type RedOp int32

const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4 // NCCL 2.10 and later
)

// Result is an ncclResult_t.
type Result int32

const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	Timeout            Result = 8 // newer releases only
)

var resultNames = [...]string{
	"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout",
}

// String returns NCCL's name for r, such as "ncclInvalidArgument".
func (r Result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("ncclResult(%d)", int32(r))
}

// Error is a failed NCCL call.
type Error struct {
	Call    string // "ncclAllReduce"
	Code    Result
	Message string // ncclGetErrorString's text
	Detail  string // ncclGetLastError's text, when the library has it
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %v (%d)", e.Call, e.Code, int32(e.Code))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap maps NCCL's argument and timeout results to the shared sentinels.
func (e *Error) Unwrap() error {
	switch e.Code {
	case InvalidArgument:
		return errs.ErrInvalidArgument
	case Timeout:
		return errs.ErrTimeout
	}
	return nil
}

// IsCode reports whether err is, or wraps, an *Error with the given result.
func IsCode(err error, code Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// decodeVersion splits a version code: 2.9 and later use
// major*10000+minor*100+patch, older releases major*1000+minor*100+patch.
func decodeVersion(code int) (major, minor, patch int) {
	if code < 10000 {
		return code / 1000, code % 1000 / 100, code % 100
	}
	return code / 10000, code % 10000 / 100, code % 100
}
