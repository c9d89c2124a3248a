//go:build cgo

package nccl

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>

// The library under name if it is loaded already; never loads one.
static void* gpucomm_nccl_resident(const char* name) { return dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD); }
// The file the dynamic loader opened for h.
static const char* gpucomm_nccl_file(void* h) {
	struct link_map* m = NULL;
	if (dlinfo(h, RTLD_DI_LINKMAP, &m) != 0 || m == NULL) return NULL;
	return m->l_name;
}
static void* gpucomm_nccl_addr(void* h, const char* name) { dlerror(); void* p = dlsym(h, name); return dlerror() == NULL ? p : NULL; }
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// Symbols loads NCCL (Load) and returns the file the dynamic loader opened
// for it and the addresses of the named functions in that file: the same
// library, and so the same functions, as the table behind this package's
// calls. It is for code that calls NCCL from C itself (bench's C baseline),
// so that it measures the NCCL the backend uses, GPUCOMM_NCCL_LIB
// included. Only names the loader resolves are given out; one it does not
// know, or an optional one the library lacks, is an error naming it.
func Symbols(names ...string) (path string, addrs []unsafe.Pointer, err error) {
	if err := Load(); err != nil {
		return "", nil, err
	}
	runtime.LockOSThread() // dlerror is per OS thread
	defer runtime.UnlockOSThread()
	// Load took the first of these that opened, which stays loaded; the
	// first of them that is resident is that one.
	var h unsafe.Pointer
	for _, name := range dl.Candidates(EnvLib, "libnccl.so.2", "libnccl.so") {
		cname := C.CString(name)
		h = C.gpucomm_nccl_resident(cname)
		C.free(unsafe.Pointer(cname))
		if h != nil {
			break
		}
	}
	if h == nil {
		return "", nil, fmt.Errorf("nccl: the loaded NCCL is not resident under any name it was loaded by: %w", errs.ErrLibraryNotFound)
	}
	defer C.dlclose(h) // Load's own handle keeps the library loaded
	if f := C.gpucomm_nccl_file(h); f != nil {
		path = C.GoString(f)
	}
	known := map[string]bool{}
	for _, s := range symbols {
		known[s.name] = true
	}
	addrs = make([]unsafe.Pointer, len(names))
	for i, name := range names {
		if !known[name] {
			return "", nil, fmt.Errorf("nccl: %s is not a function the loader resolves: %w", name, errs.ErrInvalidArgument)
		}
		cname := C.CString(name)
		addrs[i] = C.gpucomm_nccl_addr(h, cname)
		C.free(unsafe.Pointer(cname))
		if addrs[i] == nil {
			return "", nil, fmt.Errorf("nccl: %s has no %s: %w", path, name, errs.ErrLibraryNotFound)
		}
	}
	return path, addrs, nil
}
