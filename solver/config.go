package solver

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"github.com/gpucomm/gpucomm/comm"
)

// Decomposition says how the grid is split among ranks.
type Decomposition int

const (
	// Rows gives each rank a slab of whole rows; halos are rows, contiguous
	// in memory. It is the default.
	Rows Decomposition = iota
	// Grid2D gives each rank a block of a Px × Py grid of ranks; column
	// halos are packed into contiguous buffers before they travel.
	Grid2D
)

func (d Decomposition) String() string {
	switch d {
	case Rows:
		return "rows"
	case Grid2D:
		return "2d"
	}
	return fmt.Sprintf("Decomposition(%d)", int(d))
}

// ParseDecomposition reads "rows" or "2d".
func ParseDecomposition(s string) (Decomposition, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "rows", "row", "1d":
		return Rows, nil
	case "2d", "grid", "cart":
		return Grid2D, nil
	}
	return 0, fmt.Errorf("solver: decomposition %q: want rows or 2d: %w", s, comm.ErrInvalidArgument)
}

// DType is the element type of the field.
type DType int

const (
	// Float64 steps the field in double precision. It is the default.
	Float64 DType = iota
	// Float32 steps the field in single precision: half the bytes a step,
	// each operation rounded to float32. The residual is still summed in
	// float64.
	Float32
)

func (d DType) String() string {
	switch d {
	case Float64:
		return "float64"
	case Float32:
		return "float32"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size is the bytes of one element: 8 or 4.
func (d DType) Size() int {
	if d == Float32 {
		return 4
	}
	return 8
}

// ParseDType reads "float64" or "float32" (or "f64", "double", "f32",
// "float", "single").
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "float64", "f64", "double", "fp64":
		return Float64, nil
	case "float32", "f32", "float", "single", "fp32":
		return Float32, nil
	}
	return 0, fmt.Errorf("solver: element type %q: want float64 or float32: %w", s, comm.ErrInvalidArgument)
}

// Boundary holds the fixed values of the grid's four edges. The top and
// bottom rows include the corners, which no step reads.
type Boundary struct{ Top, Bottom, Left, Right float64 }

// Config describes one run. Every rank must pass the same Config.
type Config struct {
	// N and M are the grid's rows and columns, boundary included; at least
	// 3 each.
	N, M int
	// R is a·Δt/h², the FTCS number; 0 means DefaultR. Steps are stable for
	// R in (0, 0.25].
	R float64
	// Decomp chooses row slabs (the default) or a 2-D grid of ranks.
	Decomp Decomposition
	// Px and Py shape the 2-D grid of ranks: Px along the rows (splitting
	// N), Py along the columns (splitting M). 0 and 0 choose as
	// MPI_Dims_create does. Only for Grid2D.
	Px, Py int
	// NoOverlap runs the exchange and then the whole update on one stream,
	// instead of overlapping the interior update with the exchange.
	NoOverlap bool
	// ResidualEvery is k: the residual is reduced after every k-th step.
	// 0 means DefaultResidualEvery; a negative value never.
	ResidualEvery int
	// Seed makes the random interior of the initial field.
	Seed uint64
	// Boundary holds the fixed edge values.
	Boundary Boundary
	// DType is the field's element type; the zero value is Float64. With
	// Float32 the initial values and the boundary are rounded to float32.
	DType DType
}

// Defaults for zero Config fields.
const (
	DefaultR             = 0.2
	DefaultResidualEvery = 10
)

// normalized fills zero fields and checks what does not depend on the
// number of ranks.
func (c Config) normalized() (Config, error) {
	if c.R == 0 {
		c.R = DefaultR
	}
	if c.ResidualEvery == 0 {
		c.ResidualEvery = DefaultResidualEvery
	}
	switch {
	case c.N < 3 || c.M < 3:
		return c, invalid("grid %d×%d: want at least 3×3 (one interior point inside the boundary)", c.N, c.M)
	case c.N > math.MaxInt32 || c.M > math.MaxInt32 || c.N > math.MaxInt/c.M/16:
		return c, invalid("grid %d×%d is too large", c.N, c.M)
	case !(c.R > 0 && c.R <= 0.25):
		return c, invalid("R = %v: explicit steps are stable only for 0 < R <= 0.25", c.R)
	case c.Decomp != Rows && c.Decomp != Grid2D:
		return c, invalid("unknown decomposition %v", c.Decomp)
	case c.DType != Float64 && c.DType != Float32:
		return c, invalid("unknown element type %v", c.DType)
	case c.Decomp == Rows && (c.Px != 0 || c.Py != 0):
		return c, invalid("Px and Py (%d, %d) shape the 2-D decomposition only", c.Px, c.Py)
	}
	for _, v := range []float64{c.Boundary.Top, c.Boundary.Bottom, c.Boundary.Left, c.Boundary.Right} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return c, invalid("boundary value %v is not finite", v)
		}
	}
	return c, nil
}

