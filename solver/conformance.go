package solver

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// Case is one conformance run: a configuration and a number of steps.
type Case struct {
	Name   string
	Config Config
	Steps  int
}

// Cases lists the conformance cases for a group of size ranks: row slabs and
// every 2-D grid of ranks that size allows (and the automatic one), on grids
// whose interior does not split evenly, and on grids with one row or one
// cell per rank, each with overlap on and off, in float64, and one grid of
// each layout in float32.
func Cases(size int) []Case {
	bnd := Boundary{Top: 1, Bottom: 0.25, Left: 0.5, Right: -0.75}
	type grid struct {
		n, m, k int
	}
	var layouts [][2]int // Px, Py of the 2-D runs; 0, 0 is automatic
	for px := 1; px <= size; px++ {
		if size%px == 0 {
			layouts = append(layouts, [2]int{px, size / px})
		}
	}
	if size > 1 {
		layouts = append(layouts, [2]int{0, 0})
	}
	var cases []Case
	// Every grid in float64 with overlap on and off; the first grid of each
	// layout in float32 too, with overlap on, and for row slabs off too.
	// (Float32 changes the kernels and the element type of the messages,
	// not the layouts, so one grid a layout covers it without making the
	// MPI jobs much longer.)
	add := func(name string, g grid, cfg Config, f32 bool) {
		for _, v := range []struct {
			noOverlap bool
			dt        DType
		}{{false, Float64}, {true, Float64}, {false, Float32}, {true, Float32}} {
			if v.dt == Float32 && (!f32 || v.noOverlap && cfg.Decomp != Rows) {
				continue
			}
			cfg := cfg
			cfg.N, cfg.M, cfg.ResidualEvery, cfg.Boundary = g.n, g.m, g.k, bnd
			cfg.NoOverlap, cfg.DType = v.noOverlap, v.dt
			cfg.Seed = uint64(len(cases) + 1)
			mode := "overlap"
			if v.noOverlap {
				mode = "no-overlap"
			}
			if v.dt != Float64 {
				mode += "/" + v.dt.String()
			}
			cases = append(cases, Case{Name: fmt.Sprintf("%s/%dx%d/%s", name, g.n, g.m, mode), Config: cfg, Steps: 25})
		}
	}
	// 21 and 16 interior rows, 17 and 11 interior columns: for 2, 3 and 4
	// ranks at least one of them splits unevenly.
	uneven := []grid{{23, 19, 5}, {18, 13, 4}}
	for i, g := range append(uneven, grid{size + 2, 9, 1}) {
		add("rows", g, Config{Decomp: Rows}, i == 0)
	}
	for _, lay := range layouts {
		name := fmt.Sprintf("2d-%dx%d", lay[0], lay[1])
		if lay == [2]int{} {
			name = "2d-auto"
		}
		grids := uneven
		if lay != [2]int{} {
			grids = append(grids, grid{lay[0] + 2, lay[1] + 2, 1}) // one cell per rank
		}
		for i, g := range grids {
			add(name, g, Config{Decomp: Grid2D, Px: lay[0], Py: lay[1]}, i == 0)
		}
	}
	return cases
}

// ResidualTolerance is the relative difference allowed between a run's
// residual and Reference's. The sum of squares (in float64 for both element
// types, of the same float64 terms) is added in another order (per thread,
// per block, per launch, per rank, across ranks), and each of its
// n = (N-2)(M-2) terms may round once more, so n·ε bounds the relative
// error of the sum, and the square root halves it.
func ResidualTolerance(cfg Config) float64 { return float64((cfg.N-2)*(cfg.M-2)) * 0x1p-52 }

// Check runs c on the communicators this process holds, every rank in its
// own goroutine (in-process backends hold them all, MPI backends one), and
// gathers the field at rank 0, which compares it bit for bit with Reference
// and the residual within ResidualTolerance. Rank 0 broadcasts its verdict,
// so every rank returns an error when the run was wrong.
func Check(comms []comm.Communicator, c Case) error {
	if len(comms) == 0 {
		return invalid("conformance check without communicators")
	}
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, cm := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = checkRank(cm, c)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", comms[i].Rank(), err)
		}
	}
	return nil
}

