//go:build cgo && (mpi || mpich)

package cbaseline

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpimap"
)

// TestMPILoopMapsEveryDTypeAndOp walks comm.DTypes() x comm.Ops() through the
// MPI loop's arguments (mpiArgs, the backends' mapping) and internal/mpi's
// C tables that turn them into handles (gcb_mpi_maps: gc_type, gc_op; no
// MPI_Init needed): every DType moves, every DType but float16 and bfloat16
// (MPI has no arithmetic on them, a documented ErrUnsupported) reduces with
// every Op, each as the backends map it, and values outside the tables are
// refused, never taken as a Sum or an Int8.
func TestMPILoopMapsEveryDTypeAndOp(t *testing.T) {
	for _, dt := range comm.DTypes() {
		wantT, _ := mpimap.Type(dt)
		ct, co, err := mpiArgs(moving, Args{DType: dt})
		if err != nil || int(ct) != int(wantT) || co != noOp || !mpiMaps(moving, ct, co) {
			t.Errorf("the MPI loop cannot move %v (type %d, op %d, %v)", dt, ct, co, err)
		}
		half := dt == comm.Float16 || dt == comm.BFloat16
		for _, op := range comm.Ops() {
			ct, co, err := mpiArgs(reducing, Args{DType: dt, Op: op})
			got := err == nil && mpiMaps(reducing, ct, co)
			if got == half {
				t.Errorf("the MPI loop reduces %v with %v: %v (%v), want %v", dt, op, got, err, !half)
			}
			if half && !errors.Is(err, ErrUnsupported) {
				t.Errorf("MPI %v with %v: %v, want ErrUnsupported", dt, op, err)
			}
			if wantO, _ := mpimap.Op(op); got && (int(ct) != int(wantT) || int(co) != int(wantO)) {
				t.Errorf("%v %v reaches the MPI loop as %d, %d: want the backends' %d, %d", dt, op, ct, co, wantT, wantO)
			}
		}
	}
	for _, dt := range append(outsideDTypes, 0) {
		for _, c := range []Coll{moving, reducing} {
			if _, _, err := mpiArgs(c, Args{DType: dt, Op: comm.Sum}); !errors.Is(err, ErrUnsupported) {
				t.Errorf("the MPI loop's mapping of %v (%v): %v, want ErrUnsupported", dt, c, err)
			}
		}
	}
	for _, op := range append(outsideOps, 0) {
		if _, _, err := mpiArgs(reducing, Args{DType: comm.Int32, Op: op}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("the MPI loop's mapping of %v: %v, want ErrUnsupported (never a Sum)", op, err)
		}
	}
	// internal/mpi's C tables themselves: numbers they do not know, and a
	// reduction with no op, are GCB_ETYPE, never MPI_INT8_T or MPI_SUM.
	for _, n := range []int{-1, 0, 200} {
		if mpiMaps(moving, cInt(n), noOp) || mpiMaps(reducing, cInt(n), cInt(1)) {
			t.Errorf("gc_type gave a datatype for %d", n)
		}
		if mpiMaps(reducing, cInt(3), cInt(n)) || mpiMaps(reducing, cInt(3), noOp) {
			t.Errorf("gc_op gave an op for %d", n)
		}
	}
}
