//go:build !(mpi || mpich) || (mpi && mpich) || !cgo

package mpi

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// This file stands in for the cgo files when MPI is not built in: the
// package still compiles, so backends that use it register themselves and
// explain how to get MPI instead of failing to build.

// errNotBuilt is what every entry point of a binary built without MPI returns.
var errNotBuilt = fmt.Errorf("mpi: MPI support is not built into this binary: %s: %w", NotBuiltReason(), errs.ErrNotBuilt)

const family = ""

// Built reports whether this binary was built with MPI (tag mpi or mpich).
func Built() bool { return false }

// Family is "openmpi" or "mpich" when MPI is built in, "" here.
func Family() string { return family }

// JoinError is nil: without MPI there is no job to join.
func JoinError() error { return nil }

// Init fails: MPI is not built in.
func Init() error { return errNotBuilt }

// Finalize fails: MPI is not built in.
func Finalize() error { return errNotBuilt }

// Acquire fails: MPI is not built in.
func Acquire() error { return errNotBuilt }

// Release fails: MPI is not built in.
func Release() error { return errNotBuilt }

// ReleaseKeepingUp fails: MPI is not built in.
func ReleaseKeepingUp() error { return errNotBuilt }

// Initialized is false: MPI is not built in.
func Initialized() bool { return false }

// ThreadLevel is ThreadSingle: MPI is not built in.
func ThreadLevel() ThreadSupport { return ThreadSingle }

// Version is "": MPI is not built in.
func Version() string { return "" }

// LibraryFile is "": MPI is not built in.
func LibraryFile() string { return "" }

// CUDAAwareQuery knows nothing: MPI is not built in.
func CUDAAwareQuery() (known bool, aware bool) { return false, false }

// Comm is a communicator; without MPI every call fails.
type Comm struct{}

var world = &Comm{}

// World is a communicator whose calls fail: MPI is not built in.
func World() *Comm { return world }

// Rank is -1: MPI is not built in.
func (c *Comm) Rank() int { return -1 }

// Size is 0: MPI is not built in.
func (c *Comm) Size() int { return 0 }

func (c *Comm) ready(string) error { return errNotBuilt }

// Dup fails: MPI is not built in.
func (c *Comm) Dup() (*Comm, error) { return nil, errNotBuilt }

// Split fails: MPI is not built in.
func (c *Comm) Split(color, key int) (*Comm, error) { return nil, errNotBuilt }

// SplitShared fails: MPI is not built in.
func (c *Comm) SplitShared() (*Comm, error) { return nil, errNotBuilt }

// Iprobe fails: MPI is not built in.
func (c *Comm) Iprobe(src, tag int, dt Datatype) (bool, Status, error) {
	return false, Status{}, errNotBuilt
}

// Free fails: MPI is not built in.
func (c *Comm) Free() error { return errNotBuilt }

// Abort exits the process with code: there is no MPI job to end.
func (c *Comm) Abort(code int) { os.Exit(code) }

// Barrier fails: MPI is not built in.
func (c *Comm) Barrier() error { return errNotBuilt }

// Bcast fails: MPI is not built in.
func (c *Comm) Bcast(buf uintptr, count int, dt Datatype, root int) error { return errNotBuilt }

// Reduce fails: MPI is not built in.
func (c *Comm) Reduce(send, recv uintptr, count int, dt Datatype, op Op, root int) error {
	return errNotBuilt
}

// Allreduce fails: MPI is not built in.
func (c *Comm) Allreduce(send, recv uintptr, count int, dt Datatype, op Op) error { return errNotBuilt }

// ReduceLocal fails: MPI is not built in.
func ReduceLocal(in, inout uintptr, count int, dt Datatype, op Op) error { return errNotBuilt }

// Allgather fails: MPI is not built in.
func (c *Comm) Allgather(send, recv uintptr, count int, dt Datatype) error { return errNotBuilt }

// ReduceScatterBlock fails: MPI is not built in.
func (c *Comm) ReduceScatterBlock(send, recv uintptr, count int, dt Datatype, op Op) error {
	return errNotBuilt
}

// Alltoall fails: MPI is not built in.
func (c *Comm) Alltoall(send, recv uintptr, count int, dt Datatype) error { return errNotBuilt }

// Gather fails: MPI is not built in.
func (c *Comm) Gather(send, recv uintptr, count int, dt Datatype, root int) error { return errNotBuilt }

// Scatter fails: MPI is not built in.
func (c *Comm) Scatter(send, recv uintptr, count int, dt Datatype, root int) error {
	return errNotBuilt
}

// Send fails: MPI is not built in.
func (c *Comm) Send(buf uintptr, count int, dt Datatype, dest, tag int) error { return errNotBuilt }

// Recv fails: MPI is not built in.
func (c *Comm) Recv(buf uintptr, count int, dt Datatype, src, tag int) (Status, error) {
	return Status{}, errNotBuilt
}

// Sendrecv fails: MPI is not built in.
func (c *Comm) Sendrecv(send uintptr, sendCount, dest, sendTag int, recv uintptr, recvCount, src, recvTag int, dt Datatype) (Status, error) {
	return Status{}, errNotBuilt
}

// Isend fails: MPI is not built in.
func (c *Comm) Isend(buf uintptr, count int, dt Datatype, dest, tag int) (*Request, error) {
	return nil, errNotBuilt
}

// Irecv fails: MPI is not built in.
func (c *Comm) Irecv(buf uintptr, count int, dt Datatype, src, tag int) (*Request, error) {
	return nil, errNotBuilt
}

// Ibarrier fails: MPI is not built in.
func (c *Comm) Ibarrier() (*Request, error) { return nil, errNotBuilt }

// Ibcast fails: MPI is not built in.
func (c *Comm) Ibcast(buf uintptr, count int, dt Datatype, root int) (*Request, error) {
	return nil, errNotBuilt
}

// Iallreduce fails: MPI is not built in.
func (c *Comm) Iallreduce(send, recv uintptr, count int, dt Datatype, op Op) (*Request, error) {
	return nil, errNotBuilt
}

func (c *Comm) allreduceGo(unsafe.Pointer, int, Datatype, Op) error             { return errNotBuilt }
func (c *Comm) bcastGo(unsafe.Pointer, int, Datatype, int) error                { return errNotBuilt }
func (c *Comm) allgatherGo(unsafe.Pointer, unsafe.Pointer, int, Datatype) error { return errNotBuilt }
func (c *Comm) allgathervGo(unsafe.Pointer, int, unsafe.Pointer, []int32, []int32) error {
	return errNotBuilt
}

// Request is a pending operation; without MPI there are none.
type Request struct{}

// Done is true: there is nothing to wait for.
func (r *Request) Done() bool { return true }

// Status is the zero Status.
func (r *Request) Status() Status { return Status{} }

// Wait fails: MPI is not built in.
func (r *Request) Wait() error { return errNotBuilt }

// Test fails: MPI is not built in.
func (r *Request) Test() (bool, error) { return false, errNotBuilt }

// Cancel fails: MPI is not built in.
func (r *Request) Cancel() error { return errNotBuilt }

// Waitall fails: MPI is not built in.
func Waitall(reqs []*Request) error { return errNotBuilt }

// Testall fails: MPI is not built in.
func Testall(reqs []*Request) (bool, error) { return false, errNotBuilt }
