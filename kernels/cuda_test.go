package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// TestLaunchersOnCUDAMatchTheHostDevice runs every launcher through the
// production path (NVRTC, the disk cache, devmem's modules and launches) on
// GPU 0 and the same call on a host device, and compares the results bit
// for bit. Skipped without a usable CUDA device.
func TestLaunchersOnCUDAMatchTheHostDevice(t *testing.T) {
	gpu, err := devmem.Open("cuda:0", 0)
	if err != nil {
		t.Skipf("no usable CUDA device: %v", err)
	}
	dir := t.TempDir()
	t.Setenv(EnvCacheDir, dir)
	defer Unload(gpu)
	host := devmem.NewHostDevice()
	type pair struct{ h, g devmem.Slice[float64] }
	rng := rand.New(rand.NewPCG(21, 22))
	const nx, ny = 1000, 300
	both := func(n int) pair {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.Float64()*2 - 1
		}
		var p pair
		for _, d := range []*devmem.Device{host, gpu} {
			x, err := devmem.AllocSlice[float64](d, n)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { x.Free() })
			if err := x.CopyFrom(v, nil); err != nil {
				t.Fatal(err)
			}
			if d == host {
				p.h = x
			} else {
				p.g = x
			}
		}
		return p
	}
	a, b, c := both(nx*ny), both(nx*ny), both(nx*ny)
	col, part, one := both(ny), both(ny), both(1)
	norm, total, scratch := both(HeatBlocks(ny-2, nx-2)), both(1), both(SumScratch(nx*ny))
	// From an even first column, an odd width; 256 columns from an even
	// one, where the second block along a row owns no cell and writes +0.
	// One partial past HeatBlocks on each, which neither device writes.
	normEven, normNothing := both(HeatBlocks(246, 775)+1), both(HeatBlocks(ny-2, 256)+1)
	hs, _ := host.NewStream()
	defer hs.Destroy()
	gs, err := gpu.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Destroy()
	steps := []struct {
		name string
		call func(s *devmem.Stream, pick func(pair) devmem.Slice[float64]) error
	}{
		{"scale", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error { return Scale(s, p(b), 0.7) }},
		{"heat", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return HeatStep(s, p(c), p(a), nx, 1, ny-1, 0.21)
		}},
		{"heat rect", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return HeatStepRect(s, p(a), p(c), nx, 7, 200, 3, 501, 0.13)
		}},
		{"pack", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return PackColumn(s, p(col), p(a), nx, 5, 1, ny-1)
		}},
		{"unpack", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return UnpackColumn(s, p(c), p(col), nx, nx-1, 1, ny-1)
		}},
		{"residual", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return ResidualRows(s, p(part), p(a), p(c), nx, 1, ny-1, 1, nx-1)
		}},
		{"sum", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return SumInOrder(s, p(one), p(part))
		}},
		{"heat norm", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return HeatStepNorm(s, p(c), p(a), p(norm), nx, 1, ny-1, 1, nx-1, 0.22)
		}},
		{"heat norm from an even column", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return HeatStepNorm(s, p(a), p(c), p(normEven), nx, 4, 250, 2, 777, 0.17)
		}},
		{"heat norm, a block of nothing", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return HeatStepNorm(s, p(b), p(c), p(normNothing), nx, 1, ny-1, 2, 258, 0.2)
		}},
		{"sum blocks", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error {
			return SumBlocks(s, p(total), p(a), p(scratch))
		}},
		{"fill", func(s *devmem.Stream, p func(pair) devmem.Slice[float64]) error { return Fill(s, p(b), -3.5) }},
	}
	for _, st := range steps {
		if err := st.call(hs, func(p pair) devmem.Slice[float64] { return p.h }); err != nil {
			t.Fatalf("%s on the host: %v", st.name, err)
		}
		if err := st.call(gs, func(p pair) devmem.Slice[float64] { return p.g }); err != nil {
			t.Fatalf("%s on %v: %v", st.name, gpu, err)
		}
	}
	if err := errors.Join(hs.Synchronize(), gs.Synchronize()); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]pair{"a": a, "b": b, "c": c, "col": col, "part": part, "one": one,
		"norm": norm, "total": total, "scratch": scratch, "normEven": normEven, "normNothing": normNothing} {
		hv, _ := p.h.ToHost(nil)
		gv, err := p.g.ToHost(nil)
		if err != nil {
			t.Fatal(err)
		}
		for k := range hv {
			if math.Float64bits(hv[k]) != math.Float64bits(gv[k]) {
				t.Fatalf("%s[%d]: host %v, GPU %v", name, k, hv[k], gv[k])
			}
		}
	}
	// float32 kernels too.
	f32, err := devmem.AllocSlice[float32](gpu, 12345)
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Free()
	if err := Fill(gs, f32, float32(1.5)); err != nil {
		t.Fatal(err)
	}
	if err := Scale(gs, f32, float32(-2)); err != nil {
		t.Fatal(err)
	}
	got, err := f32.ToHost(gs)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != -3 {
			t.Fatalf("float32 element %d = %v, want -3", i, v)
		}
	}
	// The float32 heat step, with and without partial sums, against the
	// host device bit for bit.
	if err := heat32OnBoth(t, host, gpu); err != nil {
		t.Fatal(err)
	}
	// Each source file was built once and cached for this GPU's architecture.
	major, minor, _ := gpu.ComputeCapability()
	for _, f := range []string{"fill", "scale", "heat", "halo", "residual"} {
		m, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("%s-sm_%d%d-nvrtc*.bin", f, major, minor)))
		if len(m) != 1 {
			t.Errorf("cache for %s: %v", f, m)
		} else if st, err := os.Stat(m[0]); err != nil || st.Size() == 0 {
			t.Errorf("cache entry %s: %v", m[0], err)
		}
	}
}

