package mpi

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// The helpers in this file move small Go values (counts, ids, host names)
// for bookkeeping. They hand Go memory to MPI only in blocking calls, which
// cgo allows; bulk data belongs in the uintptr-based calls.

// AllreduceValues reduces v element-wise across c, in place: afterwards every
// rank holds the result. Every rank must pass the same len(v).
func AllreduceValues[T Value](c *Comm, v []T, op Op) error {
	if len(v) == 0 {
		return c.ready("AllreduceValues")
	}
	return c.allreduceGo(unsafe.Pointer(unsafe.SliceData(v)), len(v), DatatypeOf[T](), op)
}

// AllreduceInt64s is AllreduceValues for the common case of int64 counters.
func AllreduceInt64s(c *Comm, v []int64, op Op) error { return AllreduceValues(c, v, op) }

// BcastValues copies root's v into v on every other rank. Every rank must
// pass the same len(v).
func BcastValues[T Value](c *Comm, v []T, root int) error {
	if len(v) == 0 {
		return c.ready("BcastValues")
	}
	return c.bcastGo(unsafe.Pointer(unsafe.SliceData(v)), len(v), DatatypeOf[T](), root)
}

// AllgatherValues returns every rank's v, rank by rank, on every rank. Every
// rank must pass the same len(v).
func AllgatherValues[T Value](c *Comm, v []T) ([]T, error) {
	if err := c.ready("AllgatherValues"); err != nil {
		return nil, err
	}
	out := make([]T, len(v)*c.Size())
	if len(v) == 0 {
		return out, nil
	}
	err := c.allgatherGo(unsafe.Pointer(unsafe.SliceData(v)), unsafe.Pointer(unsafe.SliceData(out)), len(v), DatatypeOf[T]())
	if err != nil {
		return nil, err
	}
	return out, nil
}

// BcastBytes returns root's b on every rank; the other ranks' b is ignored,
// so they need not know its length.
func BcastBytes(c *Comm, b []byte, root int) ([]byte, error) {
	n := []int64{int64(len(b))}
	if err := BcastValues(c, n, root); err != nil {
		return nil, err
	}
	if n[0] > math.MaxInt32 {
		return nil, fmt.Errorf("mpi: BcastBytes: %d bytes exceed MPI's int count: %w", n[0], errs.ErrInvalidArgument)
	}
	out := b
	if c.Rank() != root {
		out = make([]byte, n[0])
	}
	if n[0] == 0 {
		return out, nil
	}
	if err := c.bcastGo(unsafe.Pointer(unsafe.SliceData(out)), len(out), Byte, root); err != nil {
		return nil, err
	}
	return out, nil
}

// AllgatherBytes returns every rank's b, indexed by rank, on every rank. The
// lengths may differ between ranks.
func AllgatherBytes(c *Comm, b []byte) ([][]byte, error) {
	lens, err := AllgatherValues(c, []int64{int64(len(b))})
	if err != nil {
		return nil, err
	}
	counts := make([]int32, len(lens))
	displs := make([]int32, len(lens))
	var total int64
	for i, n := range lens {
		if total+n > math.MaxInt32 {
			return nil, fmt.Errorf("mpi: AllgatherBytes: more than %d bytes in all: %w", math.MaxInt32, errs.ErrInvalidArgument)
		}
		counts[i], displs[i] = int32(n), int32(total)
		total += n
	}
	all := make([]byte, total)
	if total > 0 {
		err := c.allgathervGo(unsafe.Pointer(unsafe.SliceData(b)), len(b), unsafe.Pointer(unsafe.SliceData(all)), counts, displs)
		if err != nil {
			return nil, err
		}
	}
	out := make([][]byte, len(lens))
	for i := range out {
		lo, hi := displs[i], displs[i]+counts[i]
		out[i] = all[lo:hi:hi]
	}
	return out, nil
}
