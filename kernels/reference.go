package kernels

// The Go references: what the host device runs, and the definition the CUDA
// kernels must match. Each does the floating-point operations of its .cu
// twin in the same order.

// HeatPoint is one explicit FTCS update of a point c from its four
// neighbours with r = a·Δt/h²:
//
//	c + r*((((up+down)+left)+right) - 4*c)
//
// each operation rounded on its own, in that order, as heat.cu does when
// compiled with --fmad=false. The explicit conversions stop Go from fusing a
// multiply and an add, which the spec allows and arm64 does.
func HeatPoint(c, up, down, left, right, r float64) float64 {
	sum := ((up + down) + left) + right
	lap := sum - float64(4*c)
	return c + float64(r*lap)
}

func fillRef[T Float](x []T, v T) {
	for i := range x {
		x[i] = v
	}
}

func scaleRef[T Float](x []T, a T) {
	for i := range x {
		x[i] = x[i] * a
	}
}

func heatRef(dst, src []float64, nx, rowLo, rowHi, colLo, colHi int, r float64) {
	for i := rowLo; i < rowHi; i++ {
		row := i * nx
		for j := colLo; j < colHi; j++ {
			k := row + j
			dst[k] = HeatPoint(src[k], src[k-nx], src[k+nx], src[k-1], src[k+1], r)
		}
	}
}

func packRef(buf, slab []float64, nx, col, rowLo, rowHi int) {
	for i := rowLo; i < rowHi; i++ {
		buf[i-rowLo] = slab[i*nx+col]
	}
}

func unpackRef(slab, buf []float64, nx, col, rowLo, rowHi int) {
	for i := rowLo; i < rowHi; i++ {
		slab[i*nx+col] = buf[i-rowLo]
	}
}

// residualThreads is RESIDUAL_THREADS of residual.cu: the block size whose
// summation order the reference reproduces.
const residualThreads = 256

// residualRef follows residual_rows thread by thread: strided sums per
// thread, then the pairwise tree, so host and GPU partials agree bit for bit.
func residualRef(partial, a, b []float64, nx, rowLo, rowHi, colLo, colHi int) {
	var acc [residualThreads]float64
	for i := rowLo; i < rowHi; i++ {
		row := i * nx
		for t := range acc {
			s := 0.0
			for j := colLo + t; j < colHi; j += residualThreads {
				d := a[row+j] - b[row+j]
				s = s + float64(d*d)
			}
			acc[t] = s
		}
		for half := residualThreads / 2; half > 0; half /= 2 {
			for t := 0; t < half; t++ {
				acc[t] = acc[t] + acc[t+half]
			}
		}
		partial[i-rowLo] = acc[0]
	}
}

func sumRef(out, x []float64) {
	s := 0.0
	for _, v := range x {
		s = s + v
	}
	out[0] = s
}
