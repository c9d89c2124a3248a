//go:build cgo

package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// infoDecoded runs info -json with the environment the test set and decodes
// its report.
func infoDecoded(t *testing.T) infoReport {
	t.Helper()
	withSections(t)
	code, out, errOut := runCLI(t, "info", "-json")
	if code != exitOK {
		t.Fatalf("info -json: exit %d\nstderr:\n%s", code, errOut)
	}
	var rep infoReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("info -json: %v\n%s", err, out)
	}
	return rep
}

// infoJSON runs info -json with the environment the test set and returns
// each backend's reason and the cuda device's detail.
func infoJSON(t *testing.T) (reasons map[string]string, cudaDetail string) {
	t.Helper()
	rep := infoDecoded(t)
	reasons = map[string]string{}
	for _, b := range rep.Backends {
		reasons[b.Name] = b.Reason
	}
	for _, d := range rep.Devices {
		if d.Kind == devmem.CUDA.String() {
			cudaDetail = d.Detail
		}
	}
	return reasons, cudaDetail
}

// A library that is there but will not load is not "not found": info says
// the loader's reason, short, and which variable named the file. Each case
// is a real load failure (the variables point the real loaders at files).
func TestInfoSaysWhyALibraryDidNotLoad(t *testing.T) {
	dep := dltest.BuildLib(t, "libgpucommdep.so", "int gpucomm_dep(void) { return 1; }\n")
	needsDep := dltest.BuildLib(t, "libnccl.so.2", "int gpucomm_dep(void);\nint gpucomm_f(void) { return gpucomm_dep(); }\n",
		"-L"+filepath.Dir(dep), "-lgpucommdep")
	if err := os.Remove(dep); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "libnccl.so.2")
	for _, c := range []struct {
		name, path string
		want       string
	}{
		{"not ELF", "/etc/passwd", "GPUCOMM_NCCL_LIB=/etc/passwd cannot be loaded: invalid ELF header"},
		{"a dependency missing", needsDep, "GPUCOMM_NCCL_LIB=" + needsDep + " cannot be loaded: it needs libgpucommdep.so, which is not found"},
		{"no such file", missing, "GPUCOMM_NCCL_LIB=" + missing + " not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GPUCOMM_NCCL_LIB", c.path)
			t.Setenv("GPUCOMM_CUDA_LIB", c.path)
			reasons, cuda := infoJSON(t)
			if !strings.Contains(reasons["nccl"], "NCCL not usable: "+c.want) {
				t.Errorf("nccl's reason %q does not say %q", reasons["nccl"], c.want)
			}
			if want := strings.ReplaceAll(c.want, "NCCL", "CUDA"); cuda != want {
				t.Errorf("the cuda device's detail is %q, want %q", cuda, want)
			}
			if c.name != "no such file" && strings.Contains(reasons["nccl"]+cuda, "not found (") {
				t.Errorf("a file that is there is reported not found: %q, %q", reasons["nccl"], cuda)
			}
		})
	}
}

// A program gets the loader's whole error, which names the variable that
// points gpucomm at the library and keeps the sentinel, as check's "Open:
// devmem: cuda driver: ..." does.
func TestALibraryThatDidNotLoadNamesItsVariable(t *testing.T) {
	t.Setenv("GPUCOMM_CUDA_LIB", "/etc/passwd")
	_, err := devmem.CUDADeviceCount()
	if !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("CUDADeviceCount = %v, want ErrLibraryNotFound", err)
	}
	for _, want := range []string{"devmem: cuda driver: ", "/etc/passwd: invalid ELF header", "(named by GPUCOMM_CUDA_LIB)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if lib, err := dl.Open("libcuda.so.1", "libcuda.so"); err == nil {
		lib.Close()
		return // a driver is installed: the unset case would load it
	}
	t.Setenv("GPUCOMM_CUDA_LIB", "")
	_, err = devmem.CUDADeviceCount()
	if !errors.Is(err, errs.ErrLibraryNotFound) || !strings.HasSuffix(err.Error(), "(set GPUCOMM_CUDA_LIB to its path)") {
		t.Errorf("with GPUCOMM_CUDA_LIB unset, CUDADeviceCount = %v; want ErrLibraryNotFound ending with how to set it", err)
	}
	if _, cuda := infoJSON(t); cuda != "libcuda.so.1 not found (set GPUCOMM_CUDA_LIB to its path)" {
		t.Errorf("the cuda device's detail is %q", cuda)
	}
}
