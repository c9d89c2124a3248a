//go:build !cgo || !(mpi || mpich)

package mpiinit

import "errors"

// Built reports whether MPI is compiled in.
const Built = false

var errNotBuilt = errors.New("mpiinit: built without -tags mpi or -tags mpich (or without cgo)")

// Init reports that MPI is not compiled in.
func Init() error { return errNotBuilt }

// World reports that MPI is not compiled in.
func World() (rank, size int, err error) { return 0, 0, errNotBuilt }

// Finalize reports that MPI is not compiled in.
func Finalize() error { return errNotBuilt }
