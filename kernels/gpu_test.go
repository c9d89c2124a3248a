package kernels

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
)

// TestCompiledKernelsMatchTheGoReferenceOnAGPU compiles every kernel with
// NVRTC for the GPU at hand, runs it on the same inputs as its Go reference,
// and compares the outputs byte for byte. It drives the GPU through
// internal/cuda directly, so it checks the sources and launch shapes
// whatever state devmem's cuda driver is in. Skipped without a GPU.
func TestCompiledKernelsMatchTheGoReferenceOnAGPU(t *testing.T) {
	if err := cuda.Load(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no GPU (%d, %v)", n, err)
	}
	if _, _, err := (nvrtcCompiler{}).Version(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	ctx, major, minor := firstGPU(t)

	d := devmem.NewHostDevice()
	rng := rand.New(rand.NewPCG(11, 12))
	slab := func(n int) devmem.Slice[float64] {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.Float64()*2 - 1
		}
		return alloc(t, d, n, v)
	}
	const nx, ny = 1031, 517 // not multiples of any block size
	a, b, c := slab(nx*ny), slab(nx*ny), slab(nx*ny)
	col, part, one := slab(ny), slab(ny), slab(1)
	f32, _ := devmem.AllocSlice[float32](d, 100003)
	defer f32.Free()
	v32 := make([]float32, f32.Len())
	for i := range v32 {
		v32[i] = rng.Float32()
	}
	f32.CopyFrom(v32, nil)

	type mk struct {
		name string
		p    plan
		err  error
	}
	m := func(name string) func(plan, error) mk {
		return func(p plan, err error) mk { return mk{name, p, err} }
	}
	cases := []mk{
		m("fill f64")(fillPlan(nil, a, 0.1)),
		m("fill f32")(fillPlan(nil, f32, float32(0.3))),
		m("scale f64")(scalePlan(nil, b, 1.0/3)),
		m("scale f32")(scalePlan(nil, f32, float32(1.0/7))),
		m("heat full")(heatPlan(nil, a, c, nx, 1, ny-1, 1, nx-1, 0.23)),
		m("heat rect")(heatPlan(nil, a, b, nx, 3, 400, 17, 900, 0.19)),
		m("heat fewer rows than a thread walks")(heatPlan(nil, b, c, nx, 5, 8, 2, nx-3, 0.31)),
		m("pack")(columnPlan("PackColumn", nil, col, c, nx, nx-2, 1, ny-1, true)),
		m("unpack")(columnPlan("UnpackColumn", nil, col, a, nx, 0, 1, ny-1, false)),
		m("residual")(residualPlan(nil, part, a, c, nx, 1, ny-1, 1, nx-1)),
		m("sum")(sumPlan(nil, one, part)),
	}
	slab32 := func(n int) devmem.Slice[float32] {
		x, err := devmem.AllocSlice[float32](d, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Free() })
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		x.CopyFrom(v, nil)
		return x
	}
	a32, c32 := slab32(nx*ny), slab32(nx*ny)
	parts := slab(nx * ny / 8) // more than any shape's blocks; the rest must stay as they are
	normOf := func(sh heatShape, nx int) func(dst, src any, rowLo, rowHi, colLo, colHi int, r float64) (plan, error) {
		return func(dst, src any, rowLo, rowHi, colLo, colHi int, r float64) (plan, error) {
			if d32, ok := dst.(devmem.Slice[float32]); ok {
				return heatPlanShape(sh, nil, d32, src.(devmem.Slice[float32]), &parts, nx, rowLo, rowHi, colLo, colHi, float32(r))
			}
			return heatPlanShape(sh, nil, dst.(devmem.Slice[float64]), src.(devmem.Slice[float64]), &parts, nx, rowLo, rowHi, colLo, colHi, r)
		}
	}
	norm, normEven := normOf(heatDefault, nx), normOf(heatDefault, nx-1)
	big := slab(3*sumChunk + 123)
	sumPasses, err := sumBlocksPlans(nil, one, big, slab(SumScratch(big.Len())))
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases,
		m("heat f32 full")(heatPlan(nil, a32, c32, nx, 1, ny-1, 1, nx-1, float32(0.23))),
		m("heat f32 rect")(heatPlan(nil, c32, a32, nx, 3, 400, 17, 900, float32(0.19))),
		m("pack f32")(columnPlan("PackColumn", nil, c32, a32, nx, nx-2, 1, ny-1, true)),
		m("unpack f32")(columnPlan("UnpackColumn", nil, a32, c32, nx, 0, 1, ny-1, false)),
		m("heat norm f64 full")(norm(a, c, 1, ny-1, 1, nx-1, 0.23)),
		m("heat norm f64 rect")(norm(b, c, 3, 400, 17, 900, 0.19)),
		m("heat norm f64 few rows")(norm(b, a, 5, 8, 2, nx-3, 0.31)),
		m("heat norm f32 full")(norm(a32, c32, 1, ny-1, 1, nx-1, 0.23)),
		m("heat norm f32 rect")(norm(c32, a32, 3, 400, 17, 900, 0.19)),
		// The pair kernel from an even first column, odd and even widths,
		// and on an even slab width, where every row's pairs are aligned.
		m("heat norm f64 even first column, odd width")(norm(b, c, 3, 400, 16, 901, 0.19)),
		m("heat norm f32 even first column, even width")(norm(c32, a32, 3, 400, 16, 900, 0.19)),
		m("heat norm f32 odd first column, even width")(norm(c32, a32, 2, 399, 17, 901, 0.19)),
		m("heat norm f32 one even column")(norm(c32, a32, 2, 399, 18, 19, 0.19)),
		// 256 columns from an even one: a second block along a row owns
		// no cell and writes +0 (HeatBlocks counts cols/2 + 1 threads).
		m("heat norm f64 a block of nothing")(norm(a, c, 1, ny-1, 2, 258, 0.23)),
		m("heat norm f64 even width")(normEven(a, c, 1, ny-1, 1, nx-2, 0.23)),
		m("heat norm f32 even width, even first column")(normEven(a32, c32, 1, ny-1, 2, nx-4, 0.23)),
		m("heat f32 even width, even first column")(heatPlan(nil, a32, c32, nx-1, 3, 300, 2, nx-6, float32(0.29))),
		m("heat f64 even width")(heatPlan(nil, b, a, nx-1, 1, ny-1, 1, nx-2, 0.29)),
		mk{"sum chunks, first pass", sumPasses[0], nil},
		mk{"sum chunks, last pass", sumPasses[1], nil},
	)
	for _, sh := range heatShapes[1:] {
		name := fmt.Sprintf("heat %s %d rows, block %dx%d", sh.kernel, sh.rows, sh.blockX, sh.blockY)
		cases = append(cases, m(name)(heatPlanShape(sh, nil, a, c, nil, nx, 1, ny-1, 1, nx-1, 0.23)),
			m(name+" rect")(heatPlanShape(sh, nil, b, c, nil, nx, 5, 8, 2, nx-3, 0.31)))
		if sh.both() {
			cases = append(cases, m(name+" f32")(heatPlanShape(sh, nil, a32, c32, nil, nx, 1, ny-1, 1, nx-1, float32(0.23))),
				m(name+" f32 rect")(heatPlanShape(sh, nil, c32, a32, nil, nx, 5, 8, 2, nx-3, float32(0.31))))
		}
		if sh.norm != "" {
			n := normOf(sh, nx)
			cases = append(cases, m(name+" norm")(n(a, c, 1, ny-1, 1, nx-1, 0.23)), m(name+" norm f32 rect")(n(c32, a32, 3, 400, 16, 901, 0.19)))
		}
		if strings.Contains(sh.kernel, "_pair") {
			// An even width: every row's pairs aligned (nx odd above
			// aligns every other row); odd and even first columns.
			const ex = nx - 1
			cases = append(cases, m(name+" even width")(heatPlanShape(sh, nil, a, c, nil, ex, 1, ny-1, 1, ex-1, 0.23)),
				m(name+" even width, even first column")(heatPlanShape(sh, nil, b, c, nil, ex, 3, 300, 2, ex-5, 0.29)),
				m(name+" f32 even width")(heatPlanShape(sh, nil, a32, c32, nil, ex, 1, ny-1, 1, ex-1, float32(0.23))),
				m(name+" f32 even width, even first column")(heatPlanShape(sh, nil, c32, a32, nil, ex, 3, 300, 2, ex-5, float32(0.29))))
		}
	}
	err = cuda.WithContext(ctx, func() error {
		for _, k := range cases {
			if k.err != nil {
				return fmt.Errorf("%s: %w", k.name, k.err)
			}
			if err := compareOnGPU(k.p, major, minor); err != nil {
				return fmt.Errorf("%s: %w", k.name, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// firstGPU retains the first GPU's primary context until t ends and gives
// its compute capability.
func firstGPU(t *testing.T) (ctx cuda.Context, major, minor int) {
	t.Helper()
	gpu, err := cuda.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	if ctx, err = cuda.PrimaryCtxRetain(gpu); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cuda.PrimaryCtxRelease(gpu) })
	major, _ = cuda.DeviceAttribute(gpu, cuda.AttrComputeCapabilityMajor)
	minor, _ = cuda.DeviceAttribute(gpu, cuda.AttrComputeCapabilityMinor)
	return ctx, major, minor
}

// compareOnGPU copies the plan's buffers to the GPU, launches its kernel,
// runs its Go reference on the host copies, and compares every buffer.
func compareOnGPU(p plan, major, minor int) error {
	src, err := sources.ReadFile(p.l.file)
	if err != nil {
		return err
	}
	image, err := build(nvrtcCompiler{}, string(src), p.l.file, nvrtcOptions(major, minor))
	if err != nil {
		return err
	}
	mod, err := cuda.ModuleLoadData(image)
	if err != nil {
		return err
	}
	defer cuda.ModuleUnload(mod)
	fn, err := cuda.ModuleGetFunction(mod, p.l.kernel)
	if err != nil {
		return err
	}
	type pair struct {
		host devmem.Buffer
		dev  cuda.DevicePtr
	}
	var bufs []pair
	var args [][]byte
	for _, a := range p.l.args {
		switch v := a.(type) {
		case devmem.Buffer:
			host, _ := v.Bytes()
			ptr, err := cuda.MemAlloc(len(host))
			if err != nil {
				return err
			}
			defer cuda.MemFree(ptr)
			if err := cuda.MemcpyHtoDBytes(ptr, host); err != nil {
				return err
			}
			bufs = append(bufs, pair{v, ptr})
			args = append(args, cuda.Arg(ptr))
		case int32:
			args = append(args, cuda.Arg(v))
		case int64:
			args = append(args, cuda.Arg(v))
		case float32:
			args = append(args, cuda.Arg(v))
		case float64:
			args = append(args, cuda.Arg(v))
		default:
			return fmt.Errorf("argument of type %T", a)
		}
	}
	l := p.l
	grid, block := cuda.Dim3{X: l.grid[0], Y: l.grid[1], Z: l.grid[2]}, cuda.Dim3{X: l.block[0], Y: l.block[1], Z: l.block[2]}
	if err := cuda.LaunchKernel(fn, grid, block, l.shared, 0, args...); err != nil {
		return err
	}
	if err := cuda.CtxSynchronize(); err != nil {
		return err
	}
	p.host()
	for i, b := range bufs {
		want, _ := b.host.Bytes()
		got := make([]byte, len(want))
		if err := cuda.MemcpyDtoHBytes(got, b.dev); err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			for k := range got {
				if got[k] != want[k] {
					return fmt.Errorf("buffer argument %d differs from the Go reference first at byte %d", i, k)
				}
			}
		}
	}
	return nil
}

// BenchmarkHeatStepAgainstDeviceCopy times each heat kernel shape over an
// n×n float64 grid and a device-to-device copy of the same grid, in the same
// process, by events on one stream, and reports both bandwidths counting
// read and write once (the least a step must move) and their ratio.
func BenchmarkHeatStepAgainstDeviceCopy(b *testing.B) {
	dev, err := devmem.Open("cuda:0", 0)
	if err != nil {
		b.Skipf("no usable CUDA device: %v", err)
	}
	for _, n := range []int{8192, 16384} {
		for _, sh := range heatShapes {
			b.Run(fmt.Sprintf("%d/%s-rows%d-block%dx%d", n, sh.kernel, sh.rows, sh.blockX, sh.blockY), func(b *testing.B) {
				benchShape[float64](b, dev, sh, n)
			})
		}
	}
}

// BenchmarkHeatStepShapesAgainstDeviceCopy is BenchmarkHeatStepAgainstDeviceCopy
// in float32 as well, for the shapes that step either type (the default
// kernel first, the one-column default before it second): which block and
// rows a thread bring float32 to the copy's bandwidth (issue 23.1's 0.85).
func BenchmarkHeatStepShapesAgainstDeviceCopy(b *testing.B) {
	dev, err := devmem.Open("cuda:0", 0)
	if err != nil {
		b.Skipf("no usable CUDA device: %v", err)
	}
	for _, n := range []int{16384, 20480} {
		for _, sh := range heatShapes {
			if !sh.both() {
				continue
			}
			name := fmt.Sprintf("%d/%s-rows%d-block%dx%d", n, sh.kernel, sh.rows, sh.blockX, sh.blockY)
			b.Run(name+"/float32", func(b *testing.B) { benchShape[float32](b, dev, sh, n) })
			b.Run(name+"/float64", func(b *testing.B) { benchShape[float64](b, dev, sh, n) })
		}
	}
}

func benchShape[T Float](b *testing.B, dev *devmem.Device, sh heatShape, n int) {
	u, err1 := devmem.AllocSlice[T](dev, n*n)
	v, err2 := devmem.AllocSlice[T](dev, n*n)
	s, err3 := dev.NewStream()
	start, err4 := dev.NewEvent()
	end, err5 := dev.NewEvent()
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		b.Fatal(err)
	}
	defer func() { errors.Join(u.Free(), v.Free(), s.Destroy(), start.Destroy(), end.Destroy()) }()
	if err := errors.Join(Fill(s, u, T(1)), Fill(s, v, T(0))); err != nil {
		b.Fatal(err)
	}
	var zero T
	elem := int(unsafe.Sizeof(zero))
	timeIt := func(f func() error) float64 { return timeByEvents(b, s, start, end, f) }
	moved := float64(2 * elem * (n - 2) * (n - 2))
	var heat, copyT float64
	for b.Loop() {
		heat = timeIt(func() error { return run(heatPlanShape(sh, s, v, u, nil, n, 1, n-1, 1, n-1, T(0.1))) })
		copyT = timeIt(func() error { return devmem.CopyN(v.Buffer(), u.Buffer(), elem*n*n, s) })
	}
	heatBW := moved / heat / 1e9
	copyBW := float64(2*elem*n*n) / copyT / 1e9
	b.ReportMetric(heatBW, "stencil-GB/s")
	b.ReportMetric(copyBW, "copy-GB/s")
	b.ReportMetric(heatBW/copyBW, "ratio")
}

// BenchmarkHeatKernelsAgainstDeviceCopy times, per element type, the plain
// step the solver takes between residuals (HeatStep) and the step that also
// sums the residual (HeatStepNorm followed by SumBlocks of its partials)
// over an n×n grid, beside a device-to-device copy of the grid, all by
// events on one stream in one process. (A variant with streaming stores
// measured 0.89 of the copy, as the plain step, on the H200 on 2026-12-03,
// and was removed.) It reports each one's
// bandwidth, counting the grid read once and written once, and its ratio to
// the copy's. It does so for every shape with a norm kernel: the default
// (HeatStep, HeatStepNorm: the pair kernels) and the one-column kernels
// that were the default before.
func BenchmarkHeatKernelsAgainstDeviceCopy(b *testing.B) {
	dev, err := devmem.Open("cuda:0", 0)
	if err != nil {
		b.Skipf("no usable CUDA device: %v", err)
	}
	for _, n := range []int{16384, 20480} {
		for _, sh := range heatShapes {
			if sh.norm == "" {
				continue
			}
			name := fmt.Sprintf("%d/%s-rows%d-block%dx%d", n, sh.norm, sh.rows, sh.blockX, sh.blockY)
			b.Run(name+"/float64", func(b *testing.B) { benchHeatKernels[float64](b, dev, sh, n) })
			b.Run(name+"/float32", func(b *testing.B) { benchHeatKernels[float32](b, dev, sh, n) })
		}
	}
}

func benchHeatKernels[T Float](b *testing.B, dev *devmem.Device, sh heatShape, n int) {
	gx, gy := sh.grid(n-2, sh.normThreads(n-2))
	u, err1 := devmem.AllocSlice[T](dev, n*n)
	v, err2 := devmem.AllocSlice[T](dev, n*n)
	parts, err3 := devmem.AllocSlice[float64](dev, gx*gy)
	scratch, err4 := devmem.AllocSlice[float64](dev, max(1, SumScratch(parts.Len())))
	sum, err5 := devmem.AllocSlice[float64](dev, 1)
	s, err6 := dev.NewStream()
	start, err7 := dev.NewEvent()
	end, err8 := dev.NewEvent()
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8); err != nil {
		b.Fatal(err)
	}
	defer func() {
		errors.Join(u.Free(), v.Free(), parts.Free(), scratch.Free(), sum.Free(), s.Destroy(), start.Destroy(), end.Destroy())
	}()
	if err := errors.Join(Fill(s, u, T(1)), Fill(s, v, T(0))); err != nil {
		b.Fatal(err)
	}
	timeIt := func(f func() error) float64 { return timeByEvents(b, s, start, end, f) }
	var size T
	elem := int(unsafe.Sizeof(size))
	moved := float64(2 * elem * (n - 2) * (n - 2))
	var step, norm, copyT float64
	for b.Loop() {
		if sh == heatDefault {
			step = timeIt(func() error { return HeatStep(s, v, u, n, 1, n-1, T(0.1)) })
			norm = timeIt(func() error {
				return errors.Join(HeatStepNorm(s, v, u, parts, n, 1, n-1, 1, n-1, T(0.1)), SumBlocks(s, sum, parts, scratch))
			})
		} else {
			step = timeIt(func() error { return run(heatPlanShape(sh, s, v, u, nil, n, 1, n-1, 1, n-1, T(0.1))) })
			norm = timeIt(func() error {
				return errors.Join(run(heatPlanShape(sh, s, v, u, &parts, n, 1, n-1, 1, n-1, T(0.1))), SumBlocks(s, sum, parts, scratch))
			})
		}
		copyT = timeIt(func() error { return devmem.CopyN(v.Buffer(), u.Buffer(), elem*n*n, s) })
	}
	copyBW := float64(2*elem*n*n) / copyT / 1e9
	b.ReportMetric(moved/step/1e9, "step-GB/s")
	b.ReportMetric(moved/norm/1e9, "norm-GB/s")
	b.ReportMetric(copyBW, "copy-GB/s")
	b.ReportMetric(moved/step/1e9/copyBW, "step-ratio")
	b.ReportMetric(moved/norm/1e9/copyBW, "norm-ratio")
}