// Validate reports whether c can run on a group of size ranks, as New would
// judge it, without touching a device.
func (c Config) Validate(size int) error {
	_, err := c.forRanks(size)
	return err
}

// forRanks is normalized plus the grid of ranks for a group of size.
func (c Config) forRanks(size int) (Config, error) {
	c, err := c.normalized()
	if err != nil {
		return c, err
	}
	switch {
	case size < 1:
		return c, invalid("a group of %d ranks", size)
	case c.Decomp == Rows:
		c.Px, c.Py = size, 1
	case c.Px == 0 && c.Py == 0:
		c.Px, c.Py = dims(size)
	case c.Px < 1 || c.Py < 1 || c.Px*c.Py != size:
		return c, invalid("a %d × %d grid of ranks for %d ranks", c.Px, c.Py, size)
	}
	if c.Px > c.N-2 || c.Py > c.M-2 {
		return c, invalid("%d × %d ranks for %d × %d interior points: every rank needs at least one", c.Px, c.Py, c.N-2, c.M-2)
	}
	return c, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("solver: %s: %w", fmt.Sprintf(format, args...), comm.ErrInvalidArgument)
}

// dims splits size into px × py as evenly as possible with px >= py, as
// MPI_Dims_create does for two dimensions.
func dims(size int) (px, py int) {
	py = 1
	for d := 1; d*d <= size; d++ {
		if size%d == 0 {
			py = d
		}
	}
	return size / py, py
}

// hash identifies what every rank must agree on; overlap may differ.
func (c Config) hash() int64 {
	h := fnv.New64a()
	for _, v := range []uint64{uint64(c.N), uint64(c.M), math.Float64bits(c.R), uint64(c.Decomp), uint64(c.Px), uint64(c.Py),
		uint64(c.ResidualEvery), c.Seed, math.Float64bits(c.Boundary.Top), math.Float64bits(c.Boundary.Bottom),
		math.Float64bits(c.Boundary.Left), math.Float64bits(c.Boundary.Right), uint64(c.DType)} {
		binary.Write(h, binary.LittleEndian, v)
	}
	return int64(h.Sum64() >> 2) // room to negate it in the agreement check
}

// split gives part i of n items split p ways as evenly as possible: the
// first n%p parts get one more.
func split(n, p, i int) (lo, count int) {
	q, r := n/p, n%p
	return i*q + min(i, r), q + btoi(i < r)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// layout is one rank's block. Local cell (i, j) of its slab is global cell
// (row0+i-1, col0+j-1); the slab has one halo row or column on each side.
type layout struct {
	rows, cols            int // interior cells this rank owns
	row0, col0            int // global index of local (1, 1)
	up, down, left, right int // neighbour ranks, -1 at the grid's edge
}

func newLayout(c Config, rank int) layout {
	pr, pc := rank/c.Py, rank%c.Py
	rlo, rows := split(c.N-2, c.Px, pr)
	clo, cols := split(c.M-2, c.Py, pc)
	l := layout{rows: rows, cols: cols, row0: 1 + rlo, col0: 1 + clo, up: -1, down: -1, left: -1, right: -1}
	if pr > 0 {
		l.up = rank - c.Py
	}
	if pr < c.Px-1 {
		l.down = rank + c.Py
	}
	if pc > 0 {
		l.left = rank - 1
	}
	if pc < c.Py-1 {
		l.right = rank + 1
	}
	return l
}

// nx is the slab's row length, halo columns included.
func (l layout) nx() int { return l.cols + 2 }

// initial is the starting value of global cell (i, j): the boundary on the
// edges, inside a value in [0, 1) that depends only on the seed and the
// cell, so that every rank builds its block on its own.
func (c Config) initial(i, j int) float64 {
	switch {
	case i == 0:
		return c.Boundary.Top
	case i == c.N-1:
		return c.Boundary.Bottom
	case j == 0:
		return c.Boundary.Left
	case j == c.M-1:
		return c.Boundary.Right
	}
	x := c.Seed*0x9e3779b97f4a7c15 ^ (uint64(i)*uint64(c.M) + uint64(j))
	// splitmix64's finaliser: every input bit reaches every output bit.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) * 0x1p-53
}
