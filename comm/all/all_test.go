package all_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/all"
)

// With every backend registered, an unknown name's error lists them all
// and no longer advises importing this package.
func TestUnknownBackendWithEveryOneRegistered(t *testing.T) {
	t.Setenv("GPUCOMM_BACKEND", "")
	_, err := comm.Open("bogus")
	if !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("Open(bogus) = %v; want ErrInvalidArgument", err)
	}
	for _, name := range []string{"local", "mpi", "cudaaware", "nccl"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Open(bogus) = %v; want it to list %s", err, name)
		}
	}
	if strings.Contains(err.Error(), "import gpucomm/comm/all") {
		t.Errorf("Open(bogus) = %v; advises importing comm/all, which this test does", err)
	}
}
