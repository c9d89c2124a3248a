//go:build !cgo

package nccl

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestWithoutCgoLoadReportsLibraryNotFound(t *testing.T) {
	if err := Load(); !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Errorf("Load = %v", err)
	}
}
