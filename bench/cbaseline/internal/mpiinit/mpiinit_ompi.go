//go:build cgo && mpi && !mpich

package mpiinit

// #cgo pkg-config: ompi
import "C"
