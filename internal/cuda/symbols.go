//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>

// The library under name if it is loaded already; never loads one.
static void* gpucomm_cu_sym_resident(const char* name) { return dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD); }
// The file the dynamic loader opened for h.
static const char* gpucomm_cu_sym_file(void* h) {
	struct link_map* m = NULL;
	if (dlinfo(h, RTLD_DI_LINKMAP, &m) != 0 || m == NULL) return NULL;
	return m->l_name;
}
static void* gpucomm_cu_sym_addr(void* h, const char* name) { dlerror(); void* p = dlsym(h, name); return dlerror() == NULL ? p : NULL; }
*/
import "C"

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// Symbols loads the driver API (Load) and returns the file the dynamic
// loader opened for it and the addresses of the named calls in that file,
// each resolved as Load resolves it: a call is named as cudadrv.h names its
// slot (cuStreamDestroy, cuEventElapsedTime) and gets the versioned symbol
// Load chose for it (cuStreamDestroy_v2, cuEventElapsedTime_v2 where the
// driver has it). So code that calls CUDA from C itself (bench's C
// baseline) calls the driver the rest of gpucomm calls, GPUCOMM_CUDA_LIB
// included. A call the loader does not resolve, or one the driver lacks,
// is an error naming it.
func Symbols(calls ...string) (path string, addrs []unsafe.Pointer, err error) {
	if err := Load(); err != nil {
		return "", nil, err
	}
	runtime.LockOSThread() // dlerror is per OS thread
	defer runtime.UnlockOSThread()
	// Load took the first of these that opened, which stays loaded; the
	// first of them that is resident is that one.
	var h unsafe.Pointer
	for _, name := range dl.Candidates(EnvLib, "libcuda.so.1", "libcuda.so") {
		cname := C.CString(name)
		h = C.gpucomm_cu_sym_resident(cname)
		C.free(unsafe.Pointer(cname))
		if h != nil {
			break
		}
	}
	if h == nil {
		return "", nil, fmt.Errorf("cuda: the loaded driver is not resident under any name it was loaded by: %w", errs.ErrLibraryNotFound)
	}
	defer C.dlclose(h) // Load's own handle keeps the library loaded
	if f := C.gpucomm_cu_sym_file(h); f != nil {
		path = C.GoString(f)
	}
	addrs = make([]unsafe.Pointer, len(calls))
	for i, call := range calls {
		names := symbolNames(call)
		if names == nil {
			return "", nil, fmt.Errorf("cuda: %s is not a call the loader resolves: %w", call, errs.ErrInvalidArgument)
		}
		for _, name := range names { // newest first, as Load chose
			cname := C.CString(name)
			addrs[i] = C.gpucomm_cu_sym_addr(h, cname)
			C.free(unsafe.Pointer(cname))
			if addrs[i] != nil {
				break
			}
		}
		if addrs[i] == nil {
			return "", nil, fmt.Errorf("cuda: %s has no %s: %w", path, strings.Join(names, " or "), errs.ErrLibraryNotFound)
		}
	}
	return path, addrs, nil
}

// symbolNames are the library names Load tries for call, newest first; nil
// for a call not in its table.
func symbolNames(call string) []string {
	for _, s := range symbols {
		if slices.Contains(s.names, call) || slices.Contains(s.names, call+"_v2") {
			return s.names
		}
	}
	return nil
}
