package kernels

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpucomm/gpucomm/devmem"
)

// Float is the element type of Fill, Scale and the heat kernels.
type Float interface{ float32 | float64 }

// Block shapes of the launches; residualThreads is fixed by residual.cu.
const (
	flatThreads = 256     // fill, scale, pack, unpack
	maxFlatGrid = 1 << 20 // grid-stride loops cover the rest
	heatBlockX  = 128     // heatDefault: four warps along a row, two columns a thread
	heatBlockY  = 1
	heatRows    = 4     // rows each thread walks (heat_rows_pair<4, ...> of heat.cu)
	maxGridY    = 65535 // CUDA's limit on gridDim.y
)

// Fill sets every element of x to v, in stream order on s.
func Fill[T Float](s *devmem.Stream, x devmem.Slice[T], v T) error {
	return run(fillPlan(s, x, v))
}

func fillPlan[T Float](s *devmem.Stream, x devmem.Slice[T], v T) (plan, error) {
	dev, err := target("Fill", s, arg{"x", x.Buffer(), 0})
	if err != nil || x.Len() == 0 {
		return plan{}, err
	}
	n := x.Len()
	return plan{dev, s, func() { fillRef(view[T](x.Buffer()), v) }, launch{
		file: "fill.cu", kernel: "fill_" + suffix[T](),
		grid: flatGrid(n), block: [3]uint32{flatThreads, 1, 1},
		args: []any{x.Buffer(), int64(n), v},
	}}, nil
}

// Scale multiplies every element of x by a, in stream order on s.
func Scale[T Float](s *devmem.Stream, x devmem.Slice[T], a T) error {
	return run(scalePlan(s, x, a))
}

func scalePlan[T Float](s *devmem.Stream, x devmem.Slice[T], a T) (plan, error) {
	dev, err := target("Scale", s, arg{"x", x.Buffer(), 0})
	if err != nil || x.Len() == 0 {
		return plan{}, err
	}
	n := x.Len()
	return plan{dev, s, func() { scaleRef(view[T](x.Buffer()), a) }, launch{
		file: "scale.cu", kernel: "scale_" + suffix[T](),
		grid: flatGrid(n), block: [3]uint32{flatThreads, 1, 1},
		args: []any{x.Buffer(), int64(n), a},
	}}, nil
}

// HeatStep writes one FTCS step of src into dst for rows [rowLo, rowHi) and
// every column but the first and last of a row-major slab nx wide: those
// columns are fixed boundary values or halos. Row rowLo-1 and row rowHi of
// src are read, so 1 <= rowLo and rowHi < rows of the slab. T is float32 or
// float64; every operation is done in T, as HeatPoint[T] does.
func HeatStep[T Float](s *devmem.Stream, dst, src devmem.Slice[T], nx, rowLo, rowHi int, r T) error {
	return HeatStepRect(s, dst, src, nx, rowLo, rowHi, 1, nx-1, r)
}

// HeatStepRect is HeatStep over the columns [colLo, colHi) only, with
// 1 <= colLo and colHi <= nx-1; the solver uses it to update the cells next
// to a column halo after the halo arrives.
func HeatStepRect[T Float](s *devmem.Stream, dst, src devmem.Slice[T], nx, rowLo, rowHi, colLo, colHi int, r T) error {
	return run(heatPlan(s, dst, src, nx, rowLo, rowHi, colLo, colHi, r))
}

// HeatStepNorm is HeatStepRect that also sums, in float64, (dst-src)² over
// the cells it writes, in the same pass: one sum for each block of the
// launch, HeatBlocks(rowHi-rowLo, colHi-colLo) of them, into partial[0:]
// (block (x, y) at y·gridX + x). The order of the additions is fixed (see
// heat.cu), so the partials are the same bits on every run and on the host
// device. SumBlocks adds them up on the device. Partials are sums of
// squares, never negative; a block that owns no cell writes +0, which adds
// nothing to the sum of the others, bit for bit.
func HeatStepNorm[T Float](s *devmem.Stream, dst, src devmem.Slice[T], partial devmem.Slice[float64], nx, rowLo, rowHi, colLo, colHi int, r T) error {
	return run(heatPlanShape(heatDefault, s, dst, src, &partial, nx, rowLo, rowHi, colLo, colHi, r))
}

