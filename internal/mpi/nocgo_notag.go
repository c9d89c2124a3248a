//go:build !((mpi || mpich) && !(mpi && mpich) && !cgo)

package mpi

// taggedWithoutCgo is false: MPI is built in, or no MPI tag was given.
const taggedWithoutCgo = false