// timeByEvents runs f once (warm-up, and the kernel's compile), then 20
// times between two events on s, and returns the seconds one run took.
func timeByEvents(b *testing.B, s *devmem.Stream, start, end *devmem.Event, f func() error) float64 {
	const reps = 20
	if err := f(); err != nil {
		b.Fatal(err)
	}
	if err := start.Record(s); err != nil {
		b.Fatal(err)
	}
	for range reps {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	if err := errors.Join(end.Record(s), end.Synchronize()); err != nil {
		b.Fatal(err)
	}
	d, err := devmem.Elapsed(start, end)
	if err != nil {
		b.Fatal(err)
	}
	return d.Seconds() / reps
}

// BenchmarkReduceAgainstDeviceCopy times Reduce as one rank of the mpi
// backend's IPC AllReduce of 64 MiB runs it (its part, 64 MiB over the
// ranks, read from every rank's send buffer and written to every rank's
// output), but with every buffer this process's own: the kernel's ceiling
// on local memory, not the IPC case itself. For 2 and 4 ranks, float32,
// float16 and float64, with every buffer 16-byte aligned (the kernel's
// 16-byte path) and one element off (element by element), beside a
// device-to-device copy moving as many bytes, by events on one stream. It
// reports each one's bandwidth counting every byte read and written, and
// the ratio.
func BenchmarkReduceAgainstDeviceCopy(b *testing.B) {
	dev, err := devmem.Open("cuda:0", 0)
	if err != nil {
		b.Skipf("no usable CUDA device: %v", err)
	}
	const total = 64 << 20
	for _, ranks := range []int{2, 4} {
		for _, typ := range []string{"f32", "f16", "f64"} {
			for _, off := range []int{0, 1} {
				b.Run(fmt.Sprintf("ranks%d/%s/off%d", ranks, typ, off), func(b *testing.B) {
					benchReduce(b, dev, typ, ranks, total/ranks/foldSize(typ), off)
				})
			}
		}
	}
}

func benchReduce(b *testing.B, dev *devmem.Device, typ string, ranks, n, off int) {
	es := foldSize(typ)
	s, err1 := dev.NewStream()
	start, err2 := dev.NewEvent()
	end, err3 := dev.NewEvent()
	if err := errors.Join(err1, err2, err3); err != nil {
		b.Fatal(err)
	}
	var all []devmem.Buffer
	defer func() {
		for _, x := range all {
			x.Free()
		}
		errors.Join(s.Destroy(), start.Destroy(), end.Destroy())
	}()
	part := func(n, off int) devmem.Buffer {
		whole, err := dev.Alloc((n + off) * es)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, whole)
		v, err := whole.Slice(off*es, n*es)
		if err == nil {
			// 0x3c a byte: normal numbers in every type (a subnormal
			// float16 would time the conversion's slow case).
			err = devmem.Memset(v, 0x3c, s)
		}
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	srcs, dsts := make([]devmem.Buffer, ranks), make([]devmem.Buffer, ranks)
	for q := range ranks {
		srcs[q], dsts[q] = part(n, off), part(n, off)
	}
	moved := 2 * ranks * n * es // every source read, every destination written
	// The copy moves as many bytes, moved/2 read and written, aligned, in
	// one call (reusing a smaller buffer would run out of L2).
	from, to := part(ranks*n, 0), part(ranks*n, 0)
	var red, cp float64
	for b.Loop() {
		red = timeByEvents(b, s, start, end, func() error { return Reduce(s, typ, "sum", dsts, srcs, n, 0) })
		cp = timeByEvents(b, s, start, end, func() error { return devmem.CopyN(to, from, moved/2, s) })
	}
	redBW, copyBW := float64(moved)/red/1e9, float64(moved)/cp/1e9
	b.ReportMetric(redBW, "reduce-GB/s")
	b.ReportMetric(copyBW, "copy-GB/s")
	b.ReportMetric(redBW/copyBW, "ratio")
}
