// Package mpimap is gpucomm's one mapping from its element types and
// reductions (comm/driver's tables) to internal/mpi's Datatype and Op: the
// mpi and cudaaware backends (internal/mpicomm) call MPI with it, and
// bench/cbaseline's MPI loop is handed what it produces (its C turns the
// numbers into handles with internal/mpi's gc_type and gc_op), so that the
// two never map a value differently. It imports comm/driver and
// internal/mpi and nothing else, so the baseline need not import the
// backends' engine for it.
package mpimap

import (
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// Type maps each driver.DType to the MPI datatype of the same elements (a
// switch, not a map: it runs on every call); false for a DType it does not
// know. internal/mpicomm's types_test.go walks driver.DTypes() through it.
func Type(dt driver.DType) (mpi.Datatype, bool) {
	switch dt {
	case driver.Int8:
		return mpi.Int8, true
	case driver.Uint8:
		return mpi.Uint8, true
	case driver.Int32:
		return mpi.Int32, true
	case driver.Uint32:
		return mpi.Uint32, true
	case driver.Int64:
		return mpi.Int64, true
	case driver.Uint64:
		return mpi.Uint64, true
	case driver.Float16:
		return mpi.Float16, true
	case driver.BFloat16:
		return mpi.BFloat16, true
	case driver.Float32:
		return mpi.Float32, true
	case driver.Float64:
		return mpi.Float64, true
	}
	return 0, false
}

// Op maps a reduction to MPI's; false for an Op it does not know. MPI has
// no average: Avg reduces as Sum, and the backend divides after
// (internal/mpicomm's Comm.average). internal/mpi's Op table holds every
// predefined MPI reduction, so a reduction added to driver's table that MPI
// has needs one case here; one MPI lacks needs a user op in
// internal/mpi/gpucomm_mpi.c, as float16's are.
func Op(op driver.Op) (mpi.Op, bool) {
	switch op {
	case driver.Sum:
		return mpi.Sum, true
	case driver.Prod:
		return mpi.Prod, true
	case driver.Min:
		return mpi.Min, true
	case driver.Max:
		return mpi.Max, true
	case driver.Avg:
		return mpi.Sum, true // then divided by the backend
	}
	return 0, false
}
