package kernels

import (
	"errors"
	"math"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

func TestDivideDividesEachElementOnceAndNothingBeyond(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	const n = 1001
	x := alloc(t, d, n+3, nil)
	in := randoms(11, n)
	v, err := x.Sub(1, n+1)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.CopyFrom(in, nil); err != nil {
		t.Fatal(err)
	}
	if err := Divide(s, v, 3); err != nil {
		t.Fatal(err)
	}
	got := read(t, s, x)
	for i, g := range got {
		want := poison
		if i >= 1 && i <= n {
			want = in[i-1] / 3 // the quotient correctly rounded, not in·(1/3)
		}
		if math.Float64bits(g) != math.Float64bits(want) {
			t.Fatalf("element %d: got %v, want %v", i, g, want)
		}
	}
}

func TestDivideRefusesABadDivisorAndChangesNothing(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	in := randoms(12, 17)
	x := alloc(t, d, 17, in)
	for _, div := range []float64{0, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if err := Divide(s, x, div); !errors.Is(err, devmem.ErrInvalidArgument) {
			t.Errorf("Divide by %v: %v; want ErrInvalidArgument", div, err)
		}
	}
	for i, g := range read(t, s, x) {
		if g != in[i] {
			t.Fatalf("element %d changed to %v", i, g)
		}
	}
}
