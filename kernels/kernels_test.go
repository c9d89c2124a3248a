package kernels

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// poison is a NaN with a payload no kernel computes, so an element that a
// kernel should not touch is recognised bit for bit.
var poison = math.Float64frombits(0x7ff8_dead_beef_0001)

const poisonBits = 0x7ff8_dead_beef_0001

func newStream(t *testing.T, d *devmem.Device) *devmem.Stream {
	t.Helper()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

// alloc makes a slice of n float64 on d holding vals, or poison where vals
// is nil.
func alloc(t *testing.T, d *devmem.Device, n int, vals []float64) devmem.Slice[float64] {
	t.Helper()
	x, err := devmem.AllocSlice[float64](d, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Free() })
	if vals == nil {
		vals = make([]float64, n)
		for i := range vals {
			vals[i] = poison
		}
	}
	if err := x.CopyFrom(vals, nil); err != nil {
		t.Fatal(err)
	}
	return x
}

func randoms(seed uint64, n int) []float64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.Float64()*2 - 1
	}
	return v
}

func read(t *testing.T, s *devmem.Stream, x devmem.Slice[float64]) []float64 {
	t.Helper()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	v, err := x.ToHost(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestFillSetsEveryElementOfTheSliceAndNothingBeyond(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	t.Run("float64", func(t *testing.T) {
		whole := alloc(t, d, 1000, nil)
		x, _ := whole.Sub(100, 900)
		if err := Fill(s, x, 2.5); err != nil {
			t.Fatal(err)
		}
		got := read(t, s, whole)
		for i, v := range got {
			inside := i >= 100 && i < 900
			if inside && v != 2.5 || !inside && math.Float64bits(v) != poisonBits {
				t.Fatalf("element %d = %v after Fill of [100,900)", i, v)
			}
		}
	})
	t.Run("float32", func(t *testing.T) {
		x, err := devmem.AllocSlice[float32](d, 777)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Free()
		if err := Fill(s, x, float32(-1.25)); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got, _ := x.ToHost(nil)
		for i, v := range got {
			if v != -1.25 {
				t.Fatalf("element %d = %v, want -1.25", i, v)
			}
		}
	})
}

func TestScaleMultipliesEachElementOnce(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	in := randoms(1, 5000)
	x := alloc(t, d, len(in), in)
	if err := Scale(s, x, 3.0); err != nil {
		t.Fatal(err)
	}
	got := read(t, s, x)
	for i := range in {
		if got[i] != in[i]*3 {
			t.Fatalf("element %d = %v, want %v", i, got[i], in[i]*3)
		}
	}
	x32, _ := devmem.AllocSlice[float32](d, 3)
	defer x32.Free()
	x32.CopyFrom([]float32{1, -2, 0.5}, nil)
	if err := Scale(s, x32, float32(2)); err != nil {
		t.Fatal(err)
	}
	s.Synchronize()
	g32, _ := x32.ToHost(nil)
	if g32[0] != 2 || g32[1] != -4 || g32[2] != 1 {
		t.Fatalf("float32 scale by 2 = %v", g32)
	}
}

func TestStreamOrderFillThenScale(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	x := alloc(t, d, 4096, nil)
	for range 3 { // queued back to back; each must see the one before
		if err := Fill(s, x, 1.0); err != nil {
			t.Fatal(err)
		}
		if err := Scale(s, x, 3.0); err != nil {
			t.Fatal(err)
		}
		if err := Scale(s, x, 0.5); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range read(t, s, x) {
		if v != 1.5 {
			t.Fatalf("element %d = %v, want 1.5", i, v)
		}
	}
}

// rounded does one operation of HeatPoint in big.Float rounded to float64,
// so the reference below is independent of how Go compiles float64 code.
func rounded(op func(z, a, b *big.Float) *big.Float, a, b float64) float64 {
	z := new(big.Float).SetPrec(53)
	f, _ := op(z, big.NewFloat(a), big.NewFloat(b)).Float64()
	return f
}

func TestHeatPointRoundsEachOperationInTheDocumentedOrder(t *testing.T) {
	add := (*big.Float).Add
	sub := (*big.Float).Sub
	mul := (*big.Float).Mul
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range 20000 {
		v := func() float64 { return (rng.Float64() - 0.5) * math.Pow(2, float64(rng.IntN(40)-20)) }
		c, up, down, left, right, r := v(), v(), v(), v(), v(), rng.Float64()*0.25
		sum := rounded(add, rounded(add, rounded(add, up, down), left), right)
		lap := rounded(sub, sum, rounded(mul, 4, c))
		want := rounded(add, c, rounded(mul, r, lap))
		if got := HeatPoint(c, up, down, left, right, r); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("case %d: HeatPoint(%v, %v, %v, %v, %v, %v) = %v, want %v", i, c, up, down, left, right, r, got, want)
		}
	}
	if got := HeatPoint(1, 0, 0, 0, 0, 0.25); got != 0 {
		t.Fatalf("a hot point among cold neighbours with r=1/4 gives %v, want 0", got)
	}
}

func TestHeatStepUpdatesOnlyItsRectangle(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	const nx, ny, r = 41, 23, 0.2
	in := randoms(3, nx*ny)
	src := alloc(t, d, nx*ny, in)
	cases := []struct{ rowLo, rowHi, colLo, colHi int }{
		{1, ny - 1, 1, nx - 1}, // the whole interior
		{5, 9, 1, nx - 1},
		{1, 2, 1, 2},
		{3, 17, 7, 30},
		{ny - 2, ny - 1, nx - 2, nx - 1},
	}
	for _, c := range cases {
		dst := alloc(t, d, nx*ny, nil)
		if err := HeatStepRect(s, dst, src, nx, c.rowLo, c.rowHi, c.colLo, c.colHi, r); err != nil {
			t.Fatal(err)
		}
		got := read(t, s, dst)
		for i := range ny {
			for j := range nx {
				k := i*nx + j
				if i >= c.rowLo && i < c.rowHi && j >= c.colLo && j < c.colHi {
					want := HeatPoint(in[k], in[k-nx], in[k+nx], in[k-1], in[k+1], r)
					if math.Float64bits(got[k]) != math.Float64bits(want) {
						t.Fatalf("%+v: (%d,%d) = %v, want %v", c, i, j, got[k], want)
					}
				} else if math.Float64bits(got[k]) != poisonBits {
					t.Fatalf("%+v: (%d,%d) outside the rectangle was written: %v", c, i, j, got[k])
				}
			}
		}
	}
	// HeatStep is the full width between the boundary columns.
	a, b := alloc(t, d, nx*ny, nil), alloc(t, d, nx*ny, nil)
	if err := HeatStep(s, a, src, nx, 2, 7, r); err != nil {
		t.Fatal(err)
	}
	if err := HeatStepRect(s, b, src, nx, 2, 7, 1, nx-1, r); err != nil {
		t.Fatal(err)
	}
	ga, gb := read(t, s, a), read(t, s, b)
	for k := range ga {
		if math.Float64bits(ga[k]) != math.Float64bits(gb[k]) {
			t.Fatalf("HeatStep and HeatStepRect over columns [1,nx-1) differ at %d", k)
		}
	}
}

func TestHeatStepKeepsAUniformFieldUniform(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	const nx, ny = 17, 9
	u := make([]float64, nx*ny)
	for i := range u {
		u[i] = 0.3
	}
	src, dst := alloc(t, d, nx*ny, u), alloc(t, d, nx*ny, u)
	if err := HeatStep(s, dst, src, nx, 1, ny-1, 0.25); err != nil {
		t.Fatal(err)
	}
	for k, v := range read(t, s, dst) {
		if v != 0.3 {
			t.Fatalf("element %d = %v: a uniform field must not change", k, v)
		}
	}
}

func TestPackThenUnpackMovesOneColumn(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	const nx, ny, col, lo, hi = 13, 11, 4, 2, 9
	in := randoms(4, nx*ny)
	slab := alloc(t, d, nx*ny, in)
	buf := alloc(t, d, hi-lo+3, nil)
	if err := PackColumn(s, buf, slab, nx, col, lo, hi); err != nil {
		t.Fatal(err)
	}
	got := read(t, s, buf)
	for k := range got {
		if k < hi-lo && got[k] != in[(lo+k)*nx+col] {
			t.Fatalf("packed[%d] = %v, want slab(%d,%d) = %v", k, got[k], lo+k, col, in[(lo+k)*nx+col])
		}
		if k >= hi-lo && math.Float64bits(got[k]) != poisonBits {
			t.Fatalf("packed[%d] past the column was written", k)
		}
	}
	out := alloc(t, d, nx*ny, nil)
	if err := UnpackColumn(s, out, buf, nx, col+2, lo, hi); err != nil {
		t.Fatal(err)
	}
	res := read(t, s, out)
	for i := range ny {
		for j := range nx {
			v := res[i*nx+j]
			if j == col+2 && i >= lo && i < hi {
				if v != in[i*nx+col] {
					t.Fatalf("unpacked (%d,%d) = %v, want %v", i, j, v, in[i*nx+col])
				}
			} else if math.Float64bits(v) != poisonBits {
				t.Fatalf("unpack wrote (%d,%d) outside its column", i, j)
			}
		}
	}
}

func TestResidualRowsSumsSquaresOfTheDifferenceInsideTheRectangle(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	for _, nx := range []int{7, 256, 300, 1100} {
		const ny, rowLo, rowHi = 6, 1, 5
		colLo, colHi := 2, nx-1
		av, bv := randoms(5, nx*ny), randoms(6, nx*ny)
		for i := range ny { // poison outside the rectangle: a read there would show as NaN
			for j := range nx {
				if i < rowLo || i >= rowHi || j < colLo || j >= colHi {
					av[i*nx+j], bv[i*nx+j] = poison, poison
				}
			}
		}
		a, b := alloc(t, d, nx*ny, av), alloc(t, d, nx*ny, bv)
		partial := alloc(t, d, rowHi-rowLo+1, nil)
		if err := ResidualRows(s, partial, a, b, nx, rowLo, rowHi, colLo, colHi); err != nil {
			t.Fatal(err)
		}
		got := read(t, s, partial)
		for i := rowLo; i < rowHi; i++ {
			want, n := 0.0, 0
			for j := colLo; j < colHi; j++ {
				dd := av[i*nx+j] - bv[i*nx+j]
				want += dd * dd
				n++
			}
			if g := got[i-rowLo]; math.Abs(g-want) > float64(n)*0x1p-52*want {
				t.Fatalf("nx %d row %d: partial %v, plain sum %v", nx, i, g, want)
			}
		}
		if math.Float64bits(got[rowHi-rowLo]) != poisonBits {
			t.Fatalf("nx %d: a partial past the last row was written", nx)
		}
	}
}

func TestResidualRowsIsExactOnSmallIntegers(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	const nx, ny = 600, 3
	av, bv := make([]float64, nx*ny), make([]float64, nx*ny)
	want := [3]float64{}
	for i := range ny {
		for j := range nx {
			av[i*nx+j] = float64((i*7 + j*3) % 11)
			bv[i*nx+j] = float64((i + j) % 5)
			dd := av[i*nx+j] - bv[i*nx+j]
			want[i] += dd * dd
		}
	}
	a, b, p := alloc(t, d, nx*ny, av), alloc(t, d, nx*ny, bv), alloc(t, d, ny, nil)
	if err := ResidualRows(s, p, a, b, nx, 0, ny, 0, nx); err != nil {
		t.Fatal(err)
	}
	for i, g := range read(t, s, p) {
		if g != want[i] {
			t.Fatalf("row %d: %v, want exactly %v", i, g, want[i])
		}
	}
}

func TestSumInOrderAddsLeftToRight(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	// Left to right: 1e16+1 rounds to 1e16, minus 1e16 is 0, plus 1 is 1.
	// Pairwise would give 0, right to left 0 too.
	x := alloc(t, d, 4, []float64{1e16, 1, -1e16, 1})
	out := alloc(t, d, 2, nil)
	if err := SumInOrder(s, out, x); err != nil {
		t.Fatal(err)
	}
	got := read(t, s, out)
	if got[0] != 1 || math.Float64bits(got[1]) != poisonBits {
		t.Fatalf("SumInOrder = %v, want [1 poison]", got)
	}
	empty, _ := x.Sub(0, 0)
	if err := SumInOrder(s, out, empty); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, out); got[0] != 0 {
		t.Fatalf("sum of no elements = %v, want 0", got[0])
	}
}

func TestBadArgumentsReturnAnErrorAndChangeNothing(t *testing.T) {
	d, other := devmem.NewHostDevice(), devmem.NewHostDevice()
	s, otherStream := newStream(t, d), newStream(t, other)
	const nx, ny = 10, 6
	in := randoms(8, nx*ny)
	src, dst := alloc(t, d, nx*ny, in), alloc(t, d, nx*ny, nil)
	far := alloc(t, other, nx*ny, nil)
	buf := alloc(t, d, ny, nil)
	freed, _ := devmem.AllocSlice[float64](d, nx*ny)
	freed.Free()
	whole := alloc(t, d, 2*nx*ny, nil)
	lo, _ := whole.Sub(0, nx*ny)
	hi, _ := whole.Sub(nx*ny/2, nx*ny/2+nx*ny)
	cases := []struct {
		name string
		call func() error
	}{
		{"heat width 2", func() error { return HeatStep(s, dst, src, 2, 1, 2, 0.1) }},
		{"heat row 0", func() error { return HeatStep(s, dst, src, nx, 0, 2, 0.1) }},
		{"heat last row", func() error { return HeatStep(s, dst, src, nx, 1, ny, 0.1) }},
		{"heat rows reversed", func() error { return HeatStep(s, dst, src, nx, 3, 2, 0.1) }},
		{"heat column 0", func() error { return HeatStepRect(s, dst, src, nx, 1, 2, 0, 3, 0.1) }},
		{"heat last column", func() error { return HeatStepRect(s, dst, src, nx, 1, 2, 1, nx, 0.1) }},
		{"heat NaN r", func() error { return HeatStep(s, dst, src, nx, 1, 2, math.NaN()) }},
		{"heat in place", func() error { return HeatStep(s, dst, dst, nx, 1, 2, 0.1) }},
		{"heat overlapping", func() error { return HeatStep(s, hi, lo, nx, 1, 2, 0.1) }},
		{"heat other device", func() error { return HeatStep(s, far, src, nx, 1, 2, 0.1) }},
		{"heat other stream", func() error { return HeatStep(otherStream, dst, src, nx, 1, 2, 0.1) }},
		{"heat freed src", func() error { return HeatStep(s, dst, freed, nx, 1, 2, 0.1) }},
		{"heat zero src", func() error { return HeatStep(s, dst, devmem.Slice[float64]{}, nx, 1, 2, 0.1) }},
		{"pack column nx", func() error { return PackColumn(s, buf, src, nx, nx, 0, 2) }},
		{"pack negative column", func() error { return PackColumn(s, buf, src, nx, -1, 0, 2) }},
		{"pack past the slab", func() error { return PackColumn(s, buf, src, nx, 0, 0, ny+1) }},
		{"pack buffer short", func() error { b, _ := buf.Sub(0, ny-1); return PackColumn(s, b, src, nx, 0, 0, ny) }},
		{"pack into the slab", func() error { b, _ := src.Sub(0, ny); return PackColumn(s, b, src, nx, 1, 0, ny) }},
		{"unpack other device", func() error { return UnpackColumn(s, far, buf, nx, 1, 0, 2) }},
		{"residual partial short", func() error { return ResidualRows(s, buf, src, dst, nx, 0, ny+1, 0, nx) }},
		{"residual columns past nx", func() error { return ResidualRows(s, buf, src, dst, nx, 0, 2, 0, nx+1) }},
		{"residual partial is input", func() error { b, _ := dst.Sub(0, 2); return ResidualRows(s, b, src, dst, nx, 0, 2, 0, nx) }},
		{"residual width 0", func() error { return ResidualRows(s, buf, src, dst, 0, 0, 2, 0, 0) }},
		{"sum into nothing", func() error { e, _ := buf.Sub(0, 0); return SumInOrder(s, e, src) }},
		{"sum in place", func() error { return SumInOrder(s, src, src) }},
		{"fill freed", func() error { return Fill(s, freed, 1.0) }},
		{"scale other stream", func() error { return Scale(otherStream, dst, 2.0) }},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, devmem.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", c.name, err)
		}
	}
	if got := read(t, s, src); !sameBits(got, in) {
		t.Error("src changed after rejected calls")
	}
	for name, x := range map[string]devmem.Slice[float64]{"dst": dst, "buf": buf, "whole": whole} {
		for k, v := range read(t, s, x) {
			if math.Float64bits(v) != poisonBits {
				t.Fatalf("%s[%d] changed after rejected calls", name, k)
			}
		}
	}
	for k, v := range read(t, otherStream, far) {
		if math.Float64bits(v) != poisonBits {
			t.Fatalf("far[%d] changed after rejected calls", k)
		}
	}
}

func sameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

func TestEmptyRangesAreNoOps(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	src, dst, buf := alloc(t, d, 30, randoms(9, 30)), alloc(t, d, 30, nil), alloc(t, d, 3, nil)
	calls := []error{
		HeatStep(s, dst, src, 10, 2, 2, 0.1),
		HeatStepRect(s, dst, src, 10, 1, 2, 4, 4, 0.1),
		PackColumn(s, buf, src, 10, 3, 1, 1),
		UnpackColumn(s, dst, buf, 10, 3, 2, 2),
		ResidualRows(s, buf, src, src, 10, 1, 1, 0, 10),
	}
	for i, err := range calls {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	for _, x := range []devmem.Slice[float64]{dst, buf} {
		for k, v := range read(t, s, x) {
			if math.Float64bits(v) != poisonBits {
				t.Fatalf("element %d written by an empty range", k)
			}
		}
	}
}

func TestHeatPointInFloat32RoundsEachOperationToFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	r32 := func(x float64) float64 { return float64(float32(x)) } // float64 holds a float32 op's exact result before its rounding
	for i := range 20000 {
		v := func() float32 { return float32((rng.Float64() - 0.5) * math.Pow(2, float64(rng.IntN(30)-15))) }
		c, up, down, left, right, r := v(), v(), v(), v(), v(), float32(rng.Float64()*0.25)
		f := func(x float32) float64 { return float64(x) }
		sum := r32(r32(r32(f(up)+f(down))+f(left)) + f(right))
		lap := r32(sum - r32(4*f(c)))
		want := float32(r32(f(c) + r32(f(r)*lap)))
		if got := HeatPoint(c, up, down, left, right, r); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("case %d: HeatPoint[float32](%v, %v, %v, %v, %v, %v) = %v, want %v", i, c, up, down, left, right, r, got, want)
		}
		if HeatPoint(c, up, down, left, right, r) == float32(HeatPoint(f(c), f(up), f(down), f(left), f(right), f(r))) {
			continue
		}
		return // float32 and float64 arithmetic differ somewhere, as they must
	}
	t.Fatal("HeatPoint[float32] always equals HeatPoint[float64] rounded: it is not computing in float32")
}

