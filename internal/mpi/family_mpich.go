//go:build mpich && !mpi && cgo

package mpi

// #cgo pkg-config: mpich
import "C"

const family = "mpich"
