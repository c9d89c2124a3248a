//go:build mpich && !mpi && cgo

package comm

const builtMPI = "MPICH (-tags mpich)"
