package solver

import (
	"math"
	"math/big"

	"github.com/gpucomm/gpucomm/kernels"
)

// Reference integrates cfg for steps steps on one whole grid in plain Go,
// with the arithmetic of kernels.HeatPoint in cfg's element type, and
// returns the N×M field (row major, boundary included, float32 values
// widened exactly) and the residual of the last step that reduced it (NaN
// if none did), summed in float64 in row order. Every run of the solver,
// whatever its backend, device, ranks and decomposition, must give this
// field bit for bit, and this residual within ResidualTolerance. It
// refuses, with ErrInvalidArgument, a grid whose fields would take more
// than 1 TiB of host memory (maxHostGridBytes).
func Reference(cfg Config, steps int) (field []float64, residual float64, err error) {
	cfg, err = cfg.normalized()
	if err != nil {
		return nil, 0, err
	}
	if steps < 0 {
		return nil, 0, invalid("%d steps", steps)
	}
	// Two fields in the element type to step, and the float64 one returned.
	if err := hostGridFits("Reference", cfg.N, cfg.M, 2*cfg.DType.Size()+8); err != nil {
		return nil, 0, err
	}
	if cfg.DType == Float32 {
		field, residual = reference[float32](cfg, steps)
	} else {
		field, residual = reference[float64](cfg, steps)
	}
	return field, residual, nil
}

// maxHostGridBytes is the most host memory, in bytes, that Reference, and
// Solver.Gather at its root, take for the fields of one grid: 1 TiB. A
// larger grid is refused with ErrInvalidArgument rather than left to fail
// in make (a panic, or the process killed for want of memory).
const maxHostGridBytes = 1 << 40

// hostGridFits refuses, for op, an n×m grid of perCell bytes a cell whose
// bytes pass maxHostGridBytes, computing them without overflow.
func hostGridFits(op string, n, m, perCell int) error {
	if n >= 0 && m > 0 && perCell > 0 && n <= maxHostGridBytes/perCell/m {
		return nil
	}
	bytes := new(big.Int).Mul(big.NewInt(int64(n)), big.NewInt(int64(m)))
	bytes.Mul(bytes, big.NewInt(int64(perCell)))
	return invalid("%s of a %d×%d grid: %v bytes of host memory, more than the %d allowed", op, n, m, bytes, maxHostGridBytes)
}

func reference[T kernels.Float](cfg Config, steps int) ([]float64, float64) {
	n, m, r := cfg.N, cfg.M, T(cfg.R)
	u, next := make([]T, n*m), make([]T, n*m)
	for i := range n {
		for j := range m {
			u[i*m+j] = T(cfg.initial(i, j))
		}
	}
	copy(next, u)
	residual := math.NaN()
	for s := 1; s <= steps; s++ {
		for i := 1; i < n-1; i++ {
			for j := 1; j < m-1; j++ {
				k := i*m + j
				next[k] = kernels.HeatPoint(u[k], u[k-m], u[k+m], u[k-1], u[k+1], r)
			}
		}
		if k := cfg.ResidualEvery; k > 0 && s%k == 0 {
			sum := 0.0
			for i := 1; i < n-1; i++ {
				for j := 1; j < m-1; j++ {
					d := float64(next[i*m+j]) - float64(u[i*m+j])
					sum += d * d
				}
			}
			residual = math.Sqrt(sum)
		}
		u, next = next, u
	}
	field := make([]float64, n*m)
	for k, v := range u {
		field[k] = float64(v)
	}
	return field, residual
}
