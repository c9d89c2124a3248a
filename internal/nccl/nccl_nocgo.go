//go:build !cgo

package nccl

import (
	"fmt"

	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// errNoCgo is what every call returns in a binary built without cgo. The
// functions below mirror nccl_cgo.go one for one (a test checks that).
var errNoCgo = fmt.Errorf("nccl: NCCL is loaded through cgo, and this binary was built with CGO_ENABLED=0: %w", errs.ErrLibraryNotFound)

func Load() error                                                  { return errNoCgo }
func Version() (major, minor, patch int, err error)                { return 0, 0, 0, errNoCgo }
func GetUniqueID() (UniqueID, error)                               { return UniqueID{}, errNoCgo }
func CommInitRank(nranks int, id UniqueID, rank int) (Comm, error) { return 0, errNoCgo }
func CommInitRankConfig(nranks int, id UniqueID, rank int, cfg Config) (Comm, error) {
	return 0, errNoCgo
}
func CommSplit(c Comm, color, key int) (Comm, error) { return 0, errNoCgo }
func CommFinalize(c Comm) error                      { return errNoCgo }
func CommDestroy(c Comm) error                       { return errNoCgo }
func CommAbort(c Comm) error                         { return errNoCgo }
func CommGetAsyncError(c Comm) (Result, error)       { return 0, errNoCgo }
func CommCount(c Comm) (int, error)                  { return 0, errNoCgo }
func CommCuDevice(c Comm) (int, error)               { return 0, errNoCgo }
func CommUserRank(c Comm) (int, error)               { return 0, errNoCgo }
func AllReduce(ctx cuda.Context, send, recv cuda.DevicePtr, n int, dt DataType, op RedOp, c Comm, s cuda.Stream) error {
	return errNoCgo
}
func Reduce(ctx cuda.Context, send, recv cuda.DevicePtr, n int, dt DataType, op RedOp, root int, c Comm, s cuda.Stream) error {
	return errNoCgo
}
func Broadcast(ctx cuda.Context, send, recv cuda.DevicePtr, n int, dt DataType, root int, c Comm, s cuda.Stream) error {
	return errNoCgo
}
func AllGather(ctx cuda.Context, send, recv cuda.DevicePtr, sendCount int, dt DataType, c Comm, s cuda.Stream) error {
	return errNoCgo
}
func ReduceScatter(ctx cuda.Context, send, recv cuda.DevicePtr, recvCount int, dt DataType, op RedOp, c Comm, s cuda.Stream) error {
	return errNoCgo
}
func Send(send cuda.DevicePtr, n int, dt DataType, peer int, c Comm, s cuda.Stream) error {
	return errNoCgo
}
func Recv(recv cuda.DevicePtr, n int, dt DataType, peer int, c Comm, s cuda.Stream) error {
	return errNoCgo
}
func GroupStart() error { return errNoCgo }
func GroupEnd() error   { return errNoCgo }
