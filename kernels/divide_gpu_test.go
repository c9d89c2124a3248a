package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
)

// TestDivideKernelMatchesTheGoReferenceOnAGPU compiles divide.cu for the GPU
// at hand and compares both kernels with Divide's Go reference byte for
// byte, at a prime count (no block or grid size divides it). Skipped
// without a GPU, as TestCompiledKernelsMatchTheGoReferenceOnAGPU is.
func TestDivideKernelMatchesTheGoReferenceOnAGPU(t *testing.T) {
	if err := cuda.Load(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no GPU (%d, %v)", n, err)
	}
	if _, _, err := (nvrtcCompiler{}).Version(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	gpu, err := cuda.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := cuda.PrimaryCtxRetain(gpu)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.PrimaryCtxRelease(gpu)
	major, _ := cuda.DeviceAttribute(gpu, cuda.AttrComputeCapabilityMajor)
	minor, _ := cuda.DeviceAttribute(gpu, cuda.AttrComputeCapabilityMinor)

	const n = 1_000_003
	d := devmem.NewHostDevice()
	rng := rand.New(rand.NewPCG(21, 22))
	v64 := make([]float64, n)
	v32 := make([]float32, n)
	for i := range v64 {
		v64[i] = rng.Float64()*4 - 2
		v32[i] = float32(v64[i])
	}
	f64 := alloc(t, d, n, v64)
	f32, err := devmem.AllocSlice[float32](d, n)
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Free()
	if err := f32.CopyFrom(v32, nil); err != nil {
		t.Fatal(err)
	}
	err = cuda.WithContext(ctx, func() error {
		for _, c := range []struct {
			name string
			p    func() (plan, error)
		}{
			{"divide f64 by 3", func() (plan, error) { return dividePlan(nil, f64, 3) }},
			{"divide f64 by 1", func() (plan, error) { return dividePlan(nil, f64, 1) }},
			{"divide f32 by 7", func() (plan, error) { return dividePlan(nil, f32, float32(7)) }},
		} {
			p, err := c.p()
			if err == nil {
				err = compareOnGPU(p, major, minor)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
