//go:build cgo && (mpi || mpich)

package cbaseline

// #include "baseline.h"
import "C"

import (
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpimap"
)

// mpiArgs are gcb_args' dtype and op for the MPI loop: internal/mpi's
// Datatype and Op, mapped by internal/mpimap (the mpi and cudaaware
// backends' mapping; Avg is MPI_SUM there, the part MPI does of it), which
// the C loop turns into handles with internal/mpi's gc_type and gc_op.
// float16 and bfloat16 reduce only with gpucomm's own user ops, not the
// library's: ErrUnsupported, as a value the mapping lacks, before any C
// call.
func mpiArgs(c Coll, a Args) (dtype, op C.int, err error) {
	if c.reduces() && (a.DType == comm.Float16 || a.DType == comm.BFloat16) {
		return 0, 0, fmt.Errorf("MPI %v of %v: MPI has no arithmetic on it: %w", c, a.DType, ErrUnsupported)
	}
	return mapArgs("MPI", c, a, mpimap.Type, mpimap.Op)
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
