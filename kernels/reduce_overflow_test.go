package kernels_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/kernels"
)

// A count whose bytes overflow int is refused as an argument, before any
// buffer is checked against it: n × the element size must not wrap round to
// a size that 64-byte buffers pass.
func TestReduceRefusesCountsWhoseBytesOverflow(t *testing.T) {
	d := devmem.NewHostDevice()
	a, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	b, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	bufs := []devmem.Buffer{a, b}
	for _, c := range []struct {
		name string
		n    int
		call func(n int) error
	}{
		{"Fold f64", 1<<61 + 1, func(n int) error { return kernels.Fold(nil, "f64", "sum", a, b, n) }},
		{"Fold f32", 1<<62 + 1, func(n int) error { return kernels.Fold(nil, "f32", "max", a, b, n) }},
		{"Fold f16", math.MaxInt/2 + 1, func(n int) error { return kernels.Fold(nil, "f16", "min", a, b, n) }},
		{"Fold i64 MaxInt", math.MaxInt, func(n int) error { return kernels.Fold(nil, "i64", "prod", a, b, n) }},
		{"Divide f64", 1<<61 + 1, func(n int) error { return kernels.Divide(nil, "f64", a, n, 3) }},
		{"Divide u32", 1<<62 + 1, func(n int) error { return kernels.Divide(nil, "u32", a, n, 2) }},
		{"Reduce f64", math.MaxInt, func(n int) error { return kernels.Reduce(nil, "f64", "sum", bufs, bufs, n, 0) }},
		{"Reduce bf16", 1<<62 + 1, func(n int) error { return kernels.Reduce(nil, "bf16", "sum", bufs[:1], bufs, n, 2) }},
		{"Reduce u64", 1<<61 + 1, func(n int) error { return kernels.Reduce(nil, "u64", "max", bufs, bufs[1:], n, 0) }},
	} {
		err := c.call(c.n)
		if !errors.Is(err, devmem.ErrInvalidArgument) {
			t.Errorf("%s of %d elements: %v, want ErrInvalidArgument", c.name, c.n, err)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Itoa(c.n)) {
			t.Errorf("%s of %d elements: %q does not name the count", c.name, c.n, err)
		}
	}
	// The largest counts that fit are still judged by the buffers: too
	// long for 64 bytes, not an overflow.
	size := map[string]int{"i8": 1, "u8": 1, "f16": 2, "bf16": 2, "i32": 4, "u32": 4, "f32": 4, "i64": 8, "u64": 8, "f64": 8}
	for _, typ := range kernels.FoldTypes {
		n := 64/size[typ] + 1
		if err := kernels.Fold(nil, typ, "sum", a, b, n); !errors.Is(err, devmem.ErrInvalidArgument) {
			t.Errorf("Fold of %d %s elements in 64 bytes: %v, want ErrInvalidArgument", n, typ, err)
		}
	}
}
