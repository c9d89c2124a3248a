//go:build !cgo

package cuda

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestWithoutCgoEveryCallReportsLibraryNotFound(t *testing.T) {
	if err := Load(); !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Errorf("Load = %v", err)
	}
	if _, err := MemAlloc(1); !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Errorf("MemAlloc = %v", err)
	}
}
