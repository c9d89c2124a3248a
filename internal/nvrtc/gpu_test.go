package nvrtc_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/nvrtc"
)

func TestGPURealCompilerReportsItsLog(t *testing.T) {
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		t.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with CUDA")
	}
	major, minor, err := nvrtc.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %d.%d", major, minor)
	ptx, cubin, _, err := nvrtc.Compile(`extern "C" __global__ void k(int* p) { *p = 1; }`, "k.cu", []string{"--gpu-architecture=compute_90"})
	if err != nil || !strings.Contains(string(ptx), ".entry k") || len(cubin) != 0 {
		t.Fatalf("Compile for compute_90: %d bytes PTX, %d cubin, %v", len(ptx), len(cubin), err)
	}
	_, _, log, err := nvrtc.Compile(`__global__ void k() { undefined_thing(); }`, "bad.cu", nil)
	var e *nvrtc.Error
	if !errors.As(err, &e) || e.Code != nvrtc.NVRTC_ERROR_COMPILATION || !strings.Contains(err.Error(), "undefined_thing") || log == "" {
		t.Fatalf("Compile(bad) = %v", err)
	}
	t.Logf("compile error as reported:\n%v", err)
	if _, _, _, err := nvrtc.Compile("", "k.cu", []string{"--no-such-option"}); err == nil {
		t.Error("a bad option compiled")
	} else {
		t.Logf("bad option: %v", err)
	}
}
