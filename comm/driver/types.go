package driver

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// DType is an element type.
type DType int

// Element types every backend moves and reduces.
const (
	Int8 DType = iota + 1
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	Float16
	BFloat16
	Float32
	Float64
)

// DTypes lists every element type, in order, in a slice of the caller's own.
func DTypes() []DType { return slices.Clone(dtypes[:]) }

var dtypes = [...]DType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, BFloat16, Float32, Float64}

var dtypeNames = [...]string{"", "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64"}
var dtypeSizes = [...]int{0, 1, 1, 4, 4, 8, 8, 2, 2, 4, 8}

// Valid reports whether d is one of the element types.
func (d DType) Valid() bool { return d >= Int8 && d <= Float64 }

// Size is the element size in bytes (0 for an invalid DType).
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d >= Float16 && d <= Float64 }

func (d DType) String() string {
	if !d.Valid() {
		return "DType(" + strconv.Itoa(int(d)) + ")"
	}
	return dtypeNames[d]
}

// ParseDType reads a DType's name.
func ParseDType(s string) (DType, error) {
	for _, d := range dtypes {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("comm: unknown dtype %q: %w", s, ErrInvalidArgument)
}

// Op is a reduction.
type Op int

// Reductions. Avg is the sum divided by the number of ranks (integer
// division for integer types, as NCCL's ncclAvg).
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
	Avg
)

// Ops lists every reduction, in order, in a slice of the caller's own.
func Ops() []Op { return slices.Clone(ops[:]) }

var ops = [...]Op{Sum, Prod, Min, Max, Avg}

var opNames = [...]string{"", "sum", "prod", "min", "max", "avg"}

// Valid reports whether o is one of the reductions.
func (o Op) Valid() bool { return o >= Sum && o <= Avg }

func (o Op) String() string {
	if !o.Valid() {
		return "Op(" + strconv.Itoa(int(o)) + ")"
	}
	return opNames[o]
}

// ParseOp reads an Op's name.
func ParseOp(s string) (Op, error) {
	for _, o := range ops {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("comm: unknown op %q: %w", s, ErrInvalidArgument)
}

// Half is IEEE 754 binary16, stored as its bits.
type Half uint16

// BF16 is bfloat16 (the top half of a float32), stored as its bits.
type BF16 uint16

// Float32 widens h exactly.
func (h Half) Float32() float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf, NaN
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: normalise.
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// HalfFrom rounds f to the nearest binary16, ties to even.
func HalfFrom(f float32) Half {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return Half(sign | 0x7e00) // quiet NaN
		}
		return Half(sign | 0x7c00)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return Half(sign | 0x7c00)
	}
	if e <= 0 {
		if e < -10 {
			return Half(sign)
		}
		man |= 0x800000
		shift := uint32(14 - e)
		h := man >> shift
		rem := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return Half(sign | uint16(h))
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, up to Inf: correct
	}
	return Half(sign | uint16(h))
}

// Float32 widens b exactly.
func (b BF16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// BF16From rounds f to the nearest bfloat16, ties to even.
func BF16From(f float32) BF16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return BF16(u>>16 | 0x40) // quiet NaN
	}
	u += 0x7fff + (u>>16)&1
	return BF16(u >> 16)
}
