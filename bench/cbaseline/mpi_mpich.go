//go:build cgo && mpich

package cbaseline

// MPICH's compiler and linker flags for mpi_baseline.c (MPICH's ABI is shared
// by Intel MPI, MVAPICH and Cray MPICH).

// #cgo pkg-config: mpich
import "C"