// HeatBlocks is the number of blocks, and so of partial sums, of a
// HeatStepNorm over rows × cols cells, whatever its first column; 0 when
// either is 0. It is exact: a thread of the norm kernel owns two columns
// from the even one at or before the first, so that a row takes cols/2 + 1
// threads when the first column is odd or cols is odd, and (cols+1)/2 =
// cols/2 when both are even; the norm is launched over cols/2 + 1 threads
// a row in every case, so that the number of blocks depends on cols only.
// In the one case where that adds a block along a row (cols/2 a multiple
// of the block's width, both even), the added block owns no cell and
// writes +0.
func HeatBlocks(rows, cols int) int {
	gx, gy := heatDefault.grid(rows, heatDefault.normThreads(cols))
	return gx * gy
}

func heatPlan[T Float](s *devmem.Stream, dst, src devmem.Slice[T], nx, rowLo, rowHi, colLo, colHi int, r T) (plan, error) {
	return heatPlanShape(heatDefault, s, dst, src, nil, nx, rowLo, rowHi, colLo, colHi, r)
}

// heatShape is one heat kernel and its launch shape. kernel is the name of
// the step, norm of the same step with partial sums ("" for none); a name
// that holds %s steps either type (f32 or f64 in its place), one that does
// not steps float64 only.
type heatShape struct {
	kernel               string
	rows, blockY, blockX int
	norm                 string
}

// grid is the launch grid over rows × threads (a row's threads): blocks
// along the row, and along the rows up to CUDA's limit, past which blocks
// stride.
func (sh heatShape) grid(rows, threads int) (gx, gy int) {
	if rows <= 0 || threads <= 0 {
		return 0, 0
	}
	return ceilDiv(threads, sh.blockX), min(ceilDiv(rows, sh.blockY*sh.rows), maxGridY)
}

// heatDefault is the heat kernel the solver uses; heatShapes are the ones
// measured against it, heatDefault first and the default before it second.
// heatDefault is the pair kernel, two columns a thread, four rows, blocks
// of 128×1: on an H200 (BenchmarkHeatStepShapesAgainstDeviceCopy and
// BenchmarkHeatKernelsAgainstDeviceCopy, 16384² and 20480², 2026-12-04)
// its step reaches 0.905-0.909 of the device copy in float32 and 0.92 in
// float64, the best of every shape in both types, where the one-column
// step of blocks of 64×2 (heat_step_%s, the default before) reaches 0.83
// in float32 and 0.90 in float64, and its fused residual step (heat_norm_%s)
// 0.55 in float32 and 0.81 in float64. block_sum wants whole warps: 128×1
// is four.
var (
	heatDefault = heatShape{"heat_step_%s_pair", heatRows, heatBlockY, heatBlockX, "heat_norm_%s_pair"}
	heatShapes  = []heatShape{heatDefault, {"heat_step_%s", 4, 2, 64, "heat_norm_%s"},
		{"heat_step_f64", 4, 4, 32, ""}, {"heat_step_plain", 4, 4, 32, ""},
		{"heat_step_r6", 6, 2, 64, ""}, {"heat_step_r2", 2, 8, 64, ""}, {"heat_step_r8", 8, 2, 64, ""},
		// either type: the one-column kernel in other blocks, and more rows a thread
		{"heat_step_%s", 4, 1, 128, ""}, {"heat_step_%s", 4, 2, 128, ""}, {"heat_step_%s", 4, 4, 64, ""},
		{"heat_step_%s", 4, 1, 256, ""}, {"heat_step_%s_r8x", 8, 2, 64, ""}, {"heat_step_%s_r8x", 8, 1, 128, ""},
		{"heat_step_%s_r16x", 16, 1, 128, ""},
		// two columns a thread, in one 8- or 16-byte load, in other blocks
		{"heat_step_%s_pair", 4, 2, 64, ""}, {"heat_step_%s_pair", 4, 4, 32, ""},
		{"heat_step_%s_pair8", 8, 2, 64, ""}}
)

// pair is whether the shape's kernels own two columns a thread.
func (sh heatShape) pair() bool { return strings.Contains(sh.kernel, "_pair") }

