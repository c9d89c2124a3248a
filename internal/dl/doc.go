// Package dl opens shared libraries at run time (dlopen, dlsym, dlclose).
//
// It exists so that gpucomm can load CUDA, NVRTC and NCCL when they are
// present and report an error when they are not, instead of linking them at
// build time. A missing library or symbol is an error wrapping
// errs.ErrLibraryNotFound, never a crash.
//
// It must not know about any particular library: the function tables, the
// versioned-symbol choices and the calls live in internal/cuda, internal/nvrtc
// and internal/nccl. It needs cgo; without cgo, Open reports that.
package dl
