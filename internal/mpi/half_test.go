package mpi

import (
	"math"
	"testing"
)

// Go reference conversions for float16 and bfloat16, written independently
// of the C bit tricks in gpucomm_mpi.c so that the tests compare two
// implementations: here rounding is done with float64 arithmetic.

type halfFormat struct {
	name     string
	manBits  int    // stored significand bits
	expBits  int    // exponent bits
	quietNaN uint16 // the canonical NaN the C ops return
}

var (
	f16  = halfFormat{"float16", 10, 5, 0x7e00}
	bf16 = halfFormat{"bfloat16", 7, 8, 0x7fc0}
)

func (f halfFormat) bias() int    { return 1<<(f.expBits-1) - 1 }
func (f halfFormat) expMask() int { return 1<<f.expBits - 1 }

func (f halfFormat) toFloat64(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>f.manBits) & f.expMask()
	m := float64(int(h) & (1<<f.manBits - 1))
	switch e {
	case 0:
		return sign * math.Ldexp(m, 1-f.bias()-f.manBits)
	case f.expMask():
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(m+float64(int(1)<<f.manBits), e-f.bias()-f.manBits)
}

// fromFloat64 rounds v to the nearest value of the format, ties to even;
// NaN becomes the canonical quiet NaN.
func (f halfFormat) fromFloat64(v float64) uint16 {
	if math.IsNaN(v) {
		return f.quietNaN
	}
	var sign uint16
	if math.Signbit(v) {
		sign = 0x8000
		v = -v
	}
	inf := sign | uint16(f.expMask()<<f.manBits)
	if math.IsInf(v, 0) {
		return inf
	}
	emin := 1 - f.bias()
	// quantum: the spacing of representable values around v
	e := emin
	if v >= math.Ldexp(1, emin) {
		_, exp := math.Frexp(v)
		e = exp - 1
	}
	q := math.Ldexp(1, e-f.manBits)
	r := math.RoundToEven(v/q) * q // v/q is exact: q is a power of two
	maxFinite := math.Ldexp(2-math.Ldexp(1, -f.manBits), f.bias())
	if r > maxFinite {
		return inf
	}
	if r < math.Ldexp(1, emin) {
		return sign | uint16(r/math.Ldexp(1, emin-f.manBits))
	}
	_, exp := math.Frexp(r)
	e = exp - 1
	mant := r/math.Ldexp(1, e-f.manBits) - float64(int(1)<<f.manBits)
	return sign | uint16(e+f.bias())<<f.manBits | uint16(mant)
}

// combine is the reference for the C user ops: exact arithmetic in float64
// (a sum or product of two such values is exact there), one rounding, NaN
// wins, -0 below +0.
func (f halfFormat) combine(op Op, a, b uint16) uint16 {
	x, y := f.toFloat64(a), f.toFloat64(b)
	var r float64
	switch op {
	case Sum:
		r = x + y
	case Prod:
		r = x * y
	case Min, Max:
		if math.IsNaN(x) || math.IsNaN(y) {
			return f.quietNaN
		}
		less := x < y || (x == y && math.Signbit(x) && !math.Signbit(y))
		if (op == Min) == less {
			return a
		}
		return b
	}
	return f.fromFloat64(r)
}

func TestHalfReferenceKnownValues(t *testing.T) {
	cases := []struct {
		f    halfFormat
		v    float64
		want uint16
	}{
		{f16, 1, 0x3c00},
		{f16, -2, 0xc000},
		{f16, 65504, 0x7bff},
		{f16, 65519.99, 0x7bff},
		{f16, 65520, 0x7c00}, // the tie above the largest finite rounds to infinity
		{f16, math.Ldexp(1, -24), 0x0001},
		{f16, math.Ldexp(1, -25), 0x0000},    // tie between 0 and the smallest subnormal: even
		{f16, math.Ldexp(1.5, -25), 0x0001},  // above the tie
		{f16, math.Ldexp(3, -25), 0x0002},    // tie between 1 and 2 subnormal units: even
		{f16, math.Ldexp(1023, -24), 0x03ff}, // largest subnormal
		{f16, math.Ldexp(1, -14), 0x0400},    // smallest normal
		{f16, 1.0 / 3, 0x3555},
		{f16, 2049, 0x6800}, // tie: 2048 is even
		{f16, 2051, 0x6802}, // tie: 2052 is even
		{f16, math.Copysign(0, -1), 0x8000},
		{bf16, 1, 0x3f80},
		{bf16, 1.0 / 3, 0x3eab},
		{bf16, 3.3895313892515355e38, 0x7f7f},
		{bf16, 3.4e38, 0x7f80},
		{bf16, math.Ldexp(1, -133), 0x0001},
		{bf16, 257, 0x4380}, // tie: 256 is even
		{bf16, 259, 0x4382},
	}
	for _, c := range cases {
		if got := c.f.fromFloat64(c.v); got != c.want {
			t.Errorf("%s(%g) = %#04x, want %#04x", c.f.name, c.v, got, c.want)
		}
	}
	if got := f16.fromFloat64(math.NaN()); got != 0x7e00 {
		t.Errorf("float16(NaN) = %#04x, want 0x7e00", got)
	}
	if got := bf16.fromFloat64(math.NaN()); got != 0x7fc0 {
		t.Errorf("bfloat16(NaN) = %#04x, want 0x7fc0", got)
	}
}

