package mpicomm

import (
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// mpiType maps each comm.DType to the MPI datatype of the same elements (a
// switch, not a map: it runs on every call).
func mpiType(dt comm.DType) mpi.Datatype {
	switch dt {
	case comm.Int8:
		return mpi.Int8
	case comm.Uint8:
		return mpi.Uint8
	case comm.Int32:
		return mpi.Int32
	case comm.Uint32:
		return mpi.Uint32
	case comm.Int64:
		return mpi.Int64
	case comm.Uint64:
		return mpi.Uint64
	case comm.Float16:
		return mpi.Float16
	case comm.BFloat16:
		return mpi.BFloat16
	case comm.Float32:
		return mpi.Float32
	case comm.Float64:
		return mpi.Float64
	}
	return 0
}

// mpiOp maps a reduction to MPI's; Avg reduces as Sum and is divided after.
func mpiOp(op comm.Op) mpi.Op {
	switch op {
	case comm.Prod:
		return mpi.Prod
	case comm.Min:
		return mpi.Min
	case comm.Max:
		return mpi.Max
	}
	return mpi.Sum
}

// halfPrecision reports whether dt's reductions are internal/mpi's user ops,
// which run on host memory only.
func halfPrecision(dt comm.DType) bool { return dt == comm.Float16 || dt == comm.BFloat16 }
