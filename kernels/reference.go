package kernels

// The Go references: what the host device runs, and the definition the CUDA
// kernels must match. Each does the floating-point operations of its .cu
// twin in the same order.

// HeatPoint is one explicit FTCS update of a point c from its four
// neighbours with r = a·Δt/h²:
//
//	c + r*((((up+down)+left)+right) - 4*c)
//
// each operation rounded on its own to T, in that order, as heat.cu does
// when compiled with --fmad=false. The explicit conversions stop Go from
// fusing a multiply and an add, which the spec allows and arm64 does.
func HeatPoint[T Float](c, up, down, left, right, r T) T {
	sum := ((up + down) + left) + right
	lap := sum - T(4*c)
	return c + T(r*lap)
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

func heatRef[T Float](dst, src []T, nx, rowLo, rowHi, colLo, colHi int, r T) {
	for i := rowLo; i < rowHi; i++ {
		row := i * nx
		for j := colLo; j < colHi; j++ {
			k := row + j
			dst[k] = HeatPoint(src[k], src[k-nx], src[k+nx], src[k-1], src[k+1], r)
		}
	}
}

// heatNormRef is sh's norm kernel of heat.cu (heat_norm_%s_pair,
// heat_norm_%s) launched over sh.normThreads(cols) threads a row: heatRef,
// and each block's sum of (dst-src)² in the order the kernel adds them.
//
// Which thread owns a cell: along a row, thread column tc = (j - base)/w of
// the grid, with w = 2 and base = colLo&^1 for a pair kernel (thread tc
// owns columns base + 2tc and base + 2tc + 1: heat_rows_pair's j), and w = 1,
// base = colLo otherwise; that is tx = tc % blockX of block bx = tc / blockX.
// Down the rows, thread row ty of block row by owns the runs of sh.rows
// rows starting at rowLo + ((by·blockY + ty) + g·gy·blockY)·rows for
// g = 0, 1, ... (the kernel's i0 and stride). Each cell is counted once, by
// its owner, and only the cells in [colLo, colHi) (the pair kernel's w0 and
// w1).
//
// In what order: a kernel thread adds its cells run by run in order of the
// run's first row and, in a run, row by row; in a row a pair thread adds
// column j before j + 1. So it adds its cells in row-major order. The loop
// below visits every cell of the rectangle in row-major order too (block
// row by block row: a block row's cells are its own threads', and the rows
// of one block row are visited in increasing order, band after band), and
// adds each into its owner's sum: restricted to one thread, it is that
// thread's order, so each thread's sum is the kernel's bits. Each sum starts
// at +0 as s = 0.0 does, and a thread with no cell (past colHi, or the
// upper bound's surplus) stays +0. The squares are float64(v)-float64(c)
// squared, as (double)v - (double)c squared in the kernel, --fmad=false
// keeping s + e*e two roundings as here. Then blockSumRef does block_sum's
// tree over the block's threads numbered ty·blockX + tx (heat.cu's t).
func heatNormRef[T Float](sh heatShape, dst, src []T, partial []float64, nx, rowLo, rowHi, colLo, colHi int, r T) {
	rows, cols := rowHi-rowLo, colHi-colLo
	gx, gy := sh.grid(rows, sh.normThreads(cols))
	threads := sh.blockX * sh.blockY
	band := sh.blockY * sh.rows // rows a block row covers in one stride
	stride := gy * band
	base, w := colLo, 1
	if sh.pair() {
		base, w = colLo&^1, 2
	}
	sums := make([]float64, gx*threads) // thread (tx, ty) of block x at x·threads + ty·blockX + tx
	for by := range gy {
		clear(sums)
		for lo := rowLo + by*band; lo < rowHi; lo += stride {
			for i := lo; i < min(lo+band, rowHi); i++ {
				ty := (i - lo) / sh.rows
				row := i * nx
				for j := colLo; j < colHi; j++ {
					k := row + j
					v := HeatPoint(src[k], src[k-nx], src[k+nx], src[k-1], src[k+1], r)
					dst[k] = v
					d := float64(v) - float64(src[k])
					tc := (j - base) / w
					t := (tc/sh.blockX)*threads + ty*sh.blockX + tc%sh.blockX
					sums[t] = sums[t] + float64(d*d)
				}
			}
		}
		for bx := range gx {
			partial[by*gx+bx] = blockSumRef(sums[bx*threads : (bx+1)*threads])
		}
	}
}

// blockSumRef is block_sum of heat.cu: a tree within each warp of 32 (lane
// l adds lane l+16, then l+8, ..., l+1), then the warps' sums in order.
func blockSumRef(sums []float64) float64 {
	var lanes [32]float64
	total := 0.0
	for w := 0; w*32 < len(sums); w++ {
		copy(lanes[:], sums[w*32:])
		for off := 16; off > 0; off /= 2 {
			for l := range off {
				lanes[l] = lanes[l] + lanes[l+off]
			}
		}
		if w == 0 {
			total = lanes[0]
		} else {
			total = total + lanes[0]
		}
	}
	return total
}

func packRef[T Float](buf, slab []T, nx, col, rowLo, rowHi int) {
	for i := rowLo; i < rowHi; i++ {
		buf[i-rowLo] = slab[i*nx+col]
	}
}

func unpackRef[T Float](slab, buf []T, nx, col, rowLo, rowHi int) {
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

// sumThreads and sumChunk are SUM_THREADS and SUM_CHUNK of residual.cu.
const (
	sumThreads = 256
	sumChunk   = 4096
)

// sumChunksRef follows sum_chunks block by block: per thread strided sums
// of its chunk, then the pairwise tree.
func sumChunksRef(out, x []float64) {
	var acc [sumThreads]float64
	for b := range max(1, ceilDiv(len(x), sumChunk)) {
		chunk := x[b*sumChunk : min((b+1)*sumChunk, len(x))]
		for t := range acc {
			s := 0.0
			for i := t; i < len(chunk); i += sumThreads {
				s = s + chunk[i]
			}
			acc[t] = s
		}
		for half := sumThreads / 2; half > 0; half /= 2 {
			for t := 0; t < half; t++ {
				acc[t] = acc[t] + acc[t+half]
			}
		}
		out[b] = acc[0]
	}
}
