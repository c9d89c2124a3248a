// Package kernels holds gpucomm's device kernels: CUDA C sources embedded
// from kernels/*.cu, compiled at first use by NVRTC for the device's own
// compute capability and cached on disk, each with a Go reference that the
// host device runs.
//
// Launchers are device-agnostic: kernels.Scale(s, x, 2) runs the Go reference
// in stream order on a host device and the compiled kernel on a CUDA device.
// Every launcher checks its arguments before queueing anything, and returns an
// error wrapping devmem.ErrInvalidArgument for a bad one.
//
// Kernels that the solver compares bit for bit (HeatStep, HeatStepNorm, the
// halo pack and unpack, in float32 and float64) are compiled with
// --fmad=false, and their Go references do the same floating-point
// operations in the same order; HeatPoint is that order, once. Sums
// (HeatStepNorm's per-block partials, SumBlocks, ResidualRows, SumInOrder)
// add in a fixed order that their Go references follow, so a sum is the
// same bits on every run and on the host device.
//
// The compiled cubin is cached in GPUCOMM_CACHE_DIR (default
// os.UserCacheDir()/gpucomm/kernels), keyed by the source's hash, the
// architecture, the NVRTC version and the options.
//
// kernels must not import comm: it sits below the communicators.
package kernels
