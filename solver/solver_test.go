package solver_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/localtest"
	"github.com/gpucomm/gpucomm/solver"
	"github.com/gpucomm/gpucomm/solver/solvertest"
)

func TestConformanceOnLocalBackend(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			solvertest.Run(t, func() ([]comm.Communicator, error) { return local.NewGroup(n) })
		})
	}
}

func TestConformanceFunctionPassesOnLocalBackend(t *testing.T) {
	groups := 0
	err := solver.Conformance(func() ([]comm.Communicator, error) { groups++; return local.NewGroup(3) })
	if err != nil {
		t.Fatal(err)
	}
	if want := len(solver.Cases(3)); groups != want {
		t.Fatalf("Conformance made %d groups for %d cases", groups, want)
	}
}

func TestCasesCoverBothDecompositionsOverlapAndUnevenSplits(t *testing.T) {
	for size := 1; size <= 4; size++ {
		var rows, grid, overlap, noOverlap, uneven int
		layouts := map[[2]int]bool{}
		for _, c := range solver.Cases(size) {
			cfg := c.Config
			if cfg.Decomp == solver.Rows {
				rows++
				if (cfg.N-2)%size != 0 {
					uneven++
				}
			} else {
				grid++
				layouts[[2]int{cfg.Px, cfg.Py}] = true
			}
			if cfg.NoOverlap {
				noOverlap++
			} else {
				overlap++
			}
		}
		if rows == 0 || grid == 0 || overlap == 0 || noOverlap == 0 || (size > 1 && uneven == 0) {
			t.Errorf("size %d: %d row cases (%d uneven), %d 2-D, %d overlap, %d not", size, rows, uneven, grid, overlap, noOverlap)
		}
		// Both element types, with overlap on and off, on both
		// decompositions.
		kinds := map[[3]int]bool{}
		for _, c := range solver.Cases(size) {
			kinds[[3]int{int(c.Config.DType), btoi(c.Config.NoOverlap), int(c.Config.Decomp)}] = true
		}
		for _, dt := range []solver.DType{solver.Float64, solver.Float32} {
			for _, d := range []solver.Decomposition{solver.Rows, solver.Grid2D} {
				if !kinds[[3]int{int(dt), 0, int(d)}] {
					t.Errorf("size %d: no %v %v case with overlap", size, dt, d)
				}
			}
			if !kinds[[3]int{int(dt), 1, int(solver.Rows)}] {
				t.Errorf("size %d: no %v case without overlap", size, dt)
			}
		}
		for px := 1; px <= size; px++ {
			if size%px == 0 && !layouts[[2]int{px, size / px}] {
				t.Errorf("size %d: no case on a %d×%d grid of ranks", size, px, size/px)
			}
		}
	}
}

// run runs fn on every rank of a fresh local group, each in its goroutine.
func run(t *testing.T, n int, fn func(c comm.Communicator) error) []error {
	t.Helper()
	_, errs := localtest.Run(t, n, fn)
	return errs
}

// stepped opens a Solver of cfg on every rank of a fresh local group of n,
// takes steps steps, runs fn, closes the Solver, and gives the ranks' errors
// joined.
func stepped(t *testing.T, n int, cfg solver.Config, steps int, fn func(c comm.Communicator, s *solver.Solver) error) error {
	t.Helper()
	return errors.Join(run(t, n, func(c comm.Communicator) error {
		s, err := solver.New(c, cfg)
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.Step(steps); err != nil {
			return err
		}
		return fn(c, s)
	})...)
}

