package mpicomm

import (
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// mpiTypes maps each comm.DType to the MPI datatype of the same elements.
var mpiTypes = map[comm.DType]mpi.Datatype{
	comm.Int8: mpi.Int8, comm.Uint8: mpi.Uint8, comm.Int32: mpi.Int32, comm.Uint32: mpi.Uint32,
	comm.Int64: mpi.Int64, comm.Uint64: mpi.Uint64, comm.Float16: mpi.Float16, comm.BFloat16: mpi.BFloat16,
	comm.Float32: mpi.Float32, comm.Float64: mpi.Float64,
}

func mpiType(dt comm.DType) mpi.Datatype { return mpiTypes[dt] }

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
