package mpicomm

import (
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpimap"
)

// mpiTypeOf and mpiOpOf are the one MPI mapping, internal/mpimap's (the C
// baseline of bench/cbaseline is handed the same values): false for a value
// it does not know. types_test.go walks comm.DTypes() and comm.Ops() through
// them.
func mpiTypeOf(dt driver.DType) (mpi.Datatype, bool) { return mpimap.Type(dt) }

func mpiOpOf(op driver.Op) (mpi.Op, bool) { return mpimap.Op(op) }

// mpiType is mpiTypeOf for callers that hand the result straight to
// internal/mpi: an unknown DType becomes the zero Datatype, which every
// internal/mpi call refuses with ErrInvalidArgument (never a real type).
func mpiType(dt driver.DType) mpi.Datatype {
	t, _ := mpiTypeOf(dt)
	return t
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
