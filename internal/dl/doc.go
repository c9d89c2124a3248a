// Package dl opens shared libraries at run time (dlopen, dlsym, dlclose).
//
// It exists so that gpucomm can load CUDA, NVRTC and NCCL when they are
// present and report an error when they are not, instead of linking them at
// build time. A missing library or symbol is an error wrapping
// errs.ErrLibraryNotFound, never a crash; so is a library file that is
// there but that the loader refuses, whose error says that it exists but
// could not be loaded, and why, rather than "library not found".
//
// It must not know about any particular library: the function tables, the
// versioned-symbol choices and the calls live in internal/cuda, internal/nvrtc
// and internal/nccl. It needs cgo; without cgo, Open reports that.
package dl
