package nvrtc

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestNoCgoFallbackMirrorsTheAPI(t *testing.T) {
	dltest.SameFuncs(t, "nvrtc_cgo.go", "nvrtc_nocgo.go")
}

func TestCompileErrorCarriesLog(t *testing.T) {
	err := error(&Error{Call: "nvrtcCompileProgram", Program: "k.cu", Code: 6, Name: goResultName(6), Log: "k.cu(3): error: x"})
	for _, want := range []string{"k.cu", "nvrtcCompileProgram", "NVRTC_ERROR_COMPILATION", "k.cu(3): error: x"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if !errors.Is(&Error{Code: NVRTC_ERROR_INVALID_OPTION}, errs.ErrInvalidArgument) {
		t.Error("a bad option is not ErrInvalidArgument")
	}
	if goResultName(99) != "NVRTC_ERROR_99" || goResultName(NVRTC_ERROR_INTERNAL_ERROR) != "NVRTC_ERROR_INTERNAL_ERROR" {
		t.Error("goResultName")
	}
}
