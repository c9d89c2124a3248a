//go:build mpi && !mpich && cgo

package mpi

// #cgo pkg-config: ompi
import "C"

const family = "openmpi"
