package kernels_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/kernels"
)

// On a GPU (GPUCOMM_GPU_TESTS=1): every fold and divide kernel of
// reduce.cu gives, byte for byte, what comm/driver's ReduceInto and
// DivideInto give on the same inputs: random values with NaNs, infinities,
// signed zeros and subnormals among the floats, integers that overflow.
func TestFoldKernelsMatchTheHostReferenceOnAGPU(t *testing.T) {
	dev, s := gpuStream(t)
	const n = 100_003 // not a multiple of a block
	rng := rand.New(rand.NewPCG(22, 4))
	for _, typ := range kernels.FoldTypes {
		es := dtypeOf[typ].Size()
		for _, opName := range kernels.FoldOps {
			acc, src := randomInput(rng, typ, n), randomInput(rng, typ, n)
			want := hostReduce(t, typ, opName, 0, acc, src)
			got := onGPU(t, dev, s, acc, src, func(a, b devmem.Buffer) error { return kernels.Fold(s, typ, opName, a, b, n) })
			compare(t, "fold_"+typ+"_"+opName, got, want, es)
		}
		acc := randomInput(rng, typ, n)
		want := hostReduce(t, typ, "sum", 3, acc)
		got := onGPU(t, dev, s, acc, nil, func(a, _ devmem.Buffer) error { return kernels.Divide(s, typ, a, n, 3) })
		compare(t, "divide_"+typ, got, want, es)
	}
}