// heat32OnBoth runs HeatStepNorm and HeatStepRect in float32 on a random
// slab on both devices and compares fields and partials bit for bit.
func heat32OnBoth(t *testing.T, host, gpu *devmem.Device) error {
	const nx, ny = 777, 301
	rng := rand.New(rand.NewPCG(31, 32))
	in := make([]float32, nx*ny)
	for i := range in {
		in[i] = rng.Float32()
	}
	var fields, fields2 [2][]float32
	var parts, parts2 [2][]float64
	for i, d := range []*devmem.Device{host, gpu} {
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		src, err1 := devmem.AllocSlice[float32](d, nx*ny)
		dst, err2 := devmem.AllocSlice[float32](d, nx*ny)
		p, err3 := devmem.AllocSlice[float64](d, HeatBlocks(ny-2, nx-2))
		p2, err4 := devmem.AllocSlice[float64](d, HeatBlocks(ny-4, 701))
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return err
		}
		defer src.Free()
		defer dst.Free()
		defer p.Free()
		defer p2.Free()
		// The second norm starts at an even column, 701 wide.
		if err := errors.Join(src.CopyFrom(in, nil), dst.CopyFrom(in, nil),
			HeatStepNorm(s, dst, src, p, nx, 1, ny-1, 1, nx-1, float32(0.2)),
			HeatStepRect(s, src, dst, nx, 5, 200, 3, 600, float32(0.1)),
			HeatStepNorm(s, dst, src, p2, nx, 2, ny-2, 4, 705, float32(0.15)), s.Synchronize()); err != nil {
			return err
		}
		if fields[i], err = src.ToHost(nil); err != nil {
			return err
		}
		if fields2[i], err = dst.ToHost(nil); err != nil {
			return err
		}
		if parts[i], err = p.ToHost(nil); err != nil {
			return err
		}
		if parts2[i], err = p2.ToHost(nil); err != nil {
			return err
		}
	}
	for k := range fields[0] {
		if math.Float32bits(fields[0][k]) != math.Float32bits(fields[1][k]) {
			return fmt.Errorf("float32 field[%d]: host %v, GPU %v", k, fields[0][k], fields[1][k])
		}
		if math.Float32bits(fields2[0][k]) != math.Float32bits(fields2[1][k]) {
			return fmt.Errorf("float32 field after the second norm [%d]: host %v, GPU %v", k, fields2[0][k], fields2[1][k])
		}
	}
	for k := range parts[0] {
		if math.Float64bits(parts[0][k]) != math.Float64bits(parts[1][k]) {
			return fmt.Errorf("float32 step's partial[%d]: host %v, GPU %v", k, parts[0][k], parts[1][k])
		}
	}
	for k := range parts2[0] {
		if math.Float64bits(parts2[0][k]) != math.Float64bits(parts2[1][k]) {
			return fmt.Errorf("float32 second norm's partial[%d] (from an even column): host %v, GPU %v", k, parts2[0][k], parts2[1][k])
		}
	}
	return nil
}
