package mpi

import "sync/atomic"

// ThreadSetup prepares the calling OS thread for a call into MPI, for a
// library that MPI itself calls on that thread: a CUDA-aware MPI makes CUDA
// calls of its own (opening and closing peers' IPC handles, querying
// pointers), which fail with CUDA_ERROR_INVALID_CONTEXT on a thread where no
// context is current, as Go's threads are. A C program makes the device's
// context current with cudaSetDevice once; Go moves goroutines between
// threads, so the setup runs around every call.
type ThreadSetup interface {
	// Enter runs on the calling goroutine before each MPI call. It may lock
	// the goroutine to its OS thread (runtime.LockOSThread) and prepare the
	// thread; it must be cheap (a check when the thread is ready) and must
	// not call MPI.
	Enter()
	// Leave runs after the call on the same goroutine and undoes Enter's
	// lock.
	Leave()
}

type setupBox struct{ s ThreadSetup }

var threadSetup atomic.Pointer[setupBox]

// SetThreadSetup makes s run around every later MPI call this package
// makes, MPI_Finalize included, and reports whether it did: the first
// setup stays for the life of the process (MPI serves one device a
// process), and a later call changes nothing and returns false.
func SetThreadSetup(s ThreadSetup) bool {
	if s == nil {
		return false
	}
	return threadSetup.CompareAndSwap(nil, &setupBox{s})
}

// HasThreadSetup reports whether SetThreadSetup installed one.
func HasThreadSetup() bool { return threadSetup.Load() != nil }
