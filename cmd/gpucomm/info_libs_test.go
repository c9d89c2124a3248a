//go:build cgo

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl/dltest"
)

// libVars are the variables that point gpucomm at a library, and what info
// calls each library.
var libVars = map[string]string{"GPUCOMM_CUDA_LIB": "the CUDA driver", "GPUCOMM_NVRTC_LIB": "NVRTC", "GPUCOMM_NCCL_LIB": "NCCL"}

// infoLibChild, set, makes TestInfoLibraryChild the child process that
// infoLibs starts.
const infoLibChild = "GPUCOMM_INFO_LIB_CHILD"

// infoLibs runs info, text and -json, in a child process of this test (a
// library, once loaded, stays loaded for the life of a process, and an
// earlier test may have loaded one) with the library variables set as env
// says ("NAME=VALUE"; the others unset), and returns each library
// variable's effect in the JSON and its line of the text.
func infoLibs(t *testing.T, env ...string) (effects map[string]string, lines map[string]string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestInfoLibraryChild$", "-test.v")
	for _, kv := range os.Environ() {
		if _, lib := libVars[strings.SplitN(kv, "=", 2)[0]]; !lib {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, infoLibChild+"=1"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	_, report, ok := strings.Cut(out.String(), "\ninfo-libs: ")
	if !ok {
		t.Fatalf("the child reported nothing:\n%s", out.String())
	}
	report, _, _ = strings.Cut(report, "\n")
	var r struct{ Effects, Lines map[string]string }
	if err := json.Unmarshal([]byte(report), &r); err != nil {
		t.Fatalf("child's report %q: %v", report, err)
	}
	return r.Effects, r.Lines
}

// TestInfoLibraryChild is infoLibs's child: it runs info and reports.
func TestInfoLibraryChild(t *testing.T) {
	if os.Getenv(infoLibChild) == "" {
		t.Skip("the child process of infoLibs")
	}
	rep := infoDecoded(t)
	var r struct{ Effects, Lines map[string]string }
	r.Effects, r.Lines = map[string]string{}, map[string]string{}
	for _, k := range rep.Environment {
		if _, lib := libVars[k.Name]; lib {
			r.Effects[k.Name] = k.Effect
		}
	}
	code, out, errOut := runCLI(t, "info")
	if code != exitOK {
		t.Fatalf("info: exit %d\nstderr:\n%s", code, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			if _, lib := libVars[f[0]]; lib {
				r.Lines[f[0]] = line
			}
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("\ninfo-libs: " + string(b) + "\n")
}

// setAll is the environment that sets every library variable to path.
func setAll(path string) []string {
	var env []string
	for v := range libVars {
		env = append(env, v+"="+path)
	}
	return env
}

// A library variable's line in info says what became of the library: a
// file that is not there or will not load is not "loaded from" it, but
// could not be loaded from it, and why, as the backend's line says. Each
// case is a real load failure of each library's own loader.
func TestInfoSaysWhetherALibraryVariablesLibraryLoaded(t *testing.T) {
	dep := dltest.BuildLib(t, "libgpucommdep.so", "int gpucomm_dep(void) { return 1; }\n")
	needsDep := dltest.BuildLib(t, "libneedsdep.so", "int gpucomm_dep(void);\nint gpucomm_f(void) { return gpucomm_dep(); }\n",
		"-L"+filepath.Dir(dep), "-lgpucommdep")
	if err := os.Remove(dep); err != nil {
		t.Fatal(err)
	}
	notTheLibrary := dltest.BuildLib(t, "libother.so", "int gpucomm_other(void) { return 1; }\n")
	missing := filepath.Join(t.TempDir(), "libmissing.so")
	for _, c := range []struct {
		name, path, why string
	}{
		{"not ELF", "/etc/passwd", "invalid ELF header"},
		{"a dependency missing", needsDep, "it needs libgpucommdep.so, which is not found"},
		{"no such file", missing, "not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			effects, lines := infoLibs(t, setAll(c.path)...)
			for v, what := range libVars {
				want := what + " could not be loaded from " + c.path + ": " + c.why
				if effects[v] != want {
					t.Errorf("%s=%s: info -json says %q, want %q", v, c.path, effects[v], want)
				}
				// The text says the same on the variable's line.
				if !regexp.MustCompile(`^  ` + v + `\s+` + regexp.QuoteMeta(c.path) + `\s+` + regexp.QuoteMeta(want) + `$`).MatchString(lines[v]) {
					t.Errorf("%s=%s: info's line is %q, want it to say %q", v, c.path, lines[v], want)
				}
			}
		})
	}
	// A shared library that loads but is not the one asked for: its
	// loader refuses it, and info says so, naming what it lacks.
	t.Run("another library", func(t *testing.T) {
		effects, _ := infoLibs(t, setAll(notTheLibrary)...)
		for v, what := range libVars {
			if e := effects[v]; !strings.HasPrefix(e, what+" could not be loaded from "+notTheLibrary+": ") || !strings.Contains(e, "has no ") {
				t.Errorf("%s names a library without its symbols: info says %q", v, e)
			}
		}
	})
	// A driver that loads but whose cuInit fails: loaded, not started.
	t.Run("cuInit fails", func(t *testing.T) {
		src, err := os.ReadFile("../../internal/cuda/cuda_cgo.go")
		if err != nil {
			t.Fatal(err)
		}
		// Every name the loader may look up, once each.
		var c strings.Builder
		seen := map[string]bool{"cuInit": true}
		for _, name := range regexp.MustCompile(`"(cu[A-Z]\w*)"`).FindAllStringSubmatch(string(src), -1) {
			if !seen[name[1]] {
				seen[name[1]] = true
				c.WriteString("int " + name[1] + "(void) { return 0; }\n")
			}
		}
		c.WriteString("int cuInit(unsigned flags) { return 100; }\n") // CUDA_ERROR_NO_DEVICE
		driver := dltest.BuildLib(t, "libcuda.so.1", c.String())
		want := "the CUDA driver in " + driver + " loaded but did not start: cuda: cuInit: CUDA_ERROR_NO_DEVICE (100)"
		if effects, _ := infoLibs(t, "GPUCOMM_CUDA_LIB="+driver); effects["GPUCOMM_CUDA_LIB"] != want {
			t.Errorf("info says %q, want %q", effects["GPUCOMM_CUDA_LIB"], want)
		}
	})
}

// fakeNVRTC is a library with every symbol gpucomm's NVRTC loader resolves
// (none is called: info only loads it).
const fakeNVRTC = `int nvrtcVersion(void) { return 0; }
int nvrtcGetErrorString(void) { return 0; }
int nvrtcCreateProgram(void) { return 0; }
int nvrtcCompileProgram(void) { return 0; }
int nvrtcGetPTXSize(void) { return 0; }
int nvrtcGetPTX(void) { return 0; }
int nvrtcGetCUBINSize(void) { return 0; }
int nvrtcGetCUBIN(void) { return 0; }
int nvrtcGetProgramLogSize(void) { return 0; }
int nvrtcGetProgramLog(void) { return 0; }
int nvrtcDestroyProgram(void) { return 0; }
`

// A library that loads is said loaded from where the variable points.
func TestInfoSaysALibraryVariablesLibraryLoaded(t *testing.T) {
	lib := dltest.BuildLib(t, "libnvrtc.so", fakeNVRTC)
	effects, lines := infoLibs(t, "GPUCOMM_NVRTC_LIB="+lib)
	if want := "NVRTC loaded from " + lib; effects["GPUCOMM_NVRTC_LIB"] != want || !strings.HasSuffix(lines["GPUCOMM_NVRTC_LIB"], "  "+want) {
		t.Errorf("GPUCOMM_NVRTC_LIB names a library that loads: info says %q (line %q), want %q", effects["GPUCOMM_NVRTC_LIB"], lines["GPUCOMM_NVRTC_LIB"], want)
	}
}
