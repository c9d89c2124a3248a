//go:build cgo && (mpi || mpich)

package cbaseline

import (
	"testing"

	"github.com/gpucomm/gpucomm/comm"
)

// TestMPILoopMapsEveryDTypeAndOp walks comm.DTypes x comm.Ops through the
// MPI loop's C mapping (gcb_mpi_maps; no MPI_Init needed): every DType moves,
// every DType but float16 and bfloat16 (MPI has no arithmetic on them, a
// documented ErrUnsupported) reduces with every Op, and values outside the
// tables are refused, never taken as a Sum or an Int8.
func TestMPILoopMapsEveryDTypeAndOp(t *testing.T) {
	for _, dt := range comm.DTypes {
		if !mpiMaps(cDType(dt), false, 0) {
			t.Errorf("the MPI loop cannot move %v", dt)
		}
		half := dt == comm.Float16 || dt == comm.BFloat16
		for _, op := range comm.Ops {
			if got := mpiMaps(cDType(dt), true, cOp(op)); got == half {
				t.Errorf("the MPI loop reduces %v with %v: %v, want %v", dt, op, got, !half)
			}
		}
	}
	for _, dt := range append(outsideDTypes, 0) {
		if mpiMaps(cDType(dt), false, 0) || mpiMaps(cDType(dt), true, cOp(comm.Sum)) {
			t.Errorf("the MPI loop accepted %v (as %d)", dt, cDType(dt))
		}
	}
	for _, op := range append(outsideOps, 0) {
		if mpiMaps(cDType(comm.Int32), true, cOp(op)) {
			t.Errorf("the MPI loop reduces with %v (as %d), never a Sum", op, cOp(op))
		}
	}
}
