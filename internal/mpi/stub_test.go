//go:build !(mpi || mpich) || !cgo

package mpi

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestStubEveryEntryPointReturnsErrNotBuilt(t *testing.T) {
	if Built() || Family() != "" || Initialized() || Version() != "" || ThreadLevel() != ThreadSingle {
		t.Errorf("stub claims MPI: Built %v Family %q Initialized %v Version %q ThreadLevel %v",
			Built(), Family(), Initialized(), Version(), ThreadLevel())
	}
	if known, aware := CUDAAwareQuery(); known || aware {
		t.Error("stub CUDAAwareQuery knows something")
	}
	c := World()
	if c == nil || c.Rank() != -1 || c.Size() != 0 {
		t.Fatalf("World() = %v rank %d size %d", c, c.Rank(), c.Size())
	}
	var r *Request
	calls := map[string]func() error{
		"Init":     Init,
		"Finalize": Finalize,
		"Acquire":  Acquire,
		"Release":  Release,
		"Dup":      func() error { _, err := c.Dup(); return err },
		"Split":    func() error { _, err := c.Split(0, 0); return err },
		"SplitShared": func() error {
			_, err := c.SplitShared()
			return err
		},
		"Free":               c.Free,
		"Barrier":            c.Barrier,
		"Bcast":              func() error { return c.Bcast(0, 0, Byte, 0) },
		"Reduce":             func() error { return c.Reduce(0, 0, 0, Int32, Sum, 0) },
		"Allreduce":          func() error { return c.Allreduce(0, 0, 0, Int32, Sum) },
		"ReduceLocal":        func() error { return ReduceLocal(0, 0, 0, Int32, Sum) },
		"Allgather":          func() error { return c.Allgather(0, 0, 0, Byte) },
		"ReduceScatterBlock": func() error { return c.ReduceScatterBlock(0, 0, 0, Int32, Sum) },
		"Alltoall":           func() error { return c.Alltoall(0, 0, 0, Byte) },
		"Gather":             func() error { return c.Gather(0, 0, 0, Byte, 0) },
		"Scatter":            func() error { return c.Scatter(0, 0, 0, Byte, 0) },
		"Send":               func() error { return c.Send(0, 0, Byte, 0, 0) },
		"Recv":               func() error { _, err := c.Recv(0, 0, Byte, 0, 0); return err },
		"Sendrecv": func() error {
			_, err := c.Sendrecv(0, 0, 0, 0, 0, 0, 0, 0, Byte)
			return err
		},
		"Isend":      func() error { _, err := c.Isend(0, 0, Byte, 0, 0); return err },
		"Irecv":      func() error { _, err := c.Irecv(0, 0, Byte, 0, 0); return err },
		"Ibarrier":   func() error { _, err := c.Ibarrier(); return err },
		"Ibcast":     func() error { _, err := c.Ibcast(0, 0, Byte, 0); return err },
		"Iallreduce": func() error { _, err := c.Iallreduce(0, 0, 0, Int32, Sum); return err },
		"Wait":       func() error { return r.Wait() },
		"Test":       func() error { _, err := r.Test(); return err },
		"Cancel":     func() error { return r.Cancel() },
		"Waitall":    func() error { return Waitall(nil) },
		"Testall":    func() error { _, err := Testall(nil); return err },
		"WaitTimeout": func() error {
			return WaitTimeout(nil, time.Second)
		},
		"AllreduceInt64s": func() error { return AllreduceInt64s(c, []int64{1}, Sum) },
		"AllreduceValues": func() error { return AllreduceValues(c, []float64{1}, Max) },
		"BcastValues":     func() error { return BcastValues(c, []int32{1}, 0) },
		"AllgatherValues": func() error { _, err := AllgatherValues(c, []uint8{1}); return err },
		"BcastBytes":      func() error { _, err := BcastBytes(c, []byte("x"), 0); return err },
		"AllgatherBytes":  func() error { _, err := AllgatherBytes(c, []byte("x")); return err },
	}
	// Built with an MPI tag but without cgo, the advice to add the tag
	// would be wrong: the binary says that cgo was off.
	how := "rebuild with -tags mpi (Open MPI) or -tags mpich (MPICH and its ABI), with cgo enabled"
	if taggedWithoutCgo {
		how = "built with an MPI tag (-tags mpi or mpich) but without cgo (CGO_ENABLED=0, or no C compiler on PATH, which turns cgo off), and MPI needs cgo: rebuild with CGO_ENABLED=1"
	}
	for name, f := range calls {
		err := f()
		if !errors.Is(err, errs.ErrNotBuilt) {
			t.Errorf("%s: got %v, want an error wrapping ErrNotBuilt", name, err)
			continue
		}
		if !strings.Contains(err.Error(), how) {
			t.Errorf("%s: %q does not say how to rebuild (%q)", name, err, how)
		}
	}
}
