//go:build cgo && mpich

package mpiinit

// #cgo pkg-config: mpich
import "C"
