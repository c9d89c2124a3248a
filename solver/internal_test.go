package solver

import (
	"math"
	"testing"
)

func TestDimsSplitsLikeMPIDimsCreate(t *testing.T) {
	want := map[int][2]int{1: {1, 1}, 2: {2, 1}, 3: {3, 1}, 4: {2, 2}, 6: {3, 2}, 7: {7, 1}, 8: {4, 2}, 9: {3, 3}, 12: {4, 3}, 16: {4, 4}}
	for n, w := range want {
		if px, py := dims(n); px != w[0] || py != w[1] {
			t.Errorf("dims(%d) = %d×%d, want %d×%d", n, px, py, w[0], w[1])
		}
	}
}

func TestSplitCoversEveryItemOnceAsEvenlyAsPossible(t *testing.T) {
	for n := 1; n < 40; n++ {
		for p := 1; p <= n; p++ {
			next, lo, hi := 0, n, 0
			for i := range p {
				start, count := split(n, p, i)
				if start != next {
					t.Fatalf("split(%d,%d,%d) starts at %d, want %d", n, p, i, start, next)
				}
				next += count
				lo, hi = min(lo, count), max(hi, count)
			}
			if next != n || hi-lo > 1 {
				t.Fatalf("split(%d,%d): covers %d, sizes %d..%d", n, p, next, lo, hi)
			}
		}
	}
}

func TestLayoutsTileTheInteriorAndKnowTheirNeighbours(t *testing.T) {
	cfg := Config{N: 13, M: 9, Decomp: Grid2D, Px: 3, Py: 2}
	owner := make([]int, cfg.N*cfg.M)
	for k := range owner {
		owner[k] = -1
	}
	for r := range 6 {
		l := newLayout(cfg, r)
		for i := range l.rows {
			for j := range l.cols {
				k := (l.row0+i)*cfg.M + l.col0 + j
				if owner[k] != -1 {
					t.Fatalf("cell %d owned by ranks %d and %d", k, owner[k], r)
				}
				owner[k] = r
			}
		}
		// A neighbour's block starts right after this one's.
		if l.down >= 0 && newLayout(cfg, l.down).row0 != l.row0+l.rows {
			t.Errorf("rank %d: down neighbour %d does not start below", r, l.down)
		}
		if l.right >= 0 && newLayout(cfg, l.right).col0 != l.col0+l.cols {
			t.Errorf("rank %d: right neighbour %d does not start to the right", r, l.right)
		}
		if (l.up < 0) != (l.row0 == 1) || (l.left < 0) != (l.col0 == 1) {
			t.Errorf("rank %d: neighbours %+v at the edge", r, l)
		}
	}
	for i := 1; i < cfg.N-1; i++ {
		for j := 1; j < cfg.M-1; j++ {
			if owner[i*cfg.M+j] < 0 {
				t.Fatalf("interior cell (%d,%d) has no owner", i, j)
			}
		}
	}
}

func TestInitialFieldIsDeterministicAndSeeded(t *testing.T) {
	a := Config{N: 20, M: 30, Seed: 1, Boundary: Boundary{Top: 1, Bottom: 2, Left: 3, Right: 4}}
	b := a
	b.Seed = 2
	same, sum := 0, 0.0
	for i := range a.N {
		for j := range a.M {
			v := a.initial(i, j)
			if v != a.initial(i, j) {
				t.Fatal("initial is not a function of the cell")
			}
			switch {
			case i == 0 && v != 1, i == a.N-1 && v != 2, i > 0 && i < a.N-1 && j == 0 && v != 3, i > 0 && i < a.N-1 && j == a.M-1 && v != 4:
				t.Fatalf("boundary cell (%d,%d) = %v", i, j, v)
			}
			if i > 0 && i < a.N-1 && j > 0 && j < a.M-1 {
				if v < 0 || v >= 1 || math.IsNaN(v) {
					t.Fatalf("interior (%d,%d) = %v, want [0,1)", i, j, v)
				}
				sum += v
				if v == b.initial(i, j) {
					same++
				}
			}
		}
	}
	if same > 0 {
		t.Errorf("%d interior values ignore the seed", same)
	}
	if mean := sum / float64((a.N-2)*(a.M-2)); mean < 0.4 || mean > 0.6 {
		t.Errorf("interior mean %v: values are not spread over [0,1)", mean)
	}
}

func TestJudgeFindsAFlippedBitAndAResidualOutOfTolerance(t *testing.T) {
	c := Case{Name: "x", Config: Config{N: 9, M: 7, ResidualEvery: 2}, Steps: 4}
	want, res, err := Reference(c.Config, c.Steps)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := judge(c, want, res); err != nil || v[0] != verdictOK {
		t.Fatalf("the reference judged against itself: %v %v", v, err)
	}
	field := append([]float64(nil), want...)
	field[3*7+2] = math.Float64frombits(math.Float64bits(field[3*7+2]) ^ 1)
	if v, err := judge(c, field, res); err == nil || v[0] != verdictField || v[1] != 3*7+2 {
		t.Fatalf("a flipped last bit at (3,2): %v %v", v, err)
	}
	cfg, _ := c.Config.normalized()
	if v, err := judge(c, want, res*(1+4*ResidualTolerance(cfg))); err == nil || v[0] != verdictResidual {
		t.Fatalf("a residual 4 tolerances off: %v %v", v, err)
	}
	if v, _ := judge(c, want, res*(1+ResidualTolerance(cfg)/2)); v[0] != verdictOK {
		t.Fatalf("a residual within tolerance was rejected: %v", v)
	}
	if v, _ := judge(c, want, math.NaN()); v[0] != verdictResidual {
		t.Fatal("a NaN residual passed")
	}
}
