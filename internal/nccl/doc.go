// Package nccl binds the NCCL calls gpucomm uses (libnccl.so.2), loaded at
// run time with dlopen so that gpucomm builds without NCCL installed.
//
// Load opens the library (GPUCOMM_NCCL_LIB, when set, names the only file
// tried; otherwise libnccl.so.2, then libnccl.so), resolves its symbols and
// checks ncclGetVersion against MinVersion (2.12.0). A missing library or
// required symbol is an error wrapping errs.ErrLibraryNotFound; an older NCCL
// is an error wrapping errs.ErrUnsupported. ncclCommInitRankConfig,
// ncclCommFinalize (both 2.14), ncclCommSplit (2.18) and ncclGetLastError
// (2.13) are optional: calling one that the library lacks returns an error
// wrapping errs.ErrUnsupported.
//
// Buffers are device addresses (cuda.DevicePtr) and streams CUDA streams
// (cuda.Stream): NCCL runs on the device and stream the caller set up.
// ncclInProgress is not an error here: it is how a non-blocking communicator
// says a call was accepted, and CommGetAsyncError reports when it is done.
//
// This package must not check ranks, counts against buffers or device
// placement beyond what keeps C memory safe; comm/nccl does that. It declares
// its own prototypes in ncclapi.h and never includes NVIDIA's headers.
package nccl
