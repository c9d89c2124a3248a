package solver_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/solver"
)

// On a GPU, a grid whose two copies exceed the GPU's memory (100000² cells:
// 160 GB, and the step kernel's per-block residual sums, 160.1 GB in all
// with the pair kernel; an H200 has 141) is refused before anything is allocated, naming
// the need and the GPU's free memory. Skipped without a usable CUDA device.
func TestNewOnAGPURefusesAGridLargerThanItsMemory(t *testing.T) {
	gpu, err := devmem.Open("cuda:0", 0)
	if err != nil {
		t.Skipf("no usable CUDA device: %v", err)
	}
	before := gpu.Stats()
	cfg := solver.Config{N: 100_000, M: 100_000}
	// The two grids alone are 160.0 GB; the partial sums' share depends on
	// the step kernel's blocks, so the figure comes from the solver's count.
	need := solver.DeviceBytes(t, cfg)
	if grids := int64(2 * 8 * 100_002 * 100_002); need < grids {
		t.Fatalf("DeviceBytes %d, less than the two grids' %d", need, grids)
	}
	want := fmt.Sprintf("%.1f GB", float64(need)/1e9)
	s, err := solver.New(solo{gpu}, cfg)
	if err == nil {
		s.Close()
		t.Fatal("a 100000×100000 grid (160 GB) was accepted")
	}
	if !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), "needs "+want+" of the GPU") || !strings.Contains(err.Error(), "free of") {
		t.Errorf("%v; want ErrUnsupported naming %s of the GPU and its free memory", err, want)
	}
	if after := gpu.Stats(); after.Buffers != before.Buffers || after.Bytes != before.Bytes {
		t.Errorf("Stats %+v after the refusal, %+v before: nothing may stay allocated", after, before)
	}
}