// normCase runs HeatStepNorm and HeatStepRect of in over a rectangle of a
// slab nx × ny on the host device and returns both destinations and the
// partials (one more than HeatBlocks, the last poisoned).
func normCase[T Float](t *testing.T, in []T, nx, ny, rowLo, rowHi, colLo, colHi int, r T) (norm, plain []T, parts []float64) {
	t.Helper()
	return shapeNormCase(t, heatDefault, in, nx, ny, rowLo, rowHi, colLo, colHi, r)
}

// shapeNormCase is normCase with the norm kernel of sh: HeatStepNorm for
// heatDefault, heatPlanShape's launch of sh otherwise (partials: its grid's
// blocks, and one poisoned past them).
func shapeNormCase[T Float](t *testing.T, sh heatShape, in []T, nx, ny, rowLo, rowHi, colLo, colHi int, r T) (norm, plain []T, parts []float64) {
	t.Helper()
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	mk := func(v []T) devmem.Slice[T] {
		x, err := devmem.AllocSlice[T](d, len(v))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Free() })
		if err := x.CopyFrom(v, nil); err != nil {
			t.Fatal(err)
		}
		return x
	}
	poisoned := func(n int) []T {
		v := make([]T, n)
		for i := range v {
			v[i] = T(math.NaN())
		}
		return v
	}
	src, a, b := mk(in), mk(poisoned(len(in))), mk(poisoned(len(in)))
	nb := HeatBlocks(rowHi-rowLo, colHi-colLo)
	if sh != heatDefault {
		gx, gy := sh.grid(rowHi-rowLo, sh.normThreads(colHi-colLo))
		nb = gx * gy
	}
	p := alloc(t, d, nb+1, nil)
	pn, _ := p.Sub(0, nb)
	if sh == heatDefault {
		if err := HeatStepNorm(s, a, src, pn, nx, rowLo, rowHi, colLo, colHi, r); err != nil {
			t.Fatal(err)
		}
	} else if err := run(heatPlanShape(sh, s, a, src, &pn, nx, rowLo, rowHi, colLo, colHi, r)); err != nil {
		t.Fatal(err)
	}
	if err := HeatStepRect(s, b, src, nx, rowLo, rowHi, colLo, colHi, r); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	norm, _ = a.ToHost(nil)
	plain, _ = b.ToHost(nil)
	parts = read(t, s, p)
	if math.Float64bits(parts[nb]) != poisonBits {
		t.Fatalf("partial %d, past the %d blocks, was written", nb, nb)
	}
	return norm, plain, parts[:nb]
}

