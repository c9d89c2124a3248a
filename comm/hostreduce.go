package comm

import (
	"fmt"

	"github.com/gpucomm/gpucomm/devmem"
	"golang.org/x/exp/constraints"
)

// ReduceInto folds src into acc element by element (acc = acc op src), for
// backends and references that reduce on the host. Both hold count elements
// of dt. Avg folds as Sum; finish it with DivideInto.
func ReduceInto(dt DType, op Op, acc, src []byte) error {
	if !dt.Valid() || !op.Valid() {
		return fmt.Errorf("comm: reduce %v with %v: %w", dt, op, ErrInvalidArgument)
	}
	if len(acc) != len(src) || len(acc)%dt.Size() != 0 {
		return fmt.Errorf("comm: reduce of %d bytes into %d: %w", len(src), len(acc), ErrInvalidArgument)
	}
	switch dt {
	case Int8:
		foldInts(devmem.FromBytes[int8](acc), devmem.FromBytes[int8](src), op)
	case Uint8:
		foldInts(devmem.FromBytes[uint8](acc), devmem.FromBytes[uint8](src), op)
	case Int32:
		foldInts(devmem.FromBytes[int32](acc), devmem.FromBytes[int32](src), op)
	case Uint32:
		foldInts(devmem.FromBytes[uint32](acc), devmem.FromBytes[uint32](src), op)
	case Int64:
		foldInts(devmem.FromBytes[int64](acc), devmem.FromBytes[int64](src), op)
	case Uint64:
		foldInts(devmem.FromBytes[uint64](acc), devmem.FromBytes[uint64](src), op)
	case Float32:
		foldFloats(devmem.FromBytes[float32](acc), devmem.FromBytes[float32](src), op)
	case Float64:
		foldFloats(devmem.FromBytes[float64](acc), devmem.FromBytes[float64](src), op)
	case Float16:
		a, s := devmem.FromBytes[Half](acc), devmem.FromBytes[Half](src)
		for i := range a {
			a[i] = HalfFrom(fold32(a[i].Float32(), s[i].Float32(), op))
		}
	case BFloat16:
		a, s := devmem.FromBytes[BF16](acc), devmem.FromBytes[BF16](src)
		for i := range a {
			a[i] = BF16From(fold32(a[i].Float32(), s[i].Float32(), op))
		}
	}
	return nil
}

func foldInts[T constraints.Integer](a, s []T, op Op) {
	switch op {
	case Sum, Avg:
		for i := range a {
			a[i] += s[i]
		}
	case Prod:
		for i := range a {
			a[i] *= s[i]
		}
	case Min:
		for i := range a {
			a[i] = min(a[i], s[i])
		}
	case Max:
		for i := range a {
			a[i] = max(a[i], s[i])
		}
	}
}

func foldFloats[T constraints.Float](a, s []T, op Op) {
	for i := range a {
		a[i] = foldF(a[i], s[i], op)
	}
}

func fold32(a, b float32, op Op) float32 { return foldF(a, b, op) }

// foldF applies op; Min and Max propagate NaN, as NCCL and MPI do on GPUs.
func foldF[T constraints.Float](a, b T, op Op) T {
	switch op {
	case Prod:
		return a * b
	case Min:
		if a != a || b != b {
			return a + b
		}
		return min(a, b)
	case Max:
		if a != a || b != b {
			return a + b
		}
		return max(a, b)
	}
	return a + b
}

// DivideInto divides each of acc's elements by n, finishing an Avg:
// truncating integer division for integer types.
func DivideInto(dt DType, acc []byte, n int) error {
	if !dt.Valid() || n <= 0 || len(acc)%dt.Size() != 0 {
		return fmt.Errorf("comm: divide %v by %d: %w", dt, n, ErrInvalidArgument)
	}
	switch dt {
	case Int8:
		divInts(devmem.FromBytes[int8](acc), n)
	case Uint8:
		divInts(devmem.FromBytes[uint8](acc), n)
	case Int32:
		divInts(devmem.FromBytes[int32](acc), n)
	case Uint32:
		divInts(devmem.FromBytes[uint32](acc), n)
	case Int64:
		divInts(devmem.FromBytes[int64](acc), n)
	case Uint64:
		divInts(devmem.FromBytes[uint64](acc), n)
	case Float32:
		a := devmem.FromBytes[float32](acc)
		for i := range a {
			a[i] /= float32(n)
		}
	case Float64:
		a := devmem.FromBytes[float64](acc)
		for i := range a {
			a[i] /= float64(n)
		}
	case Float16:
		a := devmem.FromBytes[Half](acc)
		for i := range a {
			a[i] = HalfFrom(a[i].Float32() / float32(n))
		}
	case BFloat16:
		a := devmem.FromBytes[BF16](acc)
		for i := range a {
			a[i] = BF16From(a[i].Float32() / float32(n))
		}
	}
	return nil
}

// divInts divides in 64 bits, so that n need not fit in T.
func divInts[T constraints.Integer](a []T, n int) {
	var zero T
	signed := zero-1 < 0
	for i := range a {
		if signed {
			a[i] = T(int64(a[i]) / int64(n))
		} else {
			a[i] = T(uint64(a[i]) / uint64(n))
		}
	}
}
