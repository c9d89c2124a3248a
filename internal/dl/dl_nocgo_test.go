//go:build !cgo

package dl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestOpenWithoutCgoWrapsErrLibraryNotFound(t *testing.T) {
	if _, err := dl.Open("libc.so.6"); !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("Open = %v, want ErrLibraryNotFound", err)
	}
}

// Without cgo no variable can help: OpenEnv says why and names none.
func TestOpenEnvWithoutCgoSaysCgo(t *testing.T) {
	t.Setenv("GPUCOMM_DLTEST_LIB", "")
	_, err := dl.OpenEnv("GPUCOMM_DLTEST_LIB", "libc.so.6")
	if !errors.Is(err, errs.ErrLibraryNotFound) || !strings.Contains(err.Error(), "cgo") || strings.Contains(err.Error(), "GPUCOMM_DLTEST_LIB") {
		t.Fatalf("OpenEnv = %v, want ErrLibraryNotFound saying cgo and naming no variable", err)
	}
}
