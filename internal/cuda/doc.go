// Package cuda binds the few calls of the CUDA driver API (libcuda.so.1) that
// gpucomm uses, loaded at run time with dlopen so that one binary builds
// without the CUDA toolkit and runs on machines with and without GPUs.
//
// Load opens the library (GPUCOMM_CUDA_LIB, when set, names the only file
// tried; otherwise libcuda.so.1, then libcuda.so), resolves every symbol into
// a function table, choosing versioned names such as cuMemAlloc_v2 explicitly,
// and calls cuInit(0). Every other call loads on first use, so calling Load
// first is optional. A missing library, or a library that lacks a symbol, is
// an error wrapping errs.ErrLibraryNotFound naming what is missing. A failing
// call returns *Error, which names the call and CUDA's error name.
//
// Threading rule: CUDA's current context belongs to an OS thread, and a
// goroutine may move between threads at any call. Every call that uses the
// current context (memory, streams, events, modules, IPC, launches) must run
// inside WithContext, which locks the goroutine to its thread, makes the
// context current and restores the previous one, none included, or be one
// of the In calls (EventRecordIn, StreamQueryIn, StreamSynchronizeIn, the
// asynchronous copies and memset, StreamWaitEventIn, EventSynchronizeIn,
// EventQueryIn, LaunchKernelIn), which take the context and make it current
// inside their own C call: they put back another context that was current,
// and leave theirs current on a thread that had none (a Go thread carries
// no other library's), so that the next call there sets nothing.
//
// Memory rules: handles and host addresses are passed as integers and never
// as Go pointers that C could keep. Go memory is handed only to the
// blocking copies (MemcpyHtoDBytes, MemcpyDtoHBytes) and to LaunchKernelIn
// (its parameter buffer, which holds no pointers and which the driver
// copies before the launch returns), none of which keep it after they
// return; the asynchronous copies and MemHostRegister take addresses of C
// memory (MemAllocHost, mmap) only.
//
// This package must not grow policy: no device choice, no caching, no
// retries. Those belong to devmem. It declares its own prototypes in
// cudadrv.h and never includes NVIDIA's headers.
package cuda
