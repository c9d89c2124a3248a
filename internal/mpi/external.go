//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

// CallExternal runs f, code that calls MPI itself from C on
// MPI_COMM_WORLD (bench's C baselines), the way this package runs each of
// its own MPI calls: after the thread setup (SetThreadSetup: for a
// CUDA-aware MPI, the GPU's context current on the calling thread, as a C
// program's cudaSetDevice makes it) and, when MPI provided less than
// MPI_THREAD_MULTIPLE, holding the lock that serialises every call. So the
// C code runs on the MPI that Init started, at its thread level, with the
// launcher checks Init made. f must not call this package. When MPI is not
// up (no Init or Acquire, or after Finalize) f does not run and the error
// says why.
func CallExternal(f func()) error {
	if err := upError("CallExternal"); err != nil {
		return err
	}
	defer leave(enter())
	f()
	return nil
}
