package mpicomm

import (
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// The MPI mapping of the mpi and cudaaware backends (and of bench/cbaseline's
// MPI loop), written against comm/driver's tables, so that a reduction added
// there that MPI has (internal/mpi holds every predefined MPI_Op) needs one
// case here and no public name.

// mpiTypeOf maps each driver.DType to the MPI datatype of the same elements (a
// switch, not a map: it runs on every call); false for a DType it does not
// know. types_test.go walks comm.DTypes (driver's) through it.
func mpiTypeOf(dt driver.DType) (mpi.Datatype, bool) {
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

// mpiType is mpiTypeOf for callers that hand the result straight to
// internal/mpi: an unknown DType becomes the zero Datatype, which every
// internal/mpi call refuses with ErrInvalidArgument (never a real type).
func mpiType(dt driver.DType) mpi.Datatype {
	t, _ := mpiTypeOf(dt)
	return t
}

// mpiOpOf maps a reduction to MPI's; false for an Op it does not know. MPI
// has no average: Avg reduces as Sum, and the backend divides after (see
// Comm.average).
func mpiOpOf(op driver.Op) (mpi.Op, bool) {
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

// mpiOp is mpiOpOf for callers that hand the result straight to
// internal/mpi: an unknown Op becomes the zero Op, which internal/mpi's
// reductions refuse with ErrInvalidArgument (it used to become Sum).
func mpiOp(op driver.Op) mpi.Op {
	o, _ := mpiOpOf(op)
	return o
}

// halfPrecision reports whether dt's reductions are internal/mpi's user ops,
// which run on host memory only.
func halfPrecision(dt driver.DType) bool { return dt == driver.Float16 || dt == driver.BFloat16 }

// MPITypeOf and MPIOpOf are mpiTypeOf and mpiOpOf for bench/cbaseline,
// whose MPI loop times MPI with the datatypes and ops the backends use
// (its C turns them into handles with internal/mpi's gc_type and gc_op).
func MPITypeOf(dt driver.DType) (mpi.Datatype, bool) { return mpiTypeOf(dt) }

// MPIOpOf: see MPITypeOf.
func MPIOpOf(op driver.Op) (mpi.Op, bool) { return mpiOpOf(op) }
