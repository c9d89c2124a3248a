package conformance

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
)

func TestHalfValueDecodesEveryClass(t *testing.T) {
	for _, tc := range []struct {
		bits uint16
		want float64
	}{
		{0x3c00, 1}, {0xc000, -2}, {0x3555, 0x555p-10 / 4}, {0x7bff, 65504},
		{0x0400, 0x1p-14}, {0x0001, 0x1p-24}, {0x03ff, 0x3ffp-24}, {0x0000, 0},
		{0x7c00, math.Inf(1)}, {0xfc00, math.Inf(-1)},
	} {
		if got := halfValue(tc.bits); got != tc.want {
			t.Errorf("halfValue(%#04x) = %g, want %g", tc.bits, got, tc.want)
		}
	}
	if got := halfValue(0x8000); got != 0 || !math.Signbit(got) {
		t.Errorf("halfValue(0x8000) = %g, want -0", got)
	}
	if got := halfValue(0x7e01); !math.IsNaN(got) {
		t.Errorf("halfValue(0x7e01) = %g, want NaN", got)
	}
}

// The generated floats must be exactly the values the reference adds up.
func TestReductionInputIsExactInItsType(t *testing.T) {
	g := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []comm.DType{comm.Float16, comm.BFloat16, comm.Float32, comm.Float64} {
		for _, op := range []comm.Op{comm.Sum, comm.Prod} {
			b := reductionInput(dt, op, 500)(g)
			for i := range 500 {
				bits := load(b, dt.Size(), i)
				v := value(dt, bits)
				lo, hi := 0.5, 2.0
				if op == comm.Prod {
					lo, hi = 0.875, 1.125
				}
				if a := math.Abs(v); a < lo || a >= hi || encode(dt, v) != bits {
					t.Fatalf("%v %v element %d: bits %#x decode to %g, which encodes to %#x", dt, op, i, bits, v, encode(dt, v))
				}
			}
		}
	}
	if h := load(reductionInput(comm.Float16, comm.Sum, 1)(g), 2, 0); comm.Half(h).Float32() != float32(halfValue(uint16(h))) {
		t.Errorf("half %#x: comm decodes %g, reference %g", h, comm.Half(h).Float32(), halfValue(uint16(h)))
	}
}

// fold reduces terms with comm's host helpers, an implementation written
// apart from the reference.
func fold(t *testing.T, dt comm.DType, op comm.Op, terms [][]byte) []byte {
	acc := bytes.Clone(terms[0])
	for _, x := range terms[1:] {
		if err := driver.ReduceInto(dt, op, acc, x); err != nil {
			t.Fatal(err)
		}
	}
	if op == comm.Avg {
		if err := driver.DivideInto(dt, acc, len(terms)); err != nil {
			t.Fatal(err)
		}
	}
	return acc
}

func TestCheckReducedAgreesWithHostReduction(t *testing.T) {
	g := rand.New(rand.NewPCG(3, 4))
	for _, dt := range comm.DTypes() {
		for _, op := range comm.Ops() {
			for _, ranks := range []int{1, 3, 8} {
				terms := make([][]byte, ranks)
				for j := range terms {
					terms[j] = reductionInput(dt, op, 257)(g)
				}
				got := fold(t, dt, op, terms)
				if bad := checkReduced(dt, op, terms, got); bad != "" {
					t.Errorf("%d ranks: %s", ranks, bad)
				}
				// One element off must show: by one unit for exact results,
				// by far more than the tolerance otherwise (no result here
				// is near 64).
				i := g.IntN(257)
				v := load(got, dt.Size(), i)
				if dt.IsFloat() && op != comm.Min && op != comm.Max {
					v = encode(dt, 64)
				} else {
					v ^= 1
				}
				store(got, dt.Size(), i, v)
				if bad := checkReduced(dt, op, terms, got); !strings.Contains(bad, "1 of 257 elements wrong") {
					t.Errorf("%v %v %d ranks: element %d changed, report %q", dt, op, ranks, i, bad)
				}
			}
		}
	}
}

func TestCheckReducedKnownValues(t *testing.T) {
	i8 := func(v ...int8) []byte {
		b := make([]byte, len(v))
		for i, x := range v {
			b[i] = byte(x)
		}
		return b
	}
	for _, tc := range []struct {
		op    comm.Op
		terms [][]byte
		want  []byte
	}{
		{comm.Sum, [][]byte{i8(100, -128), i8(100, -1)}, i8(-56, 127)},
		{comm.Prod, [][]byte{i8(16, -3), i8(16, 5)}, i8(0, -15)},
		{comm.Min, [][]byte{i8(-1, 7), i8(1, -7)}, i8(-1, -7)},
		{comm.Max, [][]byte{i8(-1, 7), i8(1, -7)}, i8(1, 7)},
		{comm.Avg, [][]byte{i8(-7, 100), i8(0, 100), i8(0, 100)}, i8(-2, 14)}, // 300 wraps to 44; -7/3 truncates to -2
	} {
		if bad := checkReduced(comm.Int8, tc.op, tc.terms, tc.want); bad != "" {
			t.Errorf("%v: %s", tc.op, bad)
		}
	}
	u8 := []byte{200, 100}
	if bad := checkReduced(comm.Uint8, comm.Max, [][]byte{u8, {100, 200}}, []byte{200, 200}); bad != "" {
		t.Errorf("uint8 max: %s", bad)
	}
	// 1 + 2^-10 + 1: the half sum rounds to 2; anything 1/256 away fails.
	one, step := encode(comm.Float16, 1), encode(comm.Float16, 1+0x1p-10)
	h := func(v ...uint64) []byte {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			store(b, 2, i, x)
		}
		return b
	}
	terms := [][]byte{h(one), h(step)}
	if bad := checkReduced(comm.Float16, comm.Sum, terms, h(encode(comm.Float16, 2))); bad != "" {
		t.Errorf("half sum: %s", bad)
	}
	if bad := checkReduced(comm.Float16, comm.Sum, terms, h(encode(comm.Float16, 2+0x1p-3))); bad == "" {
		t.Errorf("half sum 2.125 accepted for 2.0009765625")
	}
	if bad := checkReduced(comm.Float32, comm.Sum, [][]byte{{0, 0, 0xc0, 0x7f}}, []byte{0, 0, 0xc0, 0x7f}); bad == "" {
		t.Errorf("NaN accepted as a sum")
	}
}

// A reduction or element type the reference has no case for fails the
// check, naming it, instead of being compared with a Sum.
func TestCheckReducedRefusesWhatItDoesNotKnow(t *testing.T) {
	terms := [][]byte{make([]byte, 8), make([]byte, 8)}
	for _, c := range []struct {
		dt comm.DType
		op comm.Op
	}{{comm.Float32, comm.Op(99)}, {comm.DType(99), comm.Sum}} {
		if bad := checkReduced(c.dt, c.op, terms, make([]byte, 8)); !strings.Contains(bad, "no case") {
			t.Errorf("%v %v: %q; want a failure saying the reference has no case", c.dt, c.op, bad)
		}
	}
}