// TestHeatStepNormWritesTheStepAndEachBlocksSumOfSquares checks the fused
// step on small integers, where every (u'-u)² and every sum is exact: the
// field must be HeatStepRect's bit for bit, and each block's partial the
// exact sum over the cells that block owns, whatever the order of adding.
// A block of 128×1 threads owns, along a row, the columns of its threads,
// two a thread from the even column at or before colLo; HeatBlocks counts
// cols/2 + 1 threads a row whatever colLo's parity, and a block that owns
// no cell writes +0.
func TestHeatStepNormWritesTheStepAndEachBlocksSumOfSquares(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	type rect struct{ nx, ny, rowLo, rowHi, colLo, colHi int }
	rects := []rect{
		{203, 45, 1, 44, 1, 202},  // more than one block each way, cut blocks at the edges
		{203, 45, 7, 30, 65, 140}, // an inner rectangle: odd first column, odd width
		{203, 45, 7, 30, 64, 140}, // even first column, even width
		{203, 45, 7, 30, 65, 141}, // odd first column, even width
		{203, 45, 7, 30, 64, 141}, // even first column, odd width
		{204, 9, 1, 8, 1, 203},    // an even slab width
		{5, 4, 1, 3, 1, 4},        // smaller than a block
		{5, 4, 1, 3, 1, 2},        // one column, odd
		{6, 4, 1, 3, 2, 3},        // one column, even: its thread's first column is not written
		// 256 columns from an even one: 128 threads, one block's worth,
		// but HeatBlocks counts 129 threads, two blocks along a row; the
		// second owns no cell. From an odd one the second owns the last
		// column.
		{260, 12, 1, 11, 2, 258},
		{260, 12, 1, 11, 1, 257},
		// More than 65535 blocks of 4 rows down: blocks stride, and a
		// thread adds cells of two strides.
		{4, 65535*4 + 300, 1, 65535*4 + 299, 1, 3},
		{5, 65535*4 + 300, 1, 65535*4 + 299, 2, 4},
	}
	for _, rc := range rects {
		in := make([]float64, rc.nx*rc.ny)
		for i := range in {
			in[i] = float64(rng.IntN(64))
		}
		rows, cols := rc.rowHi-rc.rowLo, rc.colHi-rc.colLo
		band := heatBlockY * heatRows
		gx, gy := ceilDiv(cols/2+1, heatBlockX), min(ceilDiv(rows, band), 65535)
		if nb := HeatBlocks(rows, cols); nb != gx*gy {
			t.Fatalf("%+v: HeatBlocks(%d, %d) = %d, want %d×%d", rc, rows, cols, nb, gx, gy)
		}
		want := make([]float64, gx*gy)
		owns := make([]bool, gx*gy)
		check := func(name string, norm, plain []float64, parts []float64, sq func(k int) float64) {
			t.Helper()
			for k := range norm {
				if math.Float64bits(norm[k]) != math.Float64bits(plain[k]) {
					t.Fatalf("%s %+v: element %d: HeatStepNorm wrote %v, HeatStepRect %v", name, rc, k, norm[k], plain[k])
				}
			}
			clear(want)
			clear(owns)
			for i := rc.rowLo; i < rc.rowHi; i++ {
				by := ((i - rc.rowLo) / band) % gy
				for j := rc.colLo; j < rc.colHi; j++ {
					b := by*gx + (j-rc.colLo&^1)/2/heatBlockX
					want[b] += sq(i*rc.nx + j)
					owns[b] = true
				}
			}
			for b := range want {
				if parts[b] != want[b] || !owns[b] && math.Float64bits(parts[b]) != 0 {
					t.Fatalf("%s %+v: block %d sums %v, its cells' squares sum to %v (it owns cells: %v)", name, rc, b, parts[b], want[b], owns[b])
				}
			}
		}
		// r = 1/4: u'-u = lap/4, exact, and so are the squares and sums.
		norm, plain, parts := normCase(t, in, rc.nx, rc.ny, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, 0.25)
		check("float64", norm, plain, parts, func(k int) float64 { d := norm[k] - in[k]; return d * d })
		in32 := make([]float32, len(in))
		for i, v := range in {
			in32[i] = float32(v)
		}
		n32, p32, parts32 := normCase(t, in32, rc.nx, rc.ny, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, float32(0.25))
		widen := func(x []float32) []float64 {
			w := make([]float64, len(x))
			for i, v := range x {
				w[i] = float64(v)
			}
			return w
		}
		n64 := widen(n32)
		check("float32", n64, widen(p32), parts32, func(k int) float64 { d := n64[k] - in[k]; return d * d })
	}
}

