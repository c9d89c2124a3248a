package solver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/solver"
)

// A size whose product overflows int does not pass for the length of the
// field: FieldChecksum refuses it rather than sum a field of another shape.
func TestFieldChecksumRefusesSizesWhoseProductOverflows(t *testing.T) {
	for _, c := range []struct {
		field []float64
		n, m  int
		name  string
	}{
		{nil, 1 << 32, 1 << 32, "4294967296×4294967296"},
		{make([]float64, 4), 1<<62 + 1, 4, "4611686018427387905×4"},
		{make([]float64, 4), 4, 1<<62 + 1, "4×4611686018427387905"},
		{make([]float64, 3), 1<<63 - 1, 3, "9223372036854775807×3"},
		{make([]float64, 6), 2, 4, "2×4"},
		{make([]float64, 6), 0, 6, "0×6"},
	} {
		sum, err := solver.FieldChecksum(c.field, c.n, c.m, solver.Float64)
		if !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("FieldChecksum of %d values as %s: %016x, %v, want ErrInvalidArgument", len(c.field), c.name, sum, err)
			continue
		}
		if !strings.Contains(err.Error(), c.name) {
			t.Errorf("FieldChecksum of %d values as %s: %q does not name the size", len(c.field), c.name, err)
		}
	}
	if _, err := solver.FieldChecksum(make([]float64, 6), 2, 3, solver.Float32); err != nil {
		t.Errorf("FieldChecksum of a 2×3 field: %v", err)
	}
}

// A grid that passes Config's checks but is too large to hold on the host
// is refused by Reference with an error, never a panic of make.
func TestReferenceRefusesAGridTooLargeForTheHost(t *testing.T) {
	for _, cfg := range []solver.Config{
		{N: 1 << 30, M: 1 << 28},
		{N: 1 << 28, M: 1 << 30, DType: solver.Float32},
		{N: 1<<31 - 1, M: 1 << 27},
		{N: 1 << 24, M: 1 << 24},
	} {
		if err := cfg.Validate(1); err != nil {
			t.Fatalf("%d×%d: Config.Validate: %v (the test wants a grid that passes it)", cfg.N, cfg.M, err)
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("Reference of a %d×%d grid panicked: %v", cfg.N, cfg.M, p)
				}
			}()
			field, _, err := solver.Reference(cfg, 1)
			if !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("Reference of a %d×%d grid: %d values, %v, want ErrInvalidArgument", cfg.N, cfg.M, len(field), err)
				return
			}
			for _, want := range []string{"grid", "bytes"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Reference of a %d×%d grid: %q does not name the %s", cfg.N, cfg.M, err, want)
				}
			}
		}()
	}
}
