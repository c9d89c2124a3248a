//go:build cgo

package dl

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// Clear, look up, then read dlerror in one C call: a NULL result alone does
// not mean the symbol is missing.
static void* gpucomm_dlsym(void* h, const char* name, const char** err) {
	dlerror();
	void* p = dlsym(h, name);
	*err = dlerror();
	return p;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// Library is an open shared library. Its handle stays valid until Close.
type Library struct {
	// Name is the name that opened, as given to Open.
	Name string
	h    unsafe.Pointer
}

// Open tries each name in order and returns the first library that opens.
// The error wraps errs.ErrLibraryNotFound and carries dlerror's text for
// every name tried; it ends "library not found" when no name had a file,
// else "NAME exists but could not be loaded" for the first that had one
// (not a shared library, not for this machine, a library it needs missing).
func Open(names ...string) (*Library, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("dl: no library name given: %w", errs.ErrLibraryNotFound)
	}
	// dlerror state is per OS thread: keep the call and the read on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var why []string
	for _, name := range names {
		cname := C.CString(name)
		// RTLD_NOW: a library with unresolved dependencies fails here, not at
		// its first call. RTLD_LOCAL: its symbols cannot clash with others'.
		h := C.dlopen(cname, C.RTLD_NOW|C.RTLD_LOCAL)
		C.free(unsafe.Pointer(cname))
		if h != nil {
			return &Library{Name: name, h: h}, nil
		}
		why = append(why, dlerror(name))
	}
	return nil, openError(names, why)
}

// OpenEnv opens the library that the environment variable env names or, when
// it is unset or empty, the first of defaults that opens (Candidates). Its
// error is Open's, still wrapping errs.ErrLibraryNotFound, followed by
// EnvHint(env): a user who reads it learns which variable points gpucomm at
// the library.
func OpenEnv(env string, defaults ...string) (*Library, error) {
	lib, err := Open(Candidates(env, defaults...)...)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, EnvHint(env))
	}
	return lib, nil
}

// Sym returns the address of the symbol name. A missing symbol is an error
// naming it and wrapping errs.ErrLibraryNotFound.
func (l *Library) Sym(name string) (unsafe.Pointer, error) {
	if l == nil || l.h == nil {
		return nil, fmt.Errorf("dl: symbol %s: library is not open: %w", name, errs.ErrLibraryNotFound)
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	runtime.LockOSThread() // dlerror state is per OS thread
	defer runtime.UnlockOSThread()
	var cerr *C.char
	p := C.gpucomm_dlsym(l.h, cname, &cerr)
	if cerr != nil {
		return nil, fmt.Errorf("dl: symbol %s not found in %s (%s): %w", name, l.Name, C.GoString(cerr), errs.ErrLibraryNotFound)
	}
	if p == nil {
		return nil, fmt.Errorf("dl: symbol %s in %s is NULL: %w", name, l.Name, errs.ErrLibraryNotFound)
	}
	return p, nil
}

// SymAny returns the first of names that the library defines and which name
// that was: the way to choose among versioned symbols (cuMemAlloc_v2, ...),
// newest first. The error names every alternative.
func (l *Library) SymAny(names ...string) (unsafe.Pointer, string, error) {
	for _, n := range names {
		if p, err := l.Sym(n); err == nil {
			return p, n, nil
		}
	}
	return nil, "", fmt.Errorf("dl: none of the symbols %s found in %s: %w",
		strings.Join(names, ", "), l.Name, errs.ErrLibraryNotFound)
}

// Close unloads the library. Addresses from Sym must not be used after it.
func (l *Library) Close() error {
	if l == nil || l.h == nil {
		return nil
	}
	runtime.LockOSThread() // dlerror state is per OS thread
	defer runtime.UnlockOSThread()
	h := l.h
	l.h = nil
	if C.dlclose(h) != 0 {
		return fmt.Errorf("dl: close %s: %s", l.Name, dlerror(l.Name))
	}
	return nil
}

// dlerror returns the pending dlerror text; the caller holds the OS thread.
func dlerror(name string) string {
	if e := C.dlerror(); e != nil {
		return C.GoString(e)
	}
	return name + ": unknown dl error"
}