// Every pattern round-trips, every midpoint between neighbours goes to the
// even one, and a hair either side of it goes to the nearer one.
func TestHalfReferenceExhaustive(t *testing.T) {
	for _, f := range []halfFormat{f16, bf16} {
		maxBits := uint16(f.expMask()<<f.manBits) - 1 // largest finite
		for h := uint16(0); h <= maxBits; h++ {
			for _, s := range []uint16{0, 0x8000} {
				if got := f.fromFloat64(f.toFloat64(h | s)); got != h|s {
					t.Fatalf("%s round trip of %#04x gave %#04x", f.name, h|s, got)
				}
			}
			lo, hi := f.toFloat64(h), f.toFloat64(h+1)
			if h == maxBits { // h+1 is infinity; its midpoint is one ulp up, as if finite
				hi = 2*lo - f.toFloat64(h-1)
			}
			mid := (lo + hi) / 2 // exact in float64
			even := h
			if h&1 != 0 {
				even = h + 1
			}
			if got := f.fromFloat64(mid); got != even {
				t.Fatalf("%s midpoint %g of %#04x and %#04x gave %#04x, want %#04x", f.name, mid, h, h+1, got, even)
			}
			if got := f.fromFloat64(math.Nextafter(mid, 0)); got != h {
				t.Fatalf("%s just below midpoint %g gave %#04x, want %#04x", f.name, mid, got, h)
			}
			if got := f.fromFloat64(math.Nextafter(mid, math.Inf(1))); got != h+1 {
				t.Fatalf("%s just above midpoint %g gave %#04x, want %#04x", f.name, mid, got, h+1)
			}
		}
	}
}

// bfloat16 from a float32 is the well-known bit trick; the reference must
// agree with it wherever the input is a float32.
func TestBFloat16ReferenceMatchesFloat32BitTrick(t *testing.T) {
	for i := uint64(0); i < 1<<32; i += 4099 {
		x := uint32(i)
		v := math.Float32frombits(x)
		if math.IsNaN(float64(v)) {
			continue
		}
		want := uint16((x + 0x7fff + (x>>16)&1) >> 16)
		if got := bf16.fromFloat64(float64(v)); got != want {
			t.Fatalf("bfloat16(%g = %#08x) = %#04x, want %#04x", v, x, got, want)
		}
	}
}

// The reference ops: NaN wins and comes out canonical, -0 is below +0,
// sums and products round once.
func TestHalfReferenceOps(t *testing.T) {
	negZero, one, two, three := uint16(0x8000), uint16(0x3c00), uint16(0x4000), uint16(0x4200)
	cases := []struct {
		f    halfFormat
		op   Op
		a, b uint16
		want uint16
	}{
		{f16, Min, 0, negZero, negZero},
		{f16, Min, negZero, 0, negZero},
		{f16, Max, negZero, 0, 0},
		{f16, Max, 0x7c01, one, 0x7e00}, // a signalling NaN comes out canonical
		{f16, Min, one, 0xfe00, 0x7e00},
		{f16, Sum, one, two, three},
		{f16, Sum, 0x7c00, 0xfc00, 0x7e00},  // inf - inf
		{f16, Sum, 0x7bff, 0x7bff, 0x7c00},  // overflow
		{f16, Sum, 0x3c00, 0x1000, 0x3c00},  // 1 + 2^-11: a tie, to even
		{f16, Sum, 0x3c01, 0x1000, 0x3c02},  // (1+2^-10) + 2^-11: a tie, to even
		{f16, Prod, 0x0001, 0x3800, 0x0000}, // 2^-24 * 0.5: a tie, to zero
		{f16, Prod, three, 0xc000, 0xc600},
		{bf16, Sum, 0x3f80, 0x3b80, 0x3f80}, // 1 + 2^-8: a tie, to even
		{bf16, Max, 0x7f80, 0x7fc1, 0x7fc0},
		{bf16, Min, 0x0000, 0x8000, 0x8000},
		{bf16, Prod, 0x7f00, 0x4000, 0x7f80},
	}
	for _, c := range cases {
		if got := c.f.combine(c.op, c.a, c.b); got != c.want {
			t.Errorf("%s %v(%#04x, %#04x) = %#04x, want %#04x", c.f.name, c.op, c.a, c.b, got, c.want)
		}
	}
}
