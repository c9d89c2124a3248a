package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestNoCgoFallbackMirrorsTheAPI(t *testing.T) {
	dltest.SameFuncs(t, "cuda_cgo.go", "cuda_nocgo.go")
}

func TestErrorNamesCallAndCode(t *testing.T) {
	err := error(&Error{Call: "cuMemAlloc", Code: 2, Name: goErrorName(2)})
	for _, want := range []string{"cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "(2)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	wrapped := errors.Join(errors.New("context"), err)
	if !IsCode(wrapped, CUDA_ERROR_OUT_OF_MEMORY) || IsCode(wrapped, CUDA_ERROR_NOT_READY) {
		t.Errorf("IsCode does not see through wrapping or matches the wrong code")
	}
	if IsCode(errors.New("plain"), CUDA_ERROR_OUT_OF_MEMORY) {
		t.Error("IsCode matched a non-CUDA error")
	}
}

func TestErrorUnwrapsToSharedSentinels(t *testing.T) {
	if !errors.Is(&Error{Code: CUDA_ERROR_INVALID_VALUE}, errs.ErrInvalidArgument) {
		t.Error("CUDA_ERROR_INVALID_VALUE is not ErrInvalidArgument")
	}
	if !errors.Is(&Error{Code: CUDA_ERROR_NOT_SUPPORTED}, errs.ErrUnsupported) {
		t.Error("CUDA_ERROR_NOT_SUPPORTED is not ErrUnsupported")
	}
	if errors.Is(&Error{Code: CUDA_ERROR_OUT_OF_MEMORY}, errs.ErrInvalidArgument) {
		t.Error("out of memory matched ErrInvalidArgument")
	}
}

func TestGoErrorNameCoversUnknownCodes(t *testing.T) {
	for code, name := range goErrorNames {
		if !strings.HasPrefix(name, "CUDA_") || goErrorName(code) != name {
			t.Errorf("code %d: %q", code, name)
		}
	}
	if got := goErrorName(12345); got != "CUDA_ERROR_12345" {
		t.Errorf("unknown code: %q", got)
	}
}

func TestArgPacksAtCSize(t *testing.T) {
	cases := []struct {
		arg  []byte
		size int
	}{
		{Arg(int32(-1)), 4}, {Arg(uint8(1)), 1}, {Arg(float32(1)), 4},
		{Arg(float64(1)), 8}, {Arg(DevicePtr(1)), 8}, {Arg(int64(1)), 8}, {Arg(uint16(1)), 2},
	}
	for i, c := range cases {
		if len(c.arg) != c.size {
			t.Errorf("case %d: %d bytes, want %d", i, len(c.arg), c.size)
		}
	}
	if b := Arg(uint32(0x01020304)); b[0] != 4 && b[0] != 1 {
		t.Errorf("Arg(uint32) = %x: not the value's bytes", b)
	}
}

func TestUUIDStringMatchesNvidiaSmi(t *testing.T) {
	u := UUID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8}
	if got, want := u.String(), "GPU-12345678-9abc-def0-0102-030405060708"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}
