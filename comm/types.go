package comm

import (
	"github.com/gpucomm/gpucomm/comm/driver"
)

// DType is an element type.
type DType = driver.DType

// Element types every backend moves and reduces.
const (
	Int8     = driver.Int8
	Uint8    = driver.Uint8
	Int32    = driver.Int32
	Uint32   = driver.Uint32
	Int64    = driver.Int64
	Uint64   = driver.Uint64
	Float16  = driver.Float16
	BFloat16 = driver.BFloat16
	Float32  = driver.Float32
	Float64  = driver.Float64
)

// DTypes lists every element type, in order.
func DTypes() []DType { return driver.DTypes() }

// ParseDType reads a DType's name.
func ParseDType(s string) (DType, error) { return driver.ParseDType(s) }

// Op is a reduction.
type Op = driver.Op

// Reductions. Avg is the sum divided by the number of ranks (integer
// division for integer types, as NCCL's ncclAvg).
const (
	Sum  = driver.Sum
	Prod = driver.Prod
	Min  = driver.Min
	Max  = driver.Max
	Avg  = driver.Avg
)

// Ops lists every reduction.
func Ops() []Op { return driver.Ops() }

// ParseOp reads an Op's name.
func ParseOp(s string) (Op, error) { return driver.ParseOp(s) }

// Half is IEEE 754 binary16, stored as its bits.
type Half = driver.Half

// BF16 is bfloat16 (the top half of a float32), stored as its bits.
type BF16 = driver.BF16

// HalfFrom rounds f to the nearest binary16, ties to even.
func HalfFrom(f float32) Half { return driver.HalfFrom(f) }

// BF16From rounds f to the nearest bfloat16, ties to even.
func BF16From(f float32) BF16 { return driver.BF16From(f) }

// Element is the set of Go types that map to a DType.
type Element interface {
	int8 | uint8 | int32 | uint32 | int64 | uint64 | Half | BF16 | float32 | float64
}

// DTypeOf maps T to its DType.
func DTypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case int8:
		return Int8
	case uint8:
		return Uint8
	case int32:
		return Int32
	case uint32:
		return Uint32
	case int64:
		return Int64
	case uint64:
		return Uint64
	case Half:
		return Float16
	case BF16:
		return BFloat16
	case float32:
		return Float32
	case float64:
		return Float64
	}
	return 0 // unreachable: Element has no other types
}