// Verdict codes rank 0 broadcasts.
const (
	verdictOK = iota
	verdictField
	verdictResidual
	verdictFailed
)

func checkRank(cm comm.Communicator, c Case) (err error) {
	s, err := New(cm, c.Config)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	half := c.Steps / 2 // two calls, so that state carries across Step calls
	if err := s.Step(half); err != nil {
		return err
	}
	if err := s.Step(c.Steps - half); err != nil {
		return err
	}
	field, err := s.Gather(0)
	if err != nil {
		return err
	}
	st, k := s.Stats(), s.Config().ResidualEvery
	if want := c.Steps / max(k, 1) * btoi(k > 0); st.Steps != c.Steps || st.Residuals != want {
		return fmt.Errorf("solver: stats count %d steps and %d residuals, want %d and %d", st.Steps, st.Residuals, c.Steps, want)
	}
	verdict := []int64{verdictOK, 0}
	var detail error
	if cm.Rank() == 0 {
		verdict, detail = judge(c, field, s.Residual())
	}
	buf, err := devmem.AllocSlice[int64](cm.Device(), 2)
	if err != nil {
		return err
	}
	defer buf.Free()
	if err := buf.CopyFrom(verdict, nil); err != nil {
		return err
	}
	if err := comm.Broadcast(cm, buf, buf, 0, nil); err != nil {
		return err
	}
	if err := buf.CopyTo(verdict, nil); err != nil {
		return err
	}
	if detail != nil {
		return detail
	}
	switch verdict[0] {
	case verdictOK:
		return nil
	case verdictField:
		return fmt.Errorf("solver: rank 0 found the gathered field differs from the reference at element %d", verdict[1])
	case verdictResidual:
		return errors.New("solver: rank 0 found the residual out of tolerance")
	}
	return errors.New("solver: rank 0 could not check the run")
}

// judge compares rank 0's gathered field and residual with Reference.
func judge(c Case, field []float64, residual float64) ([]int64, error) {
	want, wantRes, err := Reference(c.Config, c.Steps)
	if err != nil {
		return []int64{verdictFailed, 0}, err
	}
	if len(field) != len(want) {
		return []int64{verdictField, 0}, fmt.Errorf("solver: gathered %d values, want %d", len(field), len(want))
	}
	m := c.Config.M
	for k := range want {
		if math.Float64bits(field[k]) != math.Float64bits(want[k]) {
			return []int64{verdictField, int64(k)}, fmt.Errorf("solver: field at (%d, %d) is %v (bits %#x), the one-rank reference has %v (bits %#x)",
				k/m, k%m, field[k], math.Float64bits(field[k]), want[k], math.Float64bits(want[k]))
		}
	}
	tol := ResidualTolerance(c.Config)
	if math.IsNaN(wantRes) != math.IsNaN(residual) || math.Abs(residual-wantRes) > tol*math.Abs(wantRes) {
		return []int64{verdictResidual, 0}, fmt.Errorf("solver: residual %v, the reference's %v: relative difference over %g", residual, wantRes, tol)
	}
	return []int64{verdictOK, 0}, nil
}

// Conformance runs every case of Cases on fresh communicators from
// newGroup, which returns the ranks this process holds (all of them for an
// in-process backend, one under MPI); it closes them after each case. It
// returns the first failure.
func Conformance(newGroup func() ([]comm.Communicator, error)) error {
	comms, err := newGroup()
	if err != nil {
		return err
	}
	if len(comms) == 0 {
		return invalid("newGroup returned no communicators")
	}
	for i, c := range Cases(comms[0].Size()) {
		if i > 0 {
			if comms, err = newGroup(); err != nil {
				return err
			}
		}
		err := errors.Join(Check(comms, c), closeAll(comms))
		if err != nil {
			return fmt.Errorf("solver conformance %s: %w", c.Name, err)
		}
	}
	return nil
}

func closeAll(comms []comm.Communicator) error {
	var errs []error
	for _, c := range comms {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
