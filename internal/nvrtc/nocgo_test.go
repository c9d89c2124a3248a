//go:build !cgo

package nvrtc

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestWithoutCgoLoadReportsLibraryNotFound(t *testing.T) {
	if _, _, _, err := Compile("", "k.cu", nil); !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Errorf("Compile = %v", err)
	}
}