// TestOneColumnHeatNormKeepsItsPartition checks heatShapes[1], the
// one-column norm kernel (the default before the pair kernel, kept to be
// measured against it), as the test above: a block of 64×2 threads owns 64
// columns from colLo and, down, runs of 8 rows.
func TestOneColumnHeatNormKeepsItsPartition(t *testing.T) {
	sh := heatShapes[1]
	if sh != (heatShape{"heat_step_%s", 4, 2, 64, "heat_norm_%s"}) {
		t.Fatalf("heatShapes[1] = %+v, want the one-column step of blocks of 64×2", sh)
	}
	rng := rand.New(rand.NewPCG(18, 18))
	type rect struct{ nx, ny, rowLo, rowHi, colLo, colHi int }
	for _, rc := range []rect{{203, 45, 1, 44, 1, 202}, {203, 45, 7, 30, 64, 141}, {4, 65535*8 + 300, 1, 65535*8 + 299, 1, 3}} {
		in := make([]float64, rc.nx*rc.ny)
		for i := range in {
			in[i] = float64(rng.IntN(64))
		}
		rows, cols := rc.rowHi-rc.rowLo, rc.colHi-rc.colLo
		gx, gy := ceilDiv(cols, 64), min(ceilDiv(rows, 8), 65535)
		want := make([]float64, gx*gy)
		norm, plain, parts := shapeNormCase(t, sh, in, rc.nx, rc.ny, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, 0.25)
		if len(parts) != gx*gy {
			t.Fatalf("%+v: %d partials, want %d×%d", rc, len(parts), gx, gy)
		}
		stepSquares(t, rc, rc.nx, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, in, norm, plain, func(i, j int, d2 float64) {
			want[((i-rc.rowLo)/8)%gy*gx+(j-rc.colLo)/64] += d2
		})
		for b := range want {
			if parts[b] != want[b] {
				t.Fatalf("%+v: block %d sums %v, its cells' squares sum to %v", rc, b, parts[b], want[b])
			}
		}
	}
}

