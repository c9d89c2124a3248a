package mpicomm

import (
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// mpiTypeOf maps each comm.DType to the MPI datatype of the same elements (a
// switch, not a map: it runs on every call); false for a DType it does not
// know. types_test.go walks comm.DTypes through it.
func mpiTypeOf(dt comm.DType) (mpi.Datatype, bool) {
	switch dt {
	case comm.Int8:
		return mpi.Int8, true
	case comm.Uint8:
		return mpi.Uint8, true
	case comm.Int32:
		return mpi.Int32, true
	case comm.Uint32:
		return mpi.Uint32, true
	case comm.Int64:
		return mpi.Int64, true
	case comm.Uint64:
		return mpi.Uint64, true
	case comm.Float16:
		return mpi.Float16, true
	case comm.BFloat16:
		return mpi.BFloat16, true
	case comm.Float32:
		return mpi.Float32, true
	case comm.Float64:
		return mpi.Float64, true
	}
	return 0, false
}

// mpiType is mpiTypeOf for callers that hand the result straight to
// internal/mpi: an unknown DType becomes the zero Datatype, which every
// internal/mpi call refuses with ErrInvalidArgument (never a real type).
func mpiType(dt comm.DType) mpi.Datatype {
	t, _ := mpiTypeOf(dt)
	return t
}

// mpiOpOf maps a reduction to MPI's; false for an Op it does not know. MPI
// has no average: Avg reduces as Sum, and the backend divides after (see
// Comm.average).
func mpiOpOf(op comm.Op) (mpi.Op, bool) {
	switch op {
	case comm.Sum:
		return mpi.Sum, true
	case comm.Prod:
		return mpi.Prod, true
	case comm.Min:
		return mpi.Min, true
	case comm.Max:
		return mpi.Max, true
	case comm.Avg:
		return mpi.Sum, true // then divided by the backend
	}
	return 0, false
}

// mpiOp is mpiOpOf for callers that hand the result straight to
// internal/mpi: an unknown Op becomes the zero Op, which internal/mpi's
// reductions refuse with ErrInvalidArgument (it used to become Sum).
func mpiOp(op comm.Op) mpi.Op {
	o, _ := mpiOpOf(op)
	return o
}

// halfPrecision reports whether dt's reductions are internal/mpi's user ops,
// which run on host memory only.
func halfPrecision(dt comm.DType) bool { return dt == comm.Float16 || dt == comm.BFloat16 }

// MPITypeOf and MPIOpOf are mpiTypeOf and mpiOpOf for bench/cbaseline,
// whose MPI loop times MPI with the datatypes and ops the backends use
// (its C turns them into handles with internal/mpi's gc_type and gc_op).
func MPITypeOf(dt comm.DType) (mpi.Datatype, bool) { return mpiTypeOf(dt) }

// MPIOpOf: see MPITypeOf.
func MPIOpOf(op comm.Op) (mpi.Op, bool) { return mpiOpOf(op) }
