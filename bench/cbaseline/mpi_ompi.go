//go:build cgo && mpi && !mpich

package cbaseline

// Open MPI's compiler and linker flags for mpi_baseline.c.

// #cgo pkg-config: ompi
import "C"
