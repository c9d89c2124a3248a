package solver

import (
	"math"

	"github.com/gpucomm/gpucomm/kernels"
)

// Reference integrates cfg for steps steps on one whole grid in plain Go,
// with the arithmetic of kernels.HeatPoint, and returns the N×M field (row
// major, boundary included) and the residual of the last step that reduced
// it (NaN if none did). Every run of the solver, whatever its backend,
// device, ranks and decomposition, must give this field bit for bit.
func Reference(cfg Config, steps int) (field []float64, residual float64, err error) {
	cfg, err = cfg.normalized()
	if err != nil {
		return nil, 0, err
	}
	if steps < 0 {
		return nil, 0, invalid("%d steps", steps)
	}
	n, m, r := cfg.N, cfg.M, cfg.R
	u, next := make([]float64, n*m), make([]float64, n*m)
	for i := range n {
		for j := range m {
			u[i*m+j] = cfg.initial(i, j)
		}
	}
	copy(next, u)
	residual = math.NaN()
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
					d := next[i*m+j] - u[i*m+j]
					sum += d * d
				}
			}
			residual = math.Sqrt(sum)
		}
		u, next = next, u
	}
	return u, residual, nil
}
