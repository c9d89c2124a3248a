package solver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/solver"
)

// On a GPU, a grid whose two copies exceed the GPU's memory (100000² cells:
// 160 GB, and 0.16 GB of the step kernel's per-block residual sums, so 160.2
// GB in all; an H200 has 141) is refused before anything is allocated, naming
// the need and the GPU's free memory. Skipped without a usable CUDA device.
func TestNewOnAGPURefusesAGridLargerThanItsMemory(t *testing.T) {
	gpu, err := devmem.Open("cuda:0", 0)
	if err != nil {
		t.Skipf("no usable CUDA device: %v", err)
	}
	before := gpu.Stats()
	s, err := solver.New(solo{gpu}, solver.Config{N: 100_000, M: 100_000})
	if err == nil {
		s.Close()
		t.Fatal("a 100000×100000 grid (160 GB) was accepted")
	}
	if !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), "of the GPU") || !strings.Contains(err.Error(), "160.2 GB") {
		t.Errorf("%v; want ErrUnsupported naming 160.2 GB of the GPU and its free memory", err)
	}
	if after := gpu.Stats(); after.Buffers != before.Buffers || after.Bytes != before.Bytes {
		t.Errorf("Stats %+v after the refusal, %+v before: nothing may stay allocated", after, before)
	}
}