// stepSquares fails t unless the fused step wrote norm equal to
// HeatStepRect's plain bit for bit on every cell of the rectangle (rc names
// it in a failure), and gives add each cell's row, column and squared change
// from in, row by row.
func stepSquares(t *testing.T, rc any, nx, rowLo, rowHi, colLo, colHi int, in, norm, plain []float64, add func(i, j int, d2 float64)) {
	t.Helper()
	for i := rowLo; i < rowHi; i++ {
		for j := colLo; j < colHi; j++ {
			k := i*nx + j
			if math.Float64bits(norm[k]) != math.Float64bits(plain[k]) {
				t.Fatalf("%+v: element %d: %v, HeatStepRect %v", rc, k, norm[k], plain[k])
			}
			d := norm[k] - in[k]
			add(i, j, d*d)
		}
	}
}

// On random data the partials add in another order than a plain loop, so
// they agree within the rounding of the n terms, and the field is
// HeatStepRect's bit for bit.
func TestHeatStepNormOnRandomDataMatchesAPlainSum(t *testing.T) {
	type rect struct{ nx, ny, rowLo, rowHi, colLo, colHi int }
	for _, rc := range []rect{{301, 77, 1, 76, 1, 300}, {301, 77, 2, 70, 2, 299}, {302, 77, 3, 77 - 1, 4, 300}, {302, 40, 1, 39, 3, 300}} {
		in := randoms(12, rc.nx*rc.ny)
		norm, plain, parts := normCase(t, in, rc.nx, rc.ny, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, 0.21)
		total, plainSum := 0.0, 0.0
		for _, p := range parts {
			total += p
		}
		stepSquares(t, rc, rc.nx, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, in, norm, plain, func(_, _ int, d2 float64) { plainSum += d2 })
		if plainSum == 0 || math.Abs(total-plainSum) > float64(rc.nx*rc.ny)*0x1p-52*plainSum {
			t.Fatalf("%+v: partials add to %v, a plain loop to %v", rc, total, plainSum)
		}
	}
}

