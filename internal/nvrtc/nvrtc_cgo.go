//go:build cgo

package nvrtc

/*
#include "nvrtcapi.h"
*/
import "C"

import (
	"bytes"
	"fmt"
	"strings"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// nCount is the number of slots in the C table.
const nCount = C.N_count

// symbols maps each table slot to its library name.
var symbols = []struct {
	slot C.int
	name string
}{
	{C.N_nvrtcVersion, "nvrtcVersion"},
	{C.N_nvrtcGetErrorString, "nvrtcGetErrorString"},
	{C.N_nvrtcCreateProgram, "nvrtcCreateProgram"},
	{C.N_nvrtcCompileProgram, "nvrtcCompileProgram"},
	{C.N_nvrtcGetPTXSize, "nvrtcGetPTXSize"},
	{C.N_nvrtcGetPTX, "nvrtcGetPTX"},
	{C.N_nvrtcGetCUBINSize, "nvrtcGetCUBINSize"},
	{C.N_nvrtcGetCUBIN, "nvrtcGetCUBIN"},
	{C.N_nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"},
	{C.N_nvrtcGetProgramLog, "nvrtcGetProgramLog"},
	{C.N_nvrtcDestroyProgram, "nvrtcDestroyProgram"},
}

// lib holds NVRTC once loaded; it stays open.
var lib dl.Once

// Load opens NVRTC and resolves its symbols. It is safe for concurrent use
// and does nothing once it has succeeded; a failure is retried next time.
func Load() error {
	return lib.Load(func() (*dl.Library, error) {
		l, err := dl.OpenEnv(EnvLib, "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so")
		if err != nil {
			return nil, fmt.Errorf("nvrtc: load the run-time compiler: %w", err)
		}
		var missing []string
		for _, s := range symbols {
			p, err := l.Sym(s.name)
			if err != nil {
				missing = append(missing, s.name)
				continue
			}
			C.gpucomm_nvrtc_set(s.slot, p)
		}
		if len(missing) > 0 {
			C.gpucomm_nvrtc_clear()
			l.Close()
			return nil, fmt.Errorf("nvrtc: %s has no %s: %w", l.Name, strings.Join(missing, ", "), errs.ErrLibraryNotFound)
		}
		return l, nil
	})
}

// reset forgets the loaded library, so that a test can load another one.
func reset() { lib.Reset(func() { C.gpucomm_nvrtc_clear() }) }

func ready() error { return Load() }

func result(call string, r C.nvrtcResult) *Error {
	if r == NVRTC_SUCCESS {
		return nil
	}
	e := &Error{Call: call, Code: int(r), Name: goResultName(int(r))}
	if s := C.gn_errorString(r); s != nil {
		e.Name = C.GoString(s)
	}
	return e
}

// Version returns NVRTC's CUDA version.
func Version() (major, minor int, err error) {
	if err := ready(); err != nil {
		return 0, 0, err
	}
	var ma, mi C.int
	if e := result("nvrtcVersion", C.gn_nvrtcVersion(&ma, &mi)); e != nil {
		return 0, 0, e
	}
	return int(ma), int(mi), nil
}

// Compile compiles the CUDA C source src, called name in messages, with the
// given NVRTC options. ptx is the PTX text without its terminating NUL; cubin
// is empty unless opts name a real architecture (-arch=sm_XX). log is NVRTC's
// log, which may hold warnings even on success. On a compile failure the
// *Error carries the log too.
func Compile(src, name string, opts []string) (ptx, cubin []byte, log string, err error) {
	if err := ready(); err != nil {
		return nil, nil, "", err
	}
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog C.nvrtcProgram
	if e := result("nvrtcCreateProgram", C.gn_nvrtcCreateProgram(&prog, csrc, cname)); e != nil {
		e.Program = name
		return nil, nil, "", e
	}
	defer C.gn_nvrtcDestroyProgram(&prog)

	// The option array and its strings live in C memory: C may not hold Go pointers.
	var copts unsafe.Pointer
	if len(opts) > 0 {
		copts = C.malloc(C.size_t(len(opts)) * C.size_t(unsafe.Sizeof(uintptr(0))))
		defer C.free(copts)
		slots := unsafe.Slice((**C.char)(copts), len(opts))
		for i, o := range opts {
			slots[i] = C.CString(o)
			defer C.free(unsafe.Pointer(slots[i]))
		}
	}
	compiled := C.gn_nvrtcCompileProgram(prog, C.int(len(opts)), copts)
	logBytes, logErr := fetch(prog, outLog)
	log = strings.TrimSpace(string(logBytes))
	if e := result("nvrtcCompileProgram", compiled); e != nil {
		e.Program, e.Log = name, log
		return nil, nil, log, e
	}
	if logErr != nil {
		return nil, nil, "", logErr
	}
	ptx, err = fetch(prog, outPTX)
	if err != nil {
		return nil, nil, log, err
	}
	// Older NVRTCs report an error, newer ones size 0, when there is no cubin.
	cubin, _ = fetch(prog, outCUBIN)
	return ptx, cubin, log, nil
}

// The outputs of a compiled program, as gn_output numbers them.
const (
	outLog = iota
	outPTX
	outCUBIN
)

var outCalls = [...]string{outLog: "nvrtcGetProgramLog", outPTX: "nvrtcGetPTX", outCUBIN: "nvrtcGetCUBIN"}

// fetch reads one output of a compiled program, dropping the NUL that NVRTC
// counts in the size of text.
func fetch(prog C.nvrtcProgram, kind int) ([]byte, error) {
	var n C.size_t
	if e := result(outCalls[kind]+"Size", C.gn_outputSize(C.int(kind), prog, &n)); e != nil {
		return nil, e
	}
	if n == 0 {
		return nil, nil
	}
	buf := make([]byte, int(n))
	if e := result(outCalls[kind], C.gn_output(C.int(kind), prog, unsafe.Pointer(&buf[0]))); e != nil {
		return nil, e
	}
	if kind != outCUBIN {
		buf = bytes.TrimRight(buf, "\x00")
	}
	return buf, nil
}
