//go:build !cgo

package dl_test

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestOpenWithoutCgoWrapsErrLibraryNotFound(t *testing.T) {
	if _, err := dl.Open("libc.so.6"); !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("Open = %v, want ErrLibraryNotFound", err)
	}
}
