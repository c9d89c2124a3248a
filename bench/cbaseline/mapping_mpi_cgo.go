//go:build cgo && (mpi || mpich)

package cbaseline

// #include "baseline.h"
import "C"

// mpiMaps is gcb_mpi_maps: whether the MPI loop has dt (with arithmetic
// when reduces) and, when reduces, op.
func mpiMaps(dt C.int, reduces bool, op C.int) bool {
	r := C.int(0)
	if reduces {
		r = 1
	}
	return C.gcb_mpi_maps(dt, r, op) == C.GCB_OK
}