// threadsX is how many threads along a row cover columns [colLo, colHi): one
// a column, or for a _pair kernel one a pair of columns from the even one at
// or before colLo (heat_rows_pair of heat.cu).
func (sh heatShape) threadsX(colLo, colHi int) int {
	if colHi <= colLo {
		return 0
	}
	if sh.pair() {
		return (colHi - colLo&^1 + 1) / 2
	}
	return colHi - colLo
}

// normThreads is how many threads along a row a launch with partial sums
// covers for cols columns: threadsX's most over the first column's parity,
// cols/2 + 1 for a pair kernel, so that the number of partials depends on
// cols only (HeatBlocks). Threads past the last column add 0.
func (sh heatShape) normThreads(cols int) int {
	if cols <= 0 {
		return 0
	}
	if sh.pair() {
		return cols/2 + 1
	}
	return cols
}

// both is whether the shape steps float32 as well as float64.
func (sh heatShape) both() bool { return strings.Contains(sh.kernel, "%s") }

func heatPlanShape[T Float](sh heatShape, s *devmem.Stream, dst, src devmem.Slice[T], partial *devmem.Slice[float64], nx, rowLo, rowHi, colLo, colHi int, r T) (plan, error) {
	op := "HeatStep"
	if partial != nil {
		op = "HeatStepNorm"
	}
	if nx < 3 || nx > math.MaxInt32 {
		return plan{}, invalid(op, "slab width %d: want 3 to %d columns", nx, math.MaxInt32)
	}
	rows := min(dst.Len(), src.Len()) / nx
	if rowLo < 1 || rowHi < rowLo || rowHi > rows-1 || rowHi > math.MaxInt32 {
		return plan{}, invalid(op, "rows [%d,%d) of a %d-row slab: want 1 <= lo <= hi <= %d", rowLo, rowHi, rows, rows-1)
	}
	if colLo < 1 || colHi < colLo || colHi > nx-1 {
		return plan{}, invalid(op, "columns [%d,%d) of a %d-column slab: want 1 <= lo <= hi <= %d", colLo, colHi, nx, nx-1)
	}
	if rf := float64(r); math.IsNaN(rf) || math.IsInf(rf, 0) {
		return plan{}, invalid(op, "r = %v is not finite", r)
	}
	kernel := sh.kernel
	if partial != nil {
		kernel = sh.norm
	}
	switch {
	case kernel == "":
		return plan{}, invalid(op, "kernel %s has no variant with partial sums", sh.kernel)
	case strings.Contains(kernel, "%s"):
		kernel = fmt.Sprintf(kernel, suffix[T]())
	case suffix[T]() != "f64":
		return plan{}, invalid(op, "kernel %s steps float64 only", kernel)
	}
	args := []arg{{"dst", dst.Buffer(), 0}, {"src", src.Buffer(), 0}}
	threads := sh.threadsX(colLo, colHi)
	if partial != nil {
		threads = sh.normThreads(colHi - colLo)
	}
	gx, gy := sh.grid(rowHi-rowLo, threads)
	if partial != nil {
		if partial.Len() < gx*gy {
			return plan{}, invalid(op, "%d partial sums for the %d blocks of %d×%d cells", partial.Len(), gx*gy, rowHi-rowLo, colHi-colLo)
		}
		if gx*gy > 0 {
			args = append(args, arg{"partial", partial.Buffer(), 0})
		}
	}
	dev, err := target(op, s, args...)
	if err != nil {
		return plan{}, err
	}
	if dst.Buffer().Overlaps(src.Buffer()) {
		return plan{}, invalid(op, "dst and src overlap; a step reads src's neighbours while writing dst")
	}
	if partial != nil && (partial.Buffer().Overlaps(dst.Buffer()) || partial.Buffer().Overlaps(src.Buffer())) {
		return plan{}, invalid(op, "partial overlaps the field")
	}
	if gx*gy == 0 {
		return plan{}, nil
	}
	d, sb := dst.Buffer(), src.Buffer()
	l := launch{
		file: "heat.cu", kernel: kernel,
		grid:  [3]uint32{uint32(gx), uint32(gy), 1},
		block: [3]uint32{uint32(sh.blockX), uint32(sh.blockY), 1},
		args:  []any{d, sb, int64(nx), int32(rowLo), int32(rowHi), int32(colLo), int32(colHi), r},
	}
	host := func() { heatRef(view[T](d), view[T](sb), nx, rowLo, rowHi, colLo, colHi, r) }
	if partial != nil {
		pb := partial.Buffer()
		l.args = append(l.args, pb)
		host = func() { heatNormRef(sh, view[T](d), view[T](sb), view[float64](pb), nx, rowLo, rowHi, colLo, colHi, r) }
	}
	return plan{dev, s, host, l}, nil
}

