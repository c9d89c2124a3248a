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
	// The kernels: those the sources name outright (kernelParams, each in
	// one file), and those the fold, divide and reduce launchers ask of
	// their file (reduce.cu's macros).
	var named []string
	for name := range kernelParams(t) {
		named = append(named, name)
	}
	sort.Strings(named)
	_, a, b := hostPair(t)
	var launched []launch
	for _, typ := range FoldTypes {
		launched = append(launched, divideLaunch(typ, a, 8, 2))
		for _, op := range FoldOps {
			launched = append(launched, foldLaunch(typ, op, a, b, 8), reduceLaunch(typ, op, []devmem.Buffer{a}, []devmem.Buffer{b}, 8, 0))
		}
	}
	files, err := sources.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	entry := regexp.MustCompile(`(?m)^\.(?:visible )?\.entry (\w+)\(`)
	for _, arch := range [][2]int{{9, 0}, {8, 0}, {7, 5}} { // Hopper, Ampere, and Turing (bfloat16 rounding written out)
		byFile, all := map[string]map[string]bool{}, map[string]bool{}
		for _, f := range files {
			src, err := sources.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			ptx, _, _, err := nvrtcCompiler{}.Compile(string(src), f.Name(), nvrtcOptions(arch[0], arch[1]))
			if err != nil { // err carries NVRTC's log
				t.Errorf("%s for sm_%d%d: %v", f.Name(), arch[0], arch[1], err)
				continue
			}
			byFile[f.Name()] = map[string]bool{}
			for _, m := range entry.FindAllStringSubmatch(string(ptx), -1) {
				byFile[f.Name()][m[1]], all[m[1]] = true, true
			}
		}
		for _, k := range named {
			if !all[k] {
				t.Errorf("sm_%d%d: no source gave an entry %s (%d entries in all)", arch[0], arch[1], k, len(all))
			}
		}
		for _, l := range launched {
			if !byFile[l.file][l.kernel] {
				t.Errorf("%s for sm_%d%d: no entry %s among the %d NVRTC made", l.file, arch[0], arch[1], l.kernel, len(byFile[l.file]))
			}
		}
	}
}
