//go:build cgo

package mpicomm

// /* A flag per OS thread: the context has been made current here once. */
// static __thread int gc_ctx_ready;
// static int gc_thread_ready(void) { return gc_ctx_ready; }
// static void gc_thread_mark_ready(void) { gc_ctx_ready = 1; }
import "C"

import (
	"runtime"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/devhook"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// cudaThread is the thread setup (mpi.SetThreadSetup) of a process whose
// MPI makes CUDA calls of its own: it makes the GPU's primary context
// current on the OS thread of every MPI call, as cudaSetDevice does for a C
// program. The context stays current on that thread afterwards, and a flag
// in the thread's C thread-local storage remembers it, so that later MPI
// calls there cost one small cgo call and allocate nothing (the cuda
// package's cuCtxGetCurrent allocates its result). That is safe for devmem,
// whose CUDA calls run inside cuda.WithContext or are internal/cuda's In
// calls, which all put back a context they found current (an In call
// leaves its own only on a thread that had none, and this setup, finding
// the flag unset there, makes its own current again), and it is what MPI
// itself expects: its deferred work (closing peers' IPC handles, freeing its
// GPU buffers) may run in any later call. A library that sets another
// context on a Go thread and leaves it there would defeat it: gpucomm's own
// never do.
type cudaThread struct{ ctx cuda.Context }

func (t *cudaThread) Enter() {
	runtime.LockOSThread() // the context is per OS thread; the goroutine must stay on it for the call
	if C.gc_thread_ready() != 0 {
		return
	}
	if cur, err := cuda.CtxGetCurrent(); err == nil && (cur == t.ctx || cuda.CtxSetCurrent(t.ctx) == nil) {
		C.gc_thread_mark_ready()
	} // else MPI runs as it would have without, and the next call tries again
}

func (t *cudaThread) Leave() { runtime.UnlockOSThread() }

// UseDeviceForMPI makes dev's primary context current on every OS thread
// that calls into MPI from now on (mpi.SetThreadSetup), when dev is a GPU;
// on the host device it does nothing. A backend calls it once it knows its
// device and before it hands MPI device memory (cudaaware) or lets a
// CUDA-aware MPI see the GPU (nccl's bootstrap): without it, CUDA-aware
// Open MPI's own CUDA calls fail with CUDA_ERROR_INVALID_CONTEXT
// ("cuIpcCloseMemHandle failed ... return value: 201", "cuIpcGetMemHandle
// failed"). MPI serves one device a process: the first GPU given stays.
func UseDeviceForMPI(dev *devmem.Device) {
	if ctx := devhook.Context(dev); ctx != 0 {
		mpi.SetThreadSetup(&cudaThread{ctx: cuda.Context(ctx)})
	}
}
