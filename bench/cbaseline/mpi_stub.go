//go:build !cgo || !(mpi || mpich)

package cbaseline

// MPIBuilt reports whether the MPI loops are compiled in.
const MPIBuilt = false

// MPIInitialized reports whether MPI is initialised; never, in a binary
// without MPI.
func MPIInitialized() bool { return false }

// MPI reports ErrNotBuilt: this binary has no MPI compiled in.
func MPI(c Coll, a Args, times []float64) error {
	if err := a.check(c, times); err != nil {
		return err
	}
	return ErrNotBuilt
}
