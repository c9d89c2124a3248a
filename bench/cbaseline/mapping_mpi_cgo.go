//go:build cgo && (mpi || mpich)

package cbaseline

// #include "baseline.h"
import "C"

import (
	"fmt"

	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm"
)

// mpiArgs are gcb_args' dtype and op for the MPI loop: internal/mpi's
// Datatype and Op, mapped by internal/mpicomm (the mpi and cudaaware
// backends' mapping; Avg is MPI_SUM there, the part MPI does of it), which
// the C loop turns into handles with internal/mpi's gc_type and gc_op; op
// is GCB_NO_OP where c does not reduce. float16 and bfloat16 reduce only
// with gpucomm's own user ops, not the library's: ErrUnsupported, as a
// value the mapping lacks, before any C call.
func mpiArgs(c Coll, a Args) (dtype, op C.int, err error) {
	t, ok := mpicomm.MPITypeOf(a.DType)
	if !ok {
		return 0, 0, fmt.Errorf("MPI %v of %v: no MPI datatype: %w", c, a.DType, ErrUnsupported)
	}
	if !c.reduces() {
		return C.int(t), C.GCB_NO_OP, nil
	}
	if t == mpi.Float16 || t == mpi.BFloat16 {
		return 0, 0, fmt.Errorf("MPI %v of %v: MPI has no arithmetic on it: %w", c, a.DType, ErrUnsupported)
	}
	o, ok := mpicomm.MPIOpOf(a.Op)
	if !ok {
		return 0, 0, fmt.Errorf("MPI %v with %v: no MPI reduction: %w", c, a.Op, ErrUnsupported)
	}
	return C.int(t), C.int(o), nil
}

// mpiMaps is gcb_mpi_maps: whether internal/mpi's tables have handles for
// dtype and, when c reduces, op.
func mpiMaps(c Coll, dtype, op C.int) bool {
	r := C.int(0)
	if c.reduces() {
		r = 1
	}
	return C.gcb_mpi_maps(dtype, r, op) == C.GCB_OK
}
