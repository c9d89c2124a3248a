package nccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestNoCgoFallbackMirrorsTheAPI(t *testing.T) {
	dltest.SameFuncs(t, "nccl_cgo.go", "nccl_nocgo.go")
}

func TestDecodeVersionHandlesBothEncodings(t *testing.T) {
	for code, want := range map[int][3]int{21200: {2, 12, 0}, 22703: {2, 27, 3}, 2804: {2, 8, 4}, 30001: {3, 0, 1}} {
		if a, b, c := decodeVersion(code); [3]int{a, b, c} != want {
			t.Errorf("decodeVersion(%d) = %d.%d.%d, want %v", code, a, b, c, want)
		}
	}
}

func TestDataTypeSizes(t *testing.T) {
	want := map[DataType]int{Int8: 1, Uint8: 1, Int32: 4, Uint32: 4, Int64: 8, Uint64: 8, Float16: 2, Float32: 4, Float64: 8, Bfloat16: 2, 42: 0}
	for dt, n := range want {
		if dt.Size() != n {
			t.Errorf("%d.Size() = %d, want %d", dt, dt.Size(), n)
		}
	}
}

func TestErrorNamesCallAndResult(t *testing.T) {
	err := error(&Error{Call: "ncclAllReduce", Code: InvalidArgument, Message: "invalid argument", Detail: "count 3"})
	for _, want := range []string{"ncclAllReduce", "ncclInvalidArgument", "(4)", "invalid argument", "count 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if !errors.Is(err, errs.ErrInvalidArgument) || !IsCode(err, InvalidArgument) || IsCode(err, SystemError) {
		t.Error("Unwrap or IsCode")
	}
	if !errors.Is(&Error{Code: Timeout}, errs.ErrTimeout) {
		t.Error("ncclTimeout is not ErrTimeout")
	}
	if Result(99).String() != "ncclResult(99)" || InProgress.String() != "ncclInProgress" {
		t.Error("Result.String")
	}
}
