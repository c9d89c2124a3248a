//go:build cgo

package nvrtc

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// fakeNVRTC compiles nothing: a source containing "error" fails with a log,
// any other gives PTX that echoes the options, and a cubin for -arch=sm_*.
// fake_live counts programs not yet destroyed.
const fakeNVRTC = `
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct { char* src; char* name; char* log; char* ptx; int cubin; } Prog;
int fake_live;
int nvrtcVersion(int* major, int* minor) { *major = 12; *minor = 4; return 0; }
const char* nvrtcGetErrorString(int r) { return r == 6 ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR unknown"; }
int nvrtcCreateProgram(Prog** p, const char* src, const char* name, int nh, const char* const* h, const char* const* in) {
	if (nh != 0 || h || in) return 3;
	*p = calloc(1, sizeof(Prog));
	(*p)->src = strdup(src); (*p)->name = strdup(name); (*p)->log = strdup(""); (*p)->ptx = strdup("");
	fake_live++;
	return 0;
}
int nvrtcCompileProgram(Prog* p, int n, const char* const* opts) {
	if (strstr(p->src, "error")) {
		free(p->log);
		asprintf(&p->log, "%s(1): error: identifier \"error\" is undefined\n\n1 error detected in the compilation of \"%s\".\n", p->name, p->name);
		return 6;
	}
	char buf[1024] = "// ptx for ";
	strcat(buf, p->name);
	for (int i = 0; i < n; i++) {
		if (opts[i][0] != '-') return 5;
		strcat(buf, " "); strcat(buf, opts[i]);
		if (strncmp(opts[i], "-arch=sm_", 9) == 0) p->cubin = 1;
	}
	free(p->ptx);
	p->ptx = strdup(buf);
	return 0;
}
int nvrtcGetPTXSize(Prog* p, size_t* n) { *n = strlen(p->ptx) + 1; return 0; }
int nvrtcGetPTX(Prog* p, char* out) { strcpy(out, p->ptx); return 0; }
int nvrtcGetCUBINSize(Prog* p, size_t* n) { *n = p->cubin ? 4 : 0; return 0; }
int nvrtcGetCUBIN(Prog* p, char* out) { memcpy(out, "\x7f" "ELF", 4); return 0; }
int nvrtcGetProgramLogSize(Prog* p, size_t* n) { *n = strlen(p->log) + 1; return 0; }
int nvrtcGetProgramLog(Prog* p, char* out) { strcpy(out, p->log); return 0; }
int nvrtcDestroyProgram(Prog** p) {
	free((*p)->src); free((*p)->name); free((*p)->log); free((*p)->ptx); free(*p);
	*p = NULL;
	fake_live--;
	return 0;
}
`

// libnvrtc is how this package loads NVRTC, for the shared loader checks.
var libnvrtc = dltest.Library{Env: EnvLib, File: "libnvrtc.so.12", Reset: reset, Load: Load,
	Defaults: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}}

func TestSymbolTableCoversEverySlotOnce(t *testing.T) {
	slots := make([]int, len(symbols))
	for i, s := range symbols {
		slots[i] = int(s.slot)
	}
	dltest.EverySlotOnce(t, slots, int(nCount))
}

func TestLoadWithLibraryAbsentWrapsErrLibraryNotFound(t *testing.T) {
	libnvrtc.CheckMissingFile(t, func() error { _, _, err := Version(); return err })
	libnvrtc.CheckDefaultsAbsent(t)
}

func TestLoadNamesMissingSymbols(t *testing.T) {
	libnvrtc.Use(t, libnvrtc.Build(t, "int nvrtcVersion(int* a, int* b) { return 0; }\n"))
	err := Load()
	if !errors.Is(err, errs.ErrLibraryNotFound) || !strings.Contains(err.Error(), "nvrtcCompileProgram") {
		t.Fatalf("Load = %v, want ErrLibraryNotFound naming nvrtcCompileProgram", err)
	}
}

func TestCompile(t *testing.T) {
	path := libnvrtc.Build(t, fakeNVRTC)
	libnvrtc.Use(t, path)
	major, minor, err := Version()
	if err != nil || major != 12 || minor != 4 {
		t.Fatalf("Version = %d.%d, %v", major, minor, err)
	}

	ptx, cubin, log, err := Compile("__global__ void k() {}", "k.cu", []string{"--fmad=false", "-arch=compute_90"})
	if err != nil || string(ptx) != "// ptx for k.cu --fmad=false -arch=compute_90" || cubin != nil || log != "" {
		t.Fatalf("Compile = %q, %q, %q, %v", ptx, cubin, log, err)
	}
	_, cubin, _, err = Compile("__global__ void k() {}", "k.cu", []string{"-arch=sm_90"})
	if err != nil || string(cubin) != "\x7fELF" {
		t.Fatalf("Compile for sm_90: cubin %q, %v", cubin, err)
	}

	_, _, log, err = Compile("__global__ void k() { error; }", "bad.cu", nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != NVRTC_ERROR_COMPILATION {
		t.Fatalf("Compile(bad) = %v, want NVRTC_ERROR_COMPILATION", err)
	}
	for _, want := range []string{"bad.cu", "NVRTC_ERROR_COMPILATION", `identifier "error" is undefined`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if log != e.Log || !strings.HasPrefix(log, "bad.cu(1)") {
		t.Errorf("log = %q, error's Log = %q", log, e.Log)
	}

	_, _, _, err = Compile("__global__ void k() {}", "k.cu", []string{"fmad"})
	if !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("Compile with a bad option = %v, want ErrInvalidArgument", err)
	}

	// Every program was destroyed, the failed ones too.
	lib, err := dl.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	live, err := lib.Sym("fake_live")
	if err != nil {
		t.Fatal(err)
	}
	if n := *(*int32)(live); n != 0 {
		t.Errorf("%d programs left alive", n)
	}
}
