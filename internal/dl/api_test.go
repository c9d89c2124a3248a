package dl_test

import (
	"testing"

	"github.com/gpucomm/gpucomm/internal/dl/dltest"
)

func TestNoCgoFallbackMirrorsTheAPI(t *testing.T) {
	dltest.SameFuncs(t, "dl_cgo.go", "dl_nocgo.go")
}
