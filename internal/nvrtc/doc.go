// Package nvrtc binds NVRTC, CUDA's run-time compiler, loaded at run time
// with dlopen so that gpucomm builds without the CUDA toolkit.
//
// Load opens the library (GPUCOMM_NVRTC_LIB, when set, names the only file
// tried; otherwise libnvrtc.so.13, .12, .11.2, then libnvrtc.so) and resolves
// every symbol it needs; other calls load on first use. A missing library or
// symbol is an error wrapping errs.ErrLibraryNotFound. Compile turns CUDA C
// into PTX and, for a real architecture (-arch=sm_XX), a cubin; a compile
// failure returns *Error whose message carries NVRTC's log.
//
// This package must not choose options, architectures or cache results:
// kernels does that. It declares its own prototypes in nvrtcapi.h and never
// includes NVIDIA's headers.
package nvrtc