// TestHeatNormRefAddsInTheKernelsOrder runs, on random data where the
// order of the additions shows in the last bits, a thread-by-thread
// transcription of heat_rows_pair<4, true> and block_sum of heat.cu (each
// thread its runs of rows, in a row column j then j+1, only the cells it
// writes; then each warp's shuffle tree and the warps in order) and checks
// that HeatStepNorm on the host device (heatNormRef, which visits the cells
// row by row instead) gives the same partials bit for bit, for odd and
// even first columns and widths, both element types, and blocks that
// stride down.
func TestHeatNormRefAddsInTheKernelsOrder(t *testing.T) {
	if heatBlockY != 1 || heatDefault.blockY != 1 || !heatDefault.pair() {
		t.Fatalf("simPairNorm transcribes the pair kernel in blocks of %d×1; the default is %+v", heatBlockX, heatDefault)
	}
	type rect struct{ nx, ny, rowLo, rowHi, colLo, colHi int }
	rects := []rect{
		{301, 77, 1, 76, 1, 300}, {301, 77, 2, 70, 2, 299}, {302, 77, 3, 76, 4, 300}, {302, 40, 1, 39, 3, 300},
		{260, 12, 1, 11, 2, 258}, {260, 12, 1, 11, 1, 257}, {6, 5, 1, 4, 2, 3},
		{5, 65535*4 + 30, 1, 65535*4 + 29, 1, 4},
	}
	for _, rc := range rects {
		in := randoms(uint64(rc.nx+rc.colLo), rc.nx*rc.ny)
		_, _, parts := normCase(t, in, rc.nx, rc.ny, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, 0.21)
		want := simPairNorm(in, rc.nx, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, 0.21, len(parts))
		in32 := make([]float32, len(in))
		for i, v := range in {
			in32[i] = float32(v)
		}
		_, _, parts32 := normCase(t, in32, rc.nx, rc.ny, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, float32(0.21))
		want32 := simPairNorm(in32, rc.nx, rc.rowLo, rc.rowHi, rc.colLo, rc.colHi, float32(0.21), len(parts32))
		for b := range parts {
			if math.Float64bits(parts[b]) != math.Float64bits(want[b]) {
				t.Fatalf("float64 %+v: block %d: HeatStepNorm %v, the kernel's order %v", rc, b, parts[b], want[b])
			}
			if math.Float64bits(parts32[b]) != math.Float64bits(want32[b]) {
				t.Fatalf("float32 %+v: block %d: HeatStepNorm %v, the kernel's order %v", rc, b, parts32[b], want32[b])
			}
		}
	}
}

// simPairNorm is heat_norm_%s_pair of heat.cu, a block and a thread at a
// time, in blocks of heatBlockX threads along a row, over n blocks, the
// number HeatBlocks gives; gy from the rows as the launch has it.
func simPairNorm[T Float](src []T, nx, rowLo, rowHi, colLo, colHi int, r T, n int) []float64 {
	const R = heatRows
	gy := min(ceilDiv(rowHi-rowLo, R), 65535)
	gx := n / gy
	parts := make([]float64, n)
	var sums [heatBlockX]float64
	for by := range gy {
		for bx := range gx {
			for tx := range heatBlockX {
				j := colLo&^1 + 2*(bx*heatBlockX+tx)
				s := 0.0
				if j < colHi {
					w0, w1 := j >= colLo, j+1 < colHi
					for i0 := rowLo + by*R; i0 < rowHi; i0 += gy * R {
						for i := i0; i < min(i0+R, rowHi); i++ {
							for c, w := range []bool{w0, w1} {
								if !w {
									continue
								}
								k := i*nx + j + c
								v := HeatPoint(src[k], src[k-nx], src[k+nx], src[k-1], src[k+1], r)
								e := float64(v) - float64(src[k])
								s = s + float64(e*e)
							}
						}
					}
				}
				sums[tx] = s
			}
			// block_sum: in each warp, s = s + __shfl_down_sync(s, off),
			// a lane past 31 reading its own value; then thread 0 adds
			// the warps' lane 0 in order.
			b := 0.0
			for w := range heatBlockX / 32 {
				lane := sums[w*32 : w*32+32]
				for off := 16; off > 0; off /= 2 {
					next := make([]float64, 32)
					for l := range 32 {
						o := lane[l]
						if l+off < 32 {
							o = lane[l+off]
						}
						next[l] = lane[l] + o
					}
					lane = next
				}
				if w == 0 {
					b = lane[0]
				} else {
					b = b + lane[0]
				}
			}
			parts[by*gx+bx] = b
		}
	}
	return parts
}

