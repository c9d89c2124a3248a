package driver

import (
	"math"
	"math/rand"
	"testing"
)

func TestHalfRoundTripsEveryPattern(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := Half(i)
		f := h.Float32()
		got := HalfFrom(f)
		if f != f {
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x, not a NaN", i, got)
			}
			continue
		}
		if got != h {
			t.Fatalf("%#04x -> %g -> %#04x", i, f, got)
		}
	}
}

// TestHalfRoundsToNearestEven checks, between every pair of neighbouring
// finite halves, that the midpoint goes to the even one and points just
// either side go to the nearer.
func TestHalfRoundsToNearestEven(t *testing.T) {
	for i := 0; i < 0x7bff; i++ {
		lo, hi := Half(i), Half(i+1)
		a, b := float64(lo.Float32()), float64(hi.Float32())
		mid := float32((a + b) / 2) // exact: halves have 11 significant bits
		want := lo
		if i&1 == 1 {
			want = hi
		}
		if got := HalfFrom(mid); got != want {
			t.Fatalf("midpoint %g of %#04x,%#04x rounded to %#04x, want %#04x", mid, lo, hi, got, want)
		}
		if got := HalfFrom(math.Nextafter32(mid, float32(math.Inf(-1)))); got != lo {
			t.Fatalf("just below midpoint of %#04x,%#04x rounded to %#04x", lo, hi, got)
		}
		if got := HalfFrom(math.Nextafter32(mid, float32(math.Inf(1)))); got != hi {
			t.Fatalf("just above midpoint of %#04x,%#04x rounded to %#04x", lo, hi, got)
		}
		if got := HalfFrom(-mid); got != want|0x8000 {
			t.Fatalf("negative midpoint of %#04x rounded to %#04x", lo, got)
		}
	}
	if got := HalfFrom(65520); got != 0x7c00 {
		t.Fatalf("65520 (halfway to the next power) = %#04x, want +Inf", got)
	}
	if got := HalfFrom(float32(math.Inf(-1))); got != 0xfc00 {
		t.Fatalf("-Inf = %#04x", got)
	}
}

func TestBF16RoundsToNearestEven(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for n := 0; n < 1_000_000; n++ {
		u := r.Uint32()
		f := math.Float32frombits(u)
		got := BF16From(f)
		if f != f {
			if g := got.Float32(); g == g {
				t.Fatalf("NaN %#08x became %g", u, g)
			}
			continue
		}
		lo := BF16(u >> 16)
		rem := u & 0xffff
		want := lo
		if rem > 0x8000 || (rem == 0x8000 && lo&1 == 1) {
			want = lo + 1
		}
		if got != want {
			t.Fatalf("%#08x rounded to %#04x, want %#04x", u, got, want)
		}
	}
}

func TestDTypeTable(t *testing.T) {
	sizes := map[DType]int{Int8: 1, Uint8: 1, Int32: 4, Uint32: 4, Int64: 8, Uint64: 8, Float16: 2, BFloat16: 2, Float32: 4, Float64: 8}
	for _, d := range DTypes() {
		if d.Size() != sizes[d] {
			t.Errorf("%v.Size() = %d, want %d", d, d.Size(), sizes[d])
		}
		back, err := ParseDType(d.String())
		if err != nil || back != d {
			t.Errorf("ParseDType(%q) = %v, %v", d.String(), back, err)
		}
	}
	if DType(0).Valid() || DType(11).Size() != 0 || DType(99).String() != "DType(99)" {
		t.Error("invalid DTypes must say so")
	}
	if _, err := ParseDType("float128"); err == nil {
		t.Error("ParseDType accepted float128")
	}
	for _, o := range Ops() {
		if back, err := ParseOp(o.String()); err != nil || back != o {
			t.Errorf("ParseOp(%q) = %v, %v", o.String(), back, err)
		}
	}
}

// DTypes and Ops hand out slices of the caller's own: changing one changes
// no later answer.
func TestDTypesAndOpsAreTheCallersOwn(t *testing.T) {
	d, o := DTypes(), Ops()
	d[0], o[0] = Float64, Avg
	if got := DTypes(); got[0] != Int8 || len(got) != 10 {
		t.Errorf("DTypes after a caller changed its slice: %v", got)
	}
	if got := Ops(); got[0] != Sum || len(got) != 5 {
		t.Errorf("Ops after a caller changed its slice: %v", got)
	}
}