// PackColumn copies column col of rows [rowLo, rowHi) of a row-major slab nx
// wide into buf[0 : rowHi-rowLo], so that a strided column travels as one
// contiguous message.
func PackColumn[T Float](s *devmem.Stream, buf, slab devmem.Slice[T], nx, col, rowLo, rowHi int) error {
	return run(columnPlan("PackColumn", s, buf, slab, nx, col, rowLo, rowHi, true))
}

// UnpackColumn copies buf[0 : rowHi-rowLo] into column col of rows
// [rowLo, rowHi) of a row-major slab nx wide: PackColumn's inverse.
func UnpackColumn[T Float](s *devmem.Stream, slab, buf devmem.Slice[T], nx, col, rowLo, rowHi int) error {
	return run(columnPlan("UnpackColumn", s, buf, slab, nx, col, rowLo, rowHi, false))
}

func columnPlan[T Float](op string, s *devmem.Stream, buf, slab devmem.Slice[T], nx, col, rowLo, rowHi int, pack bool) (plan, error) {
	if nx < 1 || nx > math.MaxInt32 {
		return plan{}, invalid(op, "slab width %d: want 1 to %d columns", nx, math.MaxInt32)
	}
	if col < 0 || col >= nx {
		return plan{}, invalid(op, "column %d of a %d-column slab", col, nx)
	}
	if rowLo < 0 || rowHi < rowLo || rowHi > math.MaxInt32 || (rowHi > rowLo && rowHi-1 > (slab.Len()-1-col)/nx) || (rowHi > rowLo && slab.Len() <= col) {
		return plan{}, invalid(op, "rows [%d,%d) of a slab of %d elements, %d wide", rowLo, rowHi, slab.Len(), nx)
	}
	if buf.Len() < rowHi-rowLo {
		return plan{}, invalid(op, "buffer of %d elements for %d rows", buf.Len(), rowHi-rowLo)
	}
	dev, err := target(op, s, arg{"buf", buf.Buffer(), 0}, arg{"slab", slab.Buffer(), 0})
	if err != nil {
		return plan{}, err
	}
	if buf.Buffer().Overlaps(slab.Buffer()) {
		return plan{}, invalid(op, "buffer and slab overlap")
	}
	rows := rowHi - rowLo
	if rows == 0 {
		return plan{}, nil
	}
	b, sl := buf.Buffer(), slab.Buffer()
	l := launch{
		grid: [3]uint32{uint32(min(ceilDiv(rows, flatThreads), maxFlatGrid)), 1, 1}, block: [3]uint32{flatThreads, 1, 1},
		file: "halo.cu", kernel: "pack_column_" + suffix[T](),
		args: []any{b, sl, int64(nx), int32(col), int32(rowLo), int32(rows)},
	}
	host := func() { packRef(view[T](b), view[T](sl), nx, col, rowLo, rowHi) }
	if !pack {
		l.kernel = "unpack_column_" + suffix[T]()
		l.args = []any{sl, b, int64(nx), int32(col), int32(rowLo), int32(rows)}
		host = func() { unpackRef(view[T](sl), view[T](b), nx, col, rowLo, rowHi) }
	}
	return plan{dev, s, host, l}, nil
}

// ResidualRows writes, for each row i in [rowLo, rowHi) of two row-major
// slabs nx wide, the sum over columns [colLo, colHi) of (a-b)² into
// partial[i-rowLo]. The order of the additions is fixed (see residual.cu),
// so host and GPU give the same bits.
func ResidualRows(s *devmem.Stream, partial, a, b devmem.Slice[float64], nx, rowLo, rowHi, colLo, colHi int) error {
	return run(residualPlan(s, partial, a, b, nx, rowLo, rowHi, colLo, colHi))
}