func TestSumBlocksAddsEveryValueOnce(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	rng := rand.New(rand.NewPCG(9, 9))
	sizes := []int{0, 1, 255, 4096, 4097, 3*4096 + 17}
	if !testing.Short() {
		sizes = append(sizes, 4096*4096+3) // three passes
	}
	for _, n := range sizes {
		in := make([]float64, n)
		exact := 0.0
		for i := range in {
			in[i] = float64(rng.IntN(1 << 20)) // sums stay exact below 2^53
			exact += in[i]
		}
		x := alloc(t, d, n+1, append(in, 1e300)) // a value past the input that must not be added
		xs, _ := x.Sub(0, n)
		out := alloc(t, d, 2, nil)
		scratch := alloc(t, d, SumScratch(n), nil)
		if err := SumBlocks(s, out, xs, scratch); err != nil {
			t.Fatal(err)
		}
		got := read(t, s, out)
		if got[0] != exact || math.Float64bits(got[1]) != poisonBits {
			t.Fatalf("n = %d: sum %v (next %v), want %v", n, got[0], got[1], exact)
		}
	}
	// Random signs and magnitudes: within n rounding errors of the exact sum.
	in := randoms(10, 50000)
	exact := new(big.Float).SetPrec(2000)
	for _, v := range in {
		exact.Add(exact, big.NewFloat(v))
	}
	want, _ := exact.Float64()
	out, scratch := alloc(t, d, 1, nil), alloc(t, d, SumScratch(len(in)), nil)
	if err := SumBlocks(s, out, alloc(t, d, len(in), in), scratch); err != nil {
		t.Fatal(err)
	}
	abs := 0.0
	for _, v := range in {
		abs += math.Abs(v)
	}
	if got := read(t, s, out)[0]; math.Abs(got-want) > float64(len(in))*0x1p-53*abs {
		t.Fatalf("sum %v, exact %v", got, want)
	}
}

func TestHeatStepNormAndSumBlocksRefuseBadArguments(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t, d)
	const nx, ny = 100, 20
	src := alloc(t, d, nx*ny, randoms(1, nx*ny))
	dst := alloc(t, d, nx*ny, nil)
	nb := HeatBlocks(ny-2, nx-2)
	parts := alloc(t, d, nb, nil)
	short := alloc(t, d, nb-1, nil)
	inDst, _ := dst.Sub(0, nb)
	other := alloc(t, d, 10, nil)
	src32, err1 := devmem.AllocSlice[float32](d, nx*ny)
	dst32, err2 := devmem.AllocSlice[float32](d, nx*ny)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	defer src32.Free()
	defer dst32.Free()
	poison32 := make([]float32, nx*ny)
	for i := range poison32 {
		poison32[i] = math.Float32frombits(0x7fc0_dead)
	}
	if err := dst32.CopyFrom(poison32, nil); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"too few partials":    HeatStepNorm(s, dst, src, short, nx, 1, ny-1, 1, nx-1, 0.2),
		"partials inside dst": HeatStepNorm(s, dst, src, inDst, nx, 1, ny-1, 1, nx-1, 0.2),
		"rows past the slab":  HeatStepNorm(s, dst, src, parts, nx, 1, ny, 1, nx-1, 0.2),
		"no partials":         HeatStepNorm(s, dst, src, devmem.Slice[float64]{}, nx, 1, ny-1, 1, nx-1, 0.2),
		"sum into its input":  SumBlocks(s, parts, parts, other),
		"sum into nothing":    SumBlocks(s, devmem.Slice[float64]{}, parts, other),
		"float32 through a float64 kernel": func() error {
			return run(heatPlanShape(heatShape{"heat_step_f64", 4, 4, 32, ""}, s, dst32, src32, nil, nx, 1, ny-1, 1, nx-1, float32(0.2)))
		}(),
		"partials through a kernel without": func() error {
			return run(heatPlanShape(heatShape{"heat_step_%s", 4, 1, 128, ""}, s, dst, src, &parts, nx, 1, ny-1, 1, nx-1, 0.2))
		}(),
	} {
		if !errors.Is(err, devmem.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	// SumBlocks of more than one chunk with too little scratch.
	big := alloc(t, d, sumChunk+1, nil)
	if err := SumBlocks(s, other, big, devmem.Slice[float64]{}); !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("SumBlocks of %d values without scratch: %v", sumChunk+1, err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got, _ := dst32.ToHost(nil); !slices.EqualFunc(got, poison32, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
		t.Fatal("the float32 dst was written by a refused call")
	}
	for name, x := range map[string]devmem.Slice[float64]{"dst": dst, "partials": parts, "other": other} {
		for k, v := range read(t, s, x) {
			if math.Float64bits(v) != poisonBits {
				t.Fatalf("%s[%d] = %v after refused calls", name, k, v)
			}
		}
	}
}