func TestGatheredFieldEqualsReferenceAtAnyRoot(t *testing.T) {
	cfg := solver.Config{N: 15, M: 12, Decomp: solver.Grid2D, Px: 3, Py: 1, Seed: 9, ResidualEvery: 3,
		Boundary: solver.Boundary{Top: 2, Left: -1}}
	want, wantRes, err := solver.Reference(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	fields := make([][]float64, 3)
	residuals := make([]float64, 3)
	err = stepped(t, 3, cfg, 7, func(c comm.Communicator, s *solver.Solver) error {
		residuals[c.Rank()] = s.Residual()
		var err error
		fields[c.Rank()], err = s.Gather(2)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if fields[0] != nil || fields[1] != nil {
		t.Fatal("ranks other than the root got a field")
	}
	for k := range want {
		if math.Float64bits(fields[2][k]) != math.Float64bits(want[k]) {
			t.Fatalf("element %d: %v, reference %v", k, fields[2][k], want[k])
		}
	}
	for r, res := range residuals {
		if math.Abs(res-wantRes) > solver.ResidualTolerance(cfg)*wantRes {
			t.Fatalf("rank %d residual %v, reference %v", r, res, wantRes)
		}
	}
}

func TestResidualNeverGrowsAndIsNaNBeforeTheFirst(t *testing.T) {
	cfg := solver.Config{N: 30, M: 20, ResidualEvery: 5, Seed: 4}
	err := stepped(t, 2, cfg, 4, func(_ comm.Communicator, s *solver.Solver) error {
		if !math.IsNaN(s.Residual()) {
			return fmt.Errorf("residual %v before any residual step", s.Residual())
		}
		prev := math.Inf(1)
		for range 20 {
			if err := s.Step(5); err != nil {
				return err
			}
			// Δu' = A Δu with A symmetric and its spectrum in [-1, 1] for R <= 1/4.
			if r := s.Residual(); !(r <= prev) || r <= 0 {
				return fmt.Errorf("residual went from %v to %v", prev, r)
			}
			prev = s.Residual()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// noExchange drops every halo exchange, as a broken backend would.
type noExchange struct{ comm.Communicator }

func (noExchange) GroupP2P([]comm.P2P, *devmem.Stream) error { return nil }

func TestCheckFailsOnEveryRankWhenHalosAreWrong(t *testing.T) {
	comms, err := local.NewGroup(3)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range comms {
		comms[i] = noExchange{c}
	}
	c := solver.Cases(3)[0]
	err = solver.Check(comms, c)
	if err == nil || !strings.Contains(err.Error(), "differs from the reference") && !strings.Contains(err.Error(), "reference has") {
		t.Fatalf("Check with halos dropped = %v, want a field mismatch", err)
	}
	// Every rank, not only rank 0, must learn of it: each process under MPI
	// holds one rank and calls Check with it alone.
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, cm := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = solver.Check([]comm.Communicator{cm}, c) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d passed a run whose halos never moved", r)
		}
	}
}

func TestStatsCountStepsBytesAndWait(t *testing.T) {
	for _, noOverlap := range []bool{false, true} {
		cfg := solver.Config{N: 12, M: 10, Decomp: solver.Grid2D, Px: 2, Py: 2, ResidualEvery: 4, NoOverlap: noOverlap}
		stats := make([]solver.Stats, 4)
		err := stepped(t, 4, cfg, 9, func(c comm.Communicator, s *solver.Solver) error {
			if s.StencilBytes() != 2*8*12*10 {
				return fmt.Errorf("stencil bytes %d", s.StencilBytes())
			}
			stats[c.Rank()] = s.Stats()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// 10 interior rows and 8 columns: each rank owns 5×4 and sends one
		// row of 4 and one column of 5 per step.
		for r, st := range stats {
			if st.Steps != 9 || st.Residuals != 2 || st.HaloBytes != 9*(4+5)*8 {
				t.Errorf("overlap off=%v rank %d: %+v", noOverlap, r, st)
			}
			if st.Elapsed <= 0 || st.HaloWait < 0 || st.HaloWait > st.Elapsed || st.PerStep() != st.Elapsed/9 {
				t.Errorf("overlap off=%v rank %d: times %+v", noOverlap, r, st)
			}
			if share := st.WaitShare(); share < 0 || share > 1 {
				t.Errorf("wait share %v", share)
			}
		}
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	errs := run(t, 2, func(c comm.Communicator) error {
		before := c.Device().Stats()
		s, err := solver.New(c, solver.Config{N: 9, M: 9, Decomp: solver.Grid2D, Px: 1, Py: 2})
		if err != nil {
			return err
		}
		if err := s.Step(3); err != nil {
			return err
		}
		if _, err := s.Gather(0); err != nil {
			return err
		}
		if err := s.Close(); err != nil {
			return err
		}
		if after := c.Device().Stats(); after != before {
			return fmt.Errorf("device holds %+v after Close, %+v before New", after, before)
		}
		if err := s.Close(); !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("second Close: %v", err)
		}
		if err := s.Step(1); !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("Step after Close: %v", err)
		}
		if _, err := s.Gather(0); !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("Gather after Close: %v", err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestBadConfigsFailOnEveryRank(t *testing.T) {
	good := solver.Config{N: 10, M: 10}
	cases := map[string]func(*solver.Config){
		"grid too small":        func(c *solver.Config) { c.N = 2 },
		"unstable R":            func(c *solver.Config) { c.R = 0.3 },
		"negative R":            func(c *solver.Config) { c.R = -0.1 },
		"NaN R":                 func(c *solver.Config) { c.R = math.NaN() },
		"more ranks than rows":  func(c *solver.Config) { c.N = 4 },
		"Px on rows":            func(c *solver.Config) { c.Px = 3 },
		"Px×Py is not the size": func(c *solver.Config) { c.Decomp, c.Px, c.Py = solver.Grid2D, 2, 2 },
		"more ranks than cols":  func(c *solver.Config) { c.Decomp, c.Px, c.Py, c.M = solver.Grid2D, 1, 3, 4 },
		"unknown decomposition": func(c *solver.Config) { c.Decomp = 7 },
		"infinite boundary":     func(c *solver.Config) { c.Boundary.Left = math.Inf(1) },
		"unknown element type":  func(c *solver.Config) { c.DType = 2 },
	}
	for name, mutate := range cases {
		cfg := good
		mutate(&cfg)
		_, errs := solver.NewOnRanks(t, 3, func(int) solver.Config { return cfg })
		for r, err := range errs {
			if !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("%s: rank %d: %v, want ErrInvalidArgument", name, r, err)
			}
		}
	}
	if _, err := solver.New(nil, good); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("nil communicator: %v", err)
	}
	if _, _, err := solver.Reference(solver.Config{N: 1, M: 5}, 3); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("Reference of a 1×5 grid: %v", err)
	}
}

func TestRanksWithDifferentConfigsFailTogether(t *testing.T) {
	for _, tc := range []struct {
		what string
		cfg  func(rank int) solver.Config
		want error
	}{
		{"seeds that differ", func(r int) solver.Config { return solver.Config{N: 10, M: 10, Seed: uint64(r)} }, comm.ErrMismatch},
		{"float64 against float32", func(r int) solver.Config { return solver.Config{N: 10, M: 10, DType: solver.DType(r)} }, comm.ErrMismatch},
		{"one bad rank", func(r int) solver.Config {
			cfg := solver.Config{N: 10, M: 10}
			if r == 1 {
				cfg.R = 1
			}
			return cfg
		}, comm.ErrInvalidArgument},
	} {
		_, errs := solver.NewOnRanks(t, 2, tc.cfg)
		for r, err := range errs {
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: rank %d: %v, want %v", tc.what, r, err, tc.want)
			}
		}
	}
	// Overlap is a local choice: ranks may differ in it.
	errs := run(t, 2, func(c comm.Communicator) error {
		s, err := solver.New(c, solver.Config{N: 10, M: 10, NoOverlap: c.Rank() == 0})
		if err != nil {
			return err
		}
		defer s.Close()
		return s.Step(2)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestBadStepAndGatherArgumentsChangeNothing(t *testing.T) {
	errs := run(t, 2, func(c comm.Communicator) error {
		s, err := solver.New(c, solver.Config{N: 8, M: 8, ResidualEvery: 1})
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.Step(-1); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("Step(-1): %v", err)
		}
		if _, err := s.Gather(2); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("Gather(2) of 2 ranks: %v", err)
		}
		if _, err := s.Gather(-1); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("Gather(-1): %v", err)
		}
		if s.Stats().Steps != 0 || !math.IsNaN(s.Residual()) {
			return fmt.Errorf("rejected calls changed the state: %+v", s.Stats())
		}
		field, err := s.Gather(0)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			want, _, _ := solver.Reference(s.Config(), 0)
			for k := range want {
				if field[k] != want[k] {
					return fmt.Errorf("field moved after rejected calls at %d", k)
				}
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestParseDecomposition(t *testing.T) {
	for s, want := range map[string]solver.Decomposition{"rows": solver.Rows, "2d": solver.Grid2D, " 2D ": solver.Grid2D} {
		if got, err := solver.ParseDecomposition(s); err != nil || got != want {
			t.Errorf("ParseDecomposition(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := solver.ParseDecomposition("3d"); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("3d: %v", err)
	}
	if solver.Grid2D.String() != "2d" || solver.Rows.String() != "rows" {
		t.Error("Decomposition names do not parse back")
	}
}

func TestValidateJudgesAsNewDoes(t *testing.T) {
	if err := (solver.Config{N: 10, M: 10}).Validate(8); err != nil {
		t.Errorf("8 ranks on 8 interior rows: %v", err)
	}
	if err := (solver.Config{N: 10, M: 10}).Validate(9); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("9 ranks on 8 interior rows: %v", err)
	}
	if err := (solver.Config{N: 10, M: 10, Decomp: solver.Grid2D, Px: 2, Py: 3}).Validate(6); err != nil {
		t.Errorf("2×3 ranks: %v", err)
	}
	if err := (solver.Config{N: 10, M: 10, Decomp: solver.Grid2D, Px: 2, Py: 3}).Validate(4); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("2×3 ranks for a group of 4: %v", err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestParseDType(t *testing.T) {
	for s, want := range map[string]solver.DType{"float64": solver.Float64, "f64": solver.Float64, " Float32 ": solver.Float32, "f32": solver.Float32} {
		if got, err := solver.ParseDType(s); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := solver.ParseDType("float16"); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("float16: %v", err)
	}
	for _, d := range []solver.DType{solver.Float64, solver.Float32} {
		if got, err := solver.ParseDType(d.String()); err != nil || got != d {
			t.Errorf("%v does not parse back: %v, %v", d, got, err)
		}
	}
}

// A float32 run steps in float32: every value of its field is a float32,
// the field differs from float64's, and it equals the float32 reference bit
// for bit on any number of ranks; its stencil moves half the bytes.
func TestFloat32StepsInFloat32(t *testing.T) {
	cfg := solver.Config{N: 21, M: 17, Seed: 5, ResidualEvery: 3, DType: solver.Float32, Boundary: solver.Boundary{Top: 0.1, Left: 1.0 / 3}}
	want, wantRes, err := solver.Reference(cfg, 10)
	if err != nil {
		t.Fatal(err)
	}
	cfg64 := cfg
	cfg64.DType = solver.Float64
	want64, res64, _ := solver.Reference(cfg64, 10)
	differ := 0
	for k, v := range want {
		if float64(float32(v)) != v {
			t.Fatalf("reference element %d = %v is not a float32", k, v)
		}
		if v != want64[k] {
			differ++
		}
	}
	if differ < len(want)/2 || math.Abs(wantRes-res64) > 1e-5*res64 || wantRes == res64 {
		t.Fatalf("float32 and float64 references: %d of %d values differ, residuals %v and %v", differ, len(want), wantRes, res64)
	}
	for n := 1; n <= 4; n++ {
		fields := make([][]float64, n)
		err := stepped(t, n, cfg, 10, func(c comm.Communicator, s *solver.Solver) error {
			if s.StencilBytes() != 2*4*21*17 {
				return fmt.Errorf("stencil bytes %d, want %d", s.StencilBytes(), 2*4*21*17)
			}
			if r := s.Residual(); math.Abs(r-wantRes) > solver.ResidualTolerance(cfg)*wantRes {
				return fmt.Errorf("residual %v, reference %v", r, wantRes)
			}
			var err error
			fields[c.Rank()], err = s.Gather(0)
			return err
		})
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
		for k := range want {
			if math.Float64bits(fields[0][k]) != math.Float64bits(want[k]) {
				t.Fatalf("%d ranks: element %d = %v, reference %v", n, k, fields[0][k], want[k])
			}
		}
	}
}

// Steps that reduce no residual take the plain kernel: with the residual
// never reduced, or not yet, the field is still the reference's and the
// residual NaN; the k-th step then reduces it.
func TestStepsWithoutResidualKeepTheFieldAndLeaveTheResidualAlone(t *testing.T) {
	for _, dt := range []solver.DType{solver.Float64, solver.Float32} {
		for _, k := range []int{-1, 7} {
			cfg := solver.Config{N: 19, M: 23, Decomp: solver.Grid2D, ResidualEvery: k, Seed: 8, DType: dt}
			want, _, err := solver.Reference(cfg, 6)
			if err != nil {
				t.Fatal(err)
			}
			_, want7, _ := solver.Reference(cfg, 7)
			err = stepped(t, 4, cfg, 6, func(_ comm.Communicator, s *solver.Solver) error {
				if st := s.Stats(); st.Residuals != 0 || !math.IsNaN(s.Residual()) {
					return fmt.Errorf("after 6 steps: %d residuals, residual %v", st.Residuals, s.Residual())
				}
				field, err := s.Gather(0)
				if err != nil {
					return err
				}
				for i := range field {
					if math.Float64bits(field[i]) != math.Float64bits(want[i]) {
						return fmt.Errorf("element %d = %v, reference %v", i, field[i], want[i])
					}
				}
				if err := s.Step(1); err != nil {
					return err
				}
				if k < 0 {
					if !math.IsNaN(s.Residual()) || s.Stats().Residuals != 0 {
						return fmt.Errorf("k = %d: residual %v after 7 steps", k, s.Residual())
					}
					return nil
				}
				if r := s.Residual(); s.Stats().Residuals != 1 || math.Abs(r-want7) > solver.ResidualTolerance(cfg)*want7 {
					return fmt.Errorf("step 7: residual %v (%d), reference %v", r, s.Stats().Residuals, want7)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%v k=%d: %v", dt, k, err)
			}
		}
	}
}

// A Solver that New did not make (the zero value, a nil pointer) refuses the
// calls that need a field with ErrInvalidArgument and answers the others
// with zero values, where each call dereferenced a nil solver and panicked.
func TestZeroSolverRefusesInsteadOfPanicking(t *testing.T) {
	for _, s := range []*solver.Solver{new(solver.Solver), nil} {
		name := "zero"
		if s == nil {
			name = "nil"
		}
		t.Run(name, func(t *testing.T) {
			if err := s.Step(1); !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "zero Solver") {
				t.Errorf("Step = %v, want the zero Solver's ErrInvalidArgument", err)
			}
			if f, err := s.Gather(0); f != nil || !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("Gather = %v, %v, want nil and ErrInvalidArgument", f, err)
			}
			if sum, err := s.Checksum(); sum != 0 || !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("Checksum = %d, %v, want 0 and ErrInvalidArgument", sum, err)
			}
			if err := s.Close(); !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("Close = %v, want ErrInvalidArgument", err)
			}
			if cfg := s.Config(); cfg != (solver.Config{}) {
				t.Errorf("Config = %+v, want the zero Config", cfg)
			}
			if st := s.Stats(); st != (solver.Stats{}) {
				t.Errorf("Stats = %+v, want zero", st)
			}
			if b := s.StencilBytes(); b != 0 {
				t.Errorf("StencilBytes = %d, want 0", b)
			}
			if r := s.Residual(); !math.IsNaN(r) {
				t.Errorf("Residual = %v, want NaN", r)
			}
		})
	}
}

// A Step that fails because another rank's communicator closed says so and
// only so: the timing of its half-recorded step was reported beside it as an
// event never recorded, an ErrInvalidArgument the caller did not commit.
func TestStepAfterAPeerClosedIsErrClosedAlone(t *testing.T) {
	cs, err := local.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	sv := make([]*solver.Solver, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range cs {
		wg.Go(func() { sv[r], errs[r] = solver.New(cs[r], solver.Config{N: 10, M: 10}) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: New: %v", r, err)
		}
	}
	if err := cs[1].Close(); err != nil {
		t.Fatal(err)
	}
	for r := range cs {
		wg.Go(func() { errs[r] = sv[r].Step(3) })
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, comm.ErrClosed) || errors.Is(err, comm.ErrInvalidArgument) || strings.Contains(err.Error(), "never recorded") {
			t.Errorf("rank %d: Step = %v, want ErrClosed alone", r, err)
		}
		sv[r].Close()
	}
	cs[0].Close()
}
