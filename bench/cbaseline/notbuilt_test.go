//go:build !cgo || !(mpi || mpich)

package cbaseline

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
)

func TestMPIWithoutABuildTagSaysBaselineNotBuilt(t *testing.T) {
	if MPIBuilt || MPIInitialized() {
		t.Fatal("MPI reported as built or initialised in a binary without it")
	}
	a := Args{Send: 0x1000, Recv: 0x2000, Count: 1, DType: comm.Float32, Op: comm.Sum}
	err := MPI(AllReduce, a, make([]float64, 1))
	if !errors.Is(err, ErrNotBuilt) || !errors.Is(err, comm.ErrNotBuilt) {
		t.Fatalf("got %v, want ErrNotBuilt", err)
	}
	if !strings.Contains(err.Error(), "baseline not built") || !strings.Contains(err.Error(), "-tags mpi") {
		t.Errorf("message %q should say the baseline is not built and how to build it", err)
	}
}
