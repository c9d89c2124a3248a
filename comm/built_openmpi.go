//go:build mpi && !mpich && cgo

package comm

const builtMPI = "Open MPI (-tags mpi)"
