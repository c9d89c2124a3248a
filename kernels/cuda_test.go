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
	for name, p := range map[string]pair{"a": a, "b": b, "c": c, "col": col, "part": part, "one": one} {
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
