//go:build (mpi || mpich) && !(mpi && mpich) && !cgo

package mpi

// taggedWithoutCgo: this binary asked for MPI with a tag, but cgo was off
// when it was built (CGO_ENABLED=0, or no C compiler on PATH, which turns
// cgo off by itself), so the stub stands in for MPI.
const taggedWithoutCgo = true