func residualPlan(s *devmem.Stream, partial, a, b devmem.Slice[float64], nx, rowLo, rowHi, colLo, colHi int) (plan, error) {
	const op = "ResidualRows"
	if nx < 1 || nx > math.MaxInt32 {
		return plan{}, invalid(op, "slab width %d: want 1 to %d columns", nx, math.MaxInt32)
	}
	if colLo < 0 || colHi < colLo || colHi > nx {
		return plan{}, invalid(op, "columns [%d,%d) of a %d-column slab", colLo, colHi, nx)
	}
	rows := min(a.Len(), b.Len()) / nx
	if rowLo < 0 || rowHi < rowLo || rowHi > rows || rowHi-rowLo > math.MaxInt32 {
		return plan{}, invalid(op, "rows [%d,%d) of a %d-row slab", rowLo, rowHi, rows)
	}
	if partial.Len() < rowHi-rowLo {
		return plan{}, invalid(op, "%d partial sums for %d rows", partial.Len(), rowHi-rowLo)
	}
	dev, err := target(op, s, arg{"partial", partial.Buffer(), 0}, arg{"a", a.Buffer(), 0}, arg{"b", b.Buffer(), 0})
	if err != nil {
		return plan{}, err
	}
	if partial.Buffer().Overlaps(a.Buffer()) || partial.Buffer().Overlaps(b.Buffer()) {
		return plan{}, invalid(op, "partial overlaps an input")
	}
	if rowLo == rowHi {
		return plan{}, nil
	}
	p, ab, bb := partial.Buffer(), a.Buffer(), b.Buffer()
	return plan{dev, s, func() {
		residualRef(view[float64](p), view[float64](ab), view[float64](bb), nx, rowLo, rowHi, colLo, colHi)
	}, launch{
		file: "residual.cu", kernel: "residual_rows",
		grid: [3]uint32{uint32(rowHi - rowLo), 1, 1}, block: [3]uint32{residualThreads, 1, 1},
		args: []any{p, ab, bb, int64(nx), int32(rowLo), int32(colLo), int32(colHi)},
	}}, nil
}

// SumInOrder writes x[0]+x[1]+...+x[n-1], added left to right, into out[0]:
// a deterministic final stage for ResidualRows' partial sums that stays on
// the device.
func SumInOrder(s *devmem.Stream, out, x devmem.Slice[float64]) error {
	return run(sumPlan(s, out, x))
}

func sumPlan(s *devmem.Stream, out, x devmem.Slice[float64]) (plan, error) {
	const op = "SumInOrder"
	if out.Len() < 1 {
		return plan{}, invalid(op, "output of %d elements: want 1", out.Len())
	}
	if x.Len() > math.MaxInt32 {
		return plan{}, invalid(op, "%d elements: at most %d", x.Len(), math.MaxInt32)
	}
	dev, err := target(op, s, arg{"out", out.Buffer(), 0}, arg{"x", x.Buffer(), 0})
	if err != nil {
		return plan{}, err
	}
	if out.Buffer().Overlaps(x.Buffer()) {
		return plan{}, invalid(op, "output overlaps the input")
	}
	o, xb := out.Buffer(), x.Buffer()
	return plan{dev, s, func() { sumRef(view[float64](o), view[float64](xb)) }, launch{
		file: "residual.cu", kernel: "sum_in_order",
		grid: [3]uint32{1, 1, 1}, block: [3]uint32{1, 1, 1},
		args: []any{o, xb, int32(x.Len())},
	}}, nil
}

// SumScratch is the number of float64 of scratch SumBlocks needs to add n
// values: the sums of each pass but the last.
func SumScratch(n int) int {
	total := 0
	for n > sumChunk {
		n = ceilDiv(n, sumChunk)
		total += n
	}
	return total
}

// SumBlocks writes the sum of x into out[0], on the device, in a fixed
// order: blocks add chunks of sumChunk values each (see sum_chunks in
// residual.cu) into scratch, and again, until one value is left. scratch
// holds at least SumScratch(x.Len()) values; the sums of the passes are left
// there. It is how the solver adds HeatStepNorm's partial sums.
func SumBlocks(s *devmem.Stream, out, x, scratch devmem.Slice[float64]) error {
	plans, err := sumBlocksPlans(s, out, x, scratch)
	if err != nil {
		return err
	}
	for _, p := range plans {
		if err := run(p, nil); err != nil {
			return err
		}
	}
	return nil
}

