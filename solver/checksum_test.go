package solver_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/solver"
)

// Every rank of every split gets the checksum of the reference field: the
// same for 1 to 4 ranks, rows or 2-D, float64 or float32.
func TestChecksumEqualsTheReferenceFieldsOnEveryRankAndSplit(t *testing.T) {
	for _, dt := range []solver.DType{solver.Float64, solver.Float32} {
		for _, decomp := range []solver.Decomposition{solver.Rows, solver.Grid2D} {
			cfg := solver.Config{N: 17, M: 13, Decomp: decomp, Seed: 4, ResidualEvery: 3, DType: dt,
				Boundary: solver.Boundary{Top: 1, Right: 0.5}}
			field, _, err := solver.Reference(cfg, 9)
			if err != nil {
				t.Fatal(err)
			}
			want, err := solver.FieldChecksum(field, cfg.N, cfg.M, dt)
			if err != nil {
				t.Fatal(err)
			}
			for n := 1; n <= 4; n++ {
				t.Run(fmt.Sprintf("%v/%v/np%d", dt, decomp, n), func(t *testing.T) {
					sums := make([]uint64, n)
					err := stepped(t, n, cfg, 9, func(c comm.Communicator, s *solver.Solver) error {
						var err error
						sums[c.Rank()], err = s.Checksum()
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
					for r, got := range sums {
						if got != want {
							t.Errorf("rank %d: checksum %016x, reference field's %016x", r, got, want)
						}
					}
				})
			}
		}
	}
}

// One cell's last bit, in any cell, or two unequal cells swapped, changes
// the checksum; the field's element type is part of it.
func TestFieldChecksumChangesWithAnyCell(t *testing.T) {
	cfg := solver.Config{N: 9, M: 7, Seed: 2, Boundary: solver.Boundary{Top: 1}}
	for _, dt := range []solver.DType{solver.Float64, solver.Float32} {
		cfg.DType = dt
		field, _, err := solver.Reference(cfg, 3)
		if err != nil {
			t.Fatal(err)
		}
		base, err := solver.FieldChecksum(field, cfg.N, cfg.M, dt)
		if err != nil {
			t.Fatal(err)
		}
		for k := range field {
			changed := append([]float64(nil), field...)
			if dt == solver.Float32 {
				changed[k] = float64(math.Float32frombits(math.Float32bits(float32(field[k])) ^ 1))
			} else {
				changed[k] = math.Float64frombits(math.Float64bits(field[k]) ^ 1)
			}
			if got, _ := solver.FieldChecksum(changed, cfg.N, cfg.M, dt); got == base {
				t.Fatalf("%v: cell %d's last bit flipped, checksum unchanged %016x", dt, k, got)
			}
			if j := (k + 11) % len(field); field[j] != field[k] {
				swapped := append([]float64(nil), field...)
				swapped[j], swapped[k] = swapped[k], swapped[j]
				if got, _ := solver.FieldChecksum(swapped, cfg.N, cfg.M, dt); got == base {
					t.Fatalf("%v: cells %d and %d swapped, checksum unchanged", dt, k, j)
				}
			}
		}
	}
	for _, c := range []struct {
		n, m, len int
		dt        solver.DType
	}{{3, 3, 8, solver.Float64}, {0, 3, 0, solver.Float64}, {3, 3, 9, solver.DType(7)}} {
		if _, err := solver.FieldChecksum(make([]float64, c.len), c.n, c.m, c.dt); !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("FieldChecksum of %d values as %d×%d %v: %v, want ErrInvalidArgument", c.len, c.n, c.m, c.dt, err)
		}
	}
}

func TestChecksumAfterCloseIsErrClosed(t *testing.T) {
	cs, err := local.NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer cs[0].Close()
	s, err := solver.New(cs[0], solver.Config{N: 5, M: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checksum(); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("Checksum after Close: %v, want ErrClosed", err)
	}
}