// On a GPU (GPUCOMM_GPU_TESTS=1): every reduce kernel of reduce.cu gives,
// byte for byte, what ReduceInto gives folding three sources in order (and
// DivideInto after a sum, for an Avg), in each of its two destinations, one
// of them a source (in place); and MaxReduceRanks sources and destinations
// for one type.
func TestReduceKernelsMatchTheHostReferenceOnAGPU(t *testing.T) {
	dev, s := gpuStream(t)
	const n = 100_003
	rng := rand.New(rand.NewPCG(22, 5))
	// run reduces nsrc random sources into ndst destinations, the last of
	// them source 1 when inPlace, every buffer off elements past its
	// allocation's start (0: the kernel's 16-byte path; 1: element by
	// element), and checks every destination.
	run := func(typ, opName string, by, nsrc, ndst int, inPlace bool, off int) {
		t.Helper()
		es := dtypeOf[typ].Size()
		srcs := make([][]byte, nsrc)
		for q := range srcs {
			srcs[q] = randomInput(rng, typ, n)
		}
		want := hostReduce(t, typ, opName, by, srcs...)
		var sb, db, owned []devmem.Buffer
		defer func() {
			for _, b := range owned {
				b.Free()
			}
		}()
		upload := func(b []byte) devmem.Buffer {
			whole, err := dev.Alloc(len(b) + off*es)
			if err != nil {
				t.Fatal(err)
			}
			owned = append(owned, whole)
			d, err := whole.Slice(off*es, len(b))
			if err == nil {
				err = devmem.CopyFromHost(d, b, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		for _, src := range srcs {
			sb = append(sb, upload(src))
		}
		for d := range ndst {
			if inPlace && d == ndst-1 {
				db = append(db, sb[1])
				continue
			}
			db = append(db, upload(bytes.Repeat([]byte{0xA5}, n*es)))
		}
		if err := kernels.Reduce(s, typ, opName, db, sb, n, by); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for d, b := range db {
			got := bytes.Repeat([]byte{0x5A}, n*es)
			if err := devmem.CopyToHost(got, b, nil); err != nil {
				t.Fatal(err)
			}
			compare(t, fmt.Sprintf("reduce_%s_%s (by %d), %d sources at %d, destination %d of %d", typ, opName, by, nsrc, off, d, ndst), got, want, es)
		}
	}
	for _, typ := range kernels.FoldTypes {
		for _, off := range []int{0, 1} {
			for _, opName := range kernels.FoldOps {
				run(typ, opName, 0, 3, 2, true, off)
			}
			run(typ, "sum", 3, 3, 2, true, off)
		}
	}
	run("f32", "sum", kernels.MaxReduceRanks, kernels.MaxReduceRanks, kernels.MaxReduceRanks, false, 0)
	run("bf16", "max", 0, 1, 1, false, 1)
}

// gpuStream skips t without GPUCOMM_GPU_TESTS=1, else opens the first GPU
// and a stream on it, destroyed when t ends.
func gpuStream(t *testing.T) (*devmem.Device, *devmem.Stream) {
	t.Helper()
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		t.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU")
	}
	dev, err := devmem.Open("cuda:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return dev, s
}

// dtypeOf and opOf map the kernels' names to comm/driver's element types and
// reductions.
var (
	dtypeOf = map[string]driver.DType{"i8": driver.Int8, "u8": driver.Uint8, "i32": driver.Int32, "u32": driver.Uint32,
		"i64": driver.Int64, "u64": driver.Uint64, "f16": driver.Float16, "bf16": driver.BFloat16, "f32": driver.Float32, "f64": driver.Float64}
	opOf = map[string]driver.Op{"sum": driver.Sum, "prod": driver.Prod, "min": driver.Min, "max": driver.Max}
)

// randomInput is n random elements of typ, with special's values among the
// floats.
func randomInput(rng *rand.Rand, typ string, n int) []byte {
	b := make([]byte, n*dtypeOf[typ].Size())
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	special(b, typ, rng)
	return b
}

// hostReduce is comm/driver's reference for the kernels: srcs folded in
// order into a copy of srcs[0] with ReduceInto, then divided by by with
// DivideInto when by > 0.
func hostReduce(t *testing.T, typ, opName string, by int, srcs ...[]byte) []byte {
	t.Helper()
	dt := dtypeOf[typ]
	want := bytes.Clone(srcs[0])
	for _, src := range srcs[1:] {
		if err := driver.ReduceInto(dt, opOf[opName], want, src); err != nil {
			t.Fatal(err)
		}
	}
	if by > 0 {
		if err := driver.DivideInto(dt, want, by); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// special puts NaN, ±Inf, ±0 and subnormals into every 7th float element.
func special(b []byte, typ string, rng *rand.Rand) {
	var vals []uint64
	switch typ {
	case "f16":
		vals = []uint64{0x7e00, 0x7c00, 0xfc00, 0x0000, 0x8000, 0x0001, 0x83ff}
	case "bf16":
		vals = []uint64{0x7fc0, 0x7f80, 0xff80, 0x0000, 0x8000, 0x0001, 0x807f}
	case "f32":
		vals = []uint64{uint64(math.Float32bits(float32(math.NaN()))), 0x7f800000, 0xff800000, 0, 0x80000000, 1, 0x807fffff}
	case "f64":
		vals = []uint64{math.Float64bits(math.NaN()), math.Float64bits(math.Inf(1)), math.Float64bits(math.Inf(-1)), 0, 1 << 63, 1, 0x800fffffffffffff}
	default:
		return
	}
	es := map[string]int{"f16": 2, "bf16": 2, "f32": 4, "f64": 8}[typ]
	for i := 0; i+es <= len(b); i += 7 * es {
		v := vals[rng.IntN(len(vals))]
		for k := range es {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

func onGPU(t *testing.T, dev *devmem.Device, s *devmem.Stream, acc, src []byte, run func(a, b devmem.Buffer) error) []byte {
	t.Helper()
	a, err := dev.Alloc(len(acc))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	b := a
	if src != nil {
		if b, err = dev.Alloc(len(src)); err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		if err := devmem.CopyFromHost(b, src, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := devmem.CopyFromHost(a, acc, nil); err != nil {
		t.Fatal(err)
	}
	if err := run(a, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := bytes.Repeat([]byte{0xA5}, len(acc))
	if err := devmem.CopyToHost(got, a, nil); err != nil {
		t.Fatal(err)
	}
	return got
}

// compare wants the same bytes, except that any NaN matches any NaN (the
// host and the GPU may quiet a NaN's payload differently).
func compare(t *testing.T, what string, got, want []byte, es int) {
	t.Helper()
	for i := 0; i < len(want); i += es {
		g, w := got[i:i+es], want[i:i+es]
		if bytes.Equal(g, w) || (isNaN(g, what) && isNaN(w, what)) {
			continue
		}
		t.Errorf("%s: element %d is %x, want %x", what, i/es, g, w)
		return
	}
}

func isNaN(b []byte, what string) bool {
	var u uint64
	for k := range b {
		u |= uint64(b[k]) << (8 * k)
	}
	switch {
	case bytes.Contains([]byte(what), []byte("bf16")):
		return u&0x7f80 == 0x7f80 && u&0x7f != 0
	case bytes.Contains([]byte(what), []byte("f16")):
		return u&0x7c00 == 0x7c00 && u&0x3ff != 0
	case bytes.Contains([]byte(what), []byte("f32")):
		return math.IsNaN(float64(math.Float32frombits(uint32(u))))
	case bytes.Contains([]byte(what), []byte("f64")):
		return math.IsNaN(math.Float64frombits(u))
	}
	return false
}