func sumBlocksPlans(s *devmem.Stream, out, x, scratch devmem.Slice[float64]) ([]plan, error) {
	const op = "SumBlocks"
	n, need := x.Len(), SumScratch(x.Len())
	if out.Len() < 1 {
		return nil, invalid(op, "output of %d elements: want 1", out.Len())
	}
	if scratch.Len() < need {
		return nil, invalid(op, "scratch of %d elements for %d values: want SumScratch = %d", scratch.Len(), n, need)
	}
	args := []arg{{"out", out.Buffer(), 0}, {"x", x.Buffer(), 0}}
	if need > 0 {
		args = append(args, arg{"scratch", scratch.Buffer(), 0})
	}
	dev, err := target(op, s, args...)
	if err != nil {
		return nil, err
	}
	used, _ := scratch.Sub(0, need)
	if out.Buffer().Overlaps(x.Buffer()) || out.Buffer().Overlaps(used.Buffer()) || x.Buffer().Overlaps(used.Buffer()) {
		return nil, invalid(op, "output, input and scratch overlap")
	}
	var plans []plan
	src, off := x, 0
	for {
		m := max(1, ceilDiv(n, sumChunk))
		dst, _ := out.Sub(0, 1)
		if m > 1 {
			dst, _ = scratch.Sub(off, off+m)
			off += m
		}
		plans = append(plans, chunkPlan(dev, s, dst, src, n))
		if m == 1 {
			return plans, nil
		}
		src, n = dst, m
	}
}

// chunkPlan is one pass of SumBlocks: dst[b] is the sum of chunk b of the n
// values of src.
func chunkPlan(dev *devmem.Device, s *devmem.Stream, dst, src devmem.Slice[float64], n int) plan {
	d, sb := dst.Buffer(), src.Buffer()
	return plan{dev, s, func() { sumChunksRef(view[float64](d), view[float64](sb)[:n]) }, launch{
		file: "residual.cu", kernel: "sum_chunks",
		grid: [3]uint32{uint32(max(1, ceilDiv(n, sumChunk))), 1, 1}, block: [3]uint32{sumThreads, 1, 1},
		args: []any{d, sb, int64(n)},
	}}
}

// launch is one kernel launch on a CUDA device.
type launch struct {
	file, kernel string
	grid, block  [3]uint32
	shared       int
	args         []any
}

// plan is a checked kernel call: the device, the Go reference for a host
// device and the launch for a CUDA device. A zero plan has nothing to do.
type plan struct {
	dev    *devmem.Device
	stream *devmem.Stream
	host   func()
	l      launch
}

// run carries out a plan that was made without error: the Go reference in
// stream order on a host device, the compiled kernel on a CUDA device.
func run(p plan, err error) error {
	if err != nil || p.dev == nil {
		return err
	}
	switch p.dev.Kind() {
	case devmem.Host:
		return p.stream.HostFunc(func() error { p.host(); return nil })
	case devmem.CUDA:
		return defaultRuntime.launch(p.dev, p.stream, p.l)
	}
	return fmt.Errorf("kernels: %s on %v: no kernels for this kind of device: %w", p.l.kernel, p.dev, devmem.ErrUnsupported)
}

type arg struct {
	name  string
	buf   devmem.Buffer
	bytes int
}

// target checks that the buffers are live and on one device, and the stream
// nil or of that device; it returns the device.
func target(op string, s *devmem.Stream, args ...arg) (*devmem.Device, error) {
	dev := args[0].buf.Device()
	for _, a := range args {
		if err := a.buf.Check("kernels: "+op+": "+a.name, dev, a.bytes); err != nil {
			return nil, err
		}
	}
	if err := s.Check(dev); err != nil {
		return nil, fmt.Errorf("kernels: %s: %w", op, err)
	}
	return dev, nil
}

func invalid(op, format string, args ...any) error {
	return fmt.Errorf("kernels: %s: %s: %w", op, fmt.Sprintf(format, args...), devmem.ErrInvalidArgument)
}

// view is the host view of a host device's buffer as elements of T.
func view[T any](b devmem.Buffer) []T {
	v, _ := b.Bytes()
	return devmem.FromBytes[T](v)
}

func suffix[T Float]() string {
	var z T
	if _, ok := any(z).(float32); ok {
		return "f32"
	}
	return "f64"
}

func flatGrid(n int) [3]uint32 {
	return [3]uint32{uint32(min(ceilDiv(n, flatThreads), maxFlatGrid)), 1, 1}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
