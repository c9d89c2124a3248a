//go:build !cgo

package nvrtc

import (
	"fmt"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// errNoCgo is what every call returns in a binary built without cgo. The
// functions below mirror nvrtc_cgo.go one for one (a test checks that).
var errNoCgo = fmt.Errorf("nvrtc: NVRTC is loaded through cgo, and this binary was built with CGO_ENABLED=0: %w", errs.ErrLibraryNotFound)

// Load reports that NVRTC cannot be loaded without cgo.
func Load() error { return errNoCgo }

// Version reports that NVRTC cannot be loaded without cgo.
func Version() (major, minor int, err error) { return 0, 0, errNoCgo }

// Compile reports that NVRTC cannot be loaded without cgo.
func Compile(src, name string, opts []string) (ptx, cubin []byte, log string, err error) {
	return nil, nil, "", errNoCgo
}
