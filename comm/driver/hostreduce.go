package driver

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
	var ok bool
	switch dt {
	case Int8:
		ok = fold(devmem.FromBytes[int8](acc), devmem.FromBytes[int8](src), op)
	case Uint8:
		ok = fold(devmem.FromBytes[uint8](acc), devmem.FromBytes[uint8](src), op)
	case Int32:
		ok = fold(devmem.FromBytes[int32](acc), devmem.FromBytes[int32](src), op)
	case Uint32:
		ok = fold(devmem.FromBytes[uint32](acc), devmem.FromBytes[uint32](src), op)
	case Int64:
		ok = fold(devmem.FromBytes[int64](acc), devmem.FromBytes[int64](src), op)
	case Uint64:
		ok = fold(devmem.FromBytes[uint64](acc), devmem.FromBytes[uint64](src), op)
	case Float32:
		ok = fold(devmem.FromBytes[float32](acc), devmem.FromBytes[float32](src), op)
	case Float64:
		ok = fold(devmem.FromBytes[float64](acc), devmem.FromBytes[float64](src), op)
	case Float16:
		ok = foldNarrow(devmem.FromBytes[Half](acc), devmem.FromBytes[Half](src), op, Half.Float32, HalfFrom)
	case BFloat16:
		ok = foldNarrow(devmem.FromBytes[BF16](acc), devmem.FromBytes[BF16](src), op, BF16.Float32, BF16From)
	}
	if !ok {
		// Unreachable while every DType and Op above has its case: the
		// mapping test (hostreduce_mapping_test.go) walks them all.
		return fmt.Errorf("comm: host reduction has no %v for %v: %w", op, dt, ErrUnsupported)
	}
	return nil
}

// number is the element type of the host folds: Go's integer and float types.
type number interface {
	constraints.Integer | constraints.Float
}

// fold folds s into a; false, with a untouched, for an Op it lacks. Min and
// Max propagate NaN for floats, as NCCL and MPI do on GPUs.
func fold[T number](a, s []T, op Op) bool {
	switch op {
	case Sum, Avg: // Avg folds as Sum; DivideInto finishes it
		for i := range a {
			a[i] += s[i]
		}
	case Prod:
		for i := range a {
			a[i] *= s[i]
		}
	case Min:
		for i := range a {
			a[i] = minNaN(a[i], s[i])
		}
	case Max:
		for i := range a {
			a[i] = maxNaN(a[i], s[i])
		}
	default:
		return false
	}
	return true
}

// foldNarrow folds 16-bit floats in float32, rounding each result back.
func foldNarrow[T Half | BF16](a, s []T, op Op, widen func(T) float32, narrow func(float32) T) bool {
	var f func(x, y float32) float32
	switch op {
	case Sum, Avg: // Avg folds as Sum; DivideInto finishes it
		f = add32
	case Prod:
		f = mul32
	case Min:
		f = minNaN[float32]
	case Max:
		f = maxNaN[float32]
	default:
		return false
	}
	for i := range a {
		a[i] = narrow(f(widen(a[i]), widen(s[i])))
	}
	return true
}

func add32(x, y float32) float32 { return x + y }
func mul32(x, y float32) float32 { return x * y }

// minNaN and maxNaN propagate NaN, as NCCL and MPI do on GPUs (x != x holds
// only for a float NaN; for integers they are min and max).
func minNaN[T number](a, b T) T {
	if a != a || b != b {
		return a + b
	}
	return min(a, b)
}

func maxNaN[T number](a, b T) T {
	if a != a || b != b {
		return a + b
	}
	return max(a, b)
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
	default:
		// Unreachable while every DType above has its case.
		return fmt.Errorf("comm: host division has no case for %v: %w", dt, ErrUnsupported)
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
