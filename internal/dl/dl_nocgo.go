//go:build !cgo

package dl

import (
	"fmt"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// errNoCgo is what every call returns in a binary built without cgo.
var errNoCgo = fmt.Errorf("dl: loading shared libraries needs cgo (built with CGO_ENABLED=0): %w", errs.ErrLibraryNotFound)

// Library is an open shared library; without cgo none can be opened.
type Library struct {
	// Name is the name that opened, as given to Open.
	Name string
}

// Open reports that shared libraries cannot be loaded without cgo.
func Open(names ...string) (*Library, error) { return nil, errNoCgo }

// OpenEnv reports that shared libraries cannot be loaded without cgo: no
// variable can help, so the error names none.
func OpenEnv(env string, defaults ...string) (*Library, error) { return nil, errNoCgo }

// Sym reports that shared libraries cannot be loaded without cgo.
func (l *Library) Sym(name string) (unsafe.Pointer, error) { return nil, errNoCgo }

// SymAny reports that shared libraries cannot be loaded without cgo.
func (l *Library) SymAny(names ...string) (unsafe.Pointer, string, error) {
	return nil, "", errNoCgo
}

// Close does nothing: nothing was opened.
func (l *Library) Close() error { return nil }
