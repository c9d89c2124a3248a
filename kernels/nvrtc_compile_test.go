package kernels

import (
	"os"
	"regexp"
	"sort"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/nvrtc"
)

// TestEveryKernelCompilesWithNVRTC builds every embedded source with the
// real NVRTC, for Hopper (sm_90, the GPU machine's), Ampere (sm_80) and
// Turing (sm_75, where bfloat16's rounding is the written-out one), as a
// launch on such a GPU would, and checks that each kernel a launcher in
// this package calls is an entry of the result. NVRTC needs no GPU: CI
// fetches Debian's (scripts/nvrtc-debian.sh) and test.sh runs this test
// with GPUCOMM_NVRTC_LIB naming it, so a source NVRTC refuses fails on the
// CPU machine, not in a GPU session. Where NVRTC is not installed it skips,
// unless GPUCOMM_NVRTC_LIB names a library: then it must load.
func TestEveryKernelCompilesWithNVRTC(t *testing.T) {
	if _, _, err := nvrtc.Version(); err != nil {
		if os.Getenv(nvrtc.EnvLib) != "" {
			t.Fatalf("%s=%s: %v", nvrtc.EnvLib, os.Getenv(nvrtc.EnvLib), err)
		}
		t.Skipf("no NVRTC (scripts/nvrtc-debian.sh fetches one): %v", err)
	}
	// Each file's kernels: those its source names outright, and those the
	// fold, divide and reduce launchers ask of reduce.cu's macros.
	want := map[string][]string{}
	named := regexp.MustCompile(`extern "C" __global__ void (\w+)\(`)
	files, err := sources.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := sources.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(src), -1) {
			want[f.Name()] = append(want[f.Name()], m[1])
		}
	}
	_, a, b := hostPair(t)
	for _, typ := range FoldTypes {
		ls := []launch{divideLaunch(typ, a, 8, 2)}
		for _, op := range FoldOps {
			ls = append(ls, foldLaunch(typ, op, a, b, 8), reduceLaunch(typ, op, []devmem.Buffer{a}, []devmem.Buffer{b}, 8, 0))
		}
		for _, l := range ls {
			want[l.file] = append(want[l.file], l.kernel)
		}
	}
	entry := regexp.MustCompile(`(?m)^\.(?:visible )?\.entry (\w+)\(`)
	for _, f := range files {
		src, err := sources.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, arch := range [][2]int{{9, 0}, {8, 0}, {7, 5}} { // Hopper, Ampere, and Turing (bfloat16 rounding written out)
			ptx, cubin, _, err := nvrtcCompiler{}.Compile(string(src), f.Name(), nvrtcOptions(arch[0], arch[1]))
			if err != nil { // err carries NVRTC's log
				t.Errorf("%s for sm_%d%d: %v", f.Name(), arch[0], arch[1], err)
				continue
			}
			if len(cubin) == 0 && len(ptx) == 0 {
				t.Errorf("%s for sm_%d%d: neither PTX nor a cubin", f.Name(), arch[0], arch[1])
				continue
			}
			entries := map[string]bool{}
			for _, m := range entry.FindAllStringSubmatch(string(ptx), -1) {
				entries[m[1]] = true
			}
			names := want[f.Name()]
			sort.Strings(names)
			for _, k := range names {
				if !entries[k] {
					t.Errorf("%s for sm_%d%d: no entry %s among the %d NVRTC made", f.Name(), arch[0], arch[1], k, len(entries))
				}
			}
			if len(names) == 0 {
				t.Errorf("%s: no launcher calls a kernel of it", f.Name())
			}
		}
	}
}
