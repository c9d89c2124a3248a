//go:build cgo

package cuda

/*
#include "cudadrv.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// The handle types must hold what the driver hands out.
var (
	_ [64]byte = [C.sizeof_CUipcMemHandle]byte{}
	_ [64]byte = [C.sizeof_CUipcEventHandle]byte{}
	_ [16]byte = [C.sizeof_CUuuid]byte{}
	_ [8]byte  = [C.sizeof_CUdeviceptr]byte{}
	// cuda.h's VMM structs, which the driver reads by these sizes.
	_ [32]byte = [C.sizeof_CUmemAllocationProp]byte{}
	_ [12]byte = [C.sizeof_CUmemAccessDesc]byte{}
	_ [8]byte  = [C.sizeof_CUmemGenericAllocationHandle]byte{}
)

// fCount is the number of slots in the C table.
const fCount = C.F_count

// symbols maps each table slot to the library names to try, newest first.
// Versioned names are spelled out: the unversioned ones are old ABIs. The
// VMM calls (vmmSlots) may be missing: they then fail with ErrUnsupported.
var symbols = []struct {
	slot  C.int
	names []string
}{
	{C.F_cuInit, []string{"cuInit"}},
	{C.F_cuDriverGetVersion, []string{"cuDriverGetVersion"}},
	{C.F_cuGetErrorName, []string{"cuGetErrorName"}},
	{C.F_cuGetErrorString, []string{"cuGetErrorString"}},
	{C.F_cuDeviceGetCount, []string{"cuDeviceGetCount"}},
	{C.F_cuDeviceGet, []string{"cuDeviceGet"}},
	{C.F_cuDeviceGetName, []string{"cuDeviceGetName"}},
	{C.F_cuDeviceGetUuid, []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}},
	{C.F_cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
	{C.F_cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
	{C.F_cuDeviceGetPCIBusId, []string{"cuDeviceGetPCIBusId"}},
	{C.F_cuDeviceCanAccessPeer, []string{"cuDeviceCanAccessPeer"}},
	{C.F_cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
	{C.F_cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2"}},
	{C.F_cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
	{C.F_cuCtxGetCurrent, []string{"cuCtxGetCurrent"}},
	{C.F_cuCtxSynchronize, []string{"cuCtxSynchronize"}},
	{C.F_cuCtxEnablePeerAccess, []string{"cuCtxEnablePeerAccess"}},
	{C.F_cuMemAlloc, []string{"cuMemAlloc_v2"}},
	{C.F_cuMemFree, []string{"cuMemFree_v2"}},
	{C.F_cuMemAllocHost, []string{"cuMemAllocHost_v2"}},
	{C.F_cuMemFreeHost, []string{"cuMemFreeHost"}},
	{C.F_cuMemHostRegister, []string{"cuMemHostRegister_v2"}},
	{C.F_cuMemHostUnregister, []string{"cuMemHostUnregister"}},
	{C.F_cuMemcpyHtoD, []string{"cuMemcpyHtoD_v2"}},
	{C.F_cuMemcpyDtoH, []string{"cuMemcpyDtoH_v2"}},
	{C.F_cuMemcpyDtoD, []string{"cuMemcpyDtoD_v2"}},
	{C.F_cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
	{C.F_cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
	{C.F_cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
	{C.F_cuMemcpyPeer, []string{"cuMemcpyPeer"}},
	{C.F_cuMemcpyPeerAsync, []string{"cuMemcpyPeerAsync"}},
	{C.F_cuMemsetD8, []string{"cuMemsetD8_v2"}},
	{C.F_cuMemsetD8Async, []string{"cuMemsetD8Async"}},
	{C.F_cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
	{C.F_cuMemGetAddressRange, []string{"cuMemGetAddressRange_v2"}},
	{C.F_cuStreamCreate, []string{"cuStreamCreate"}},
	{C.F_cuStreamDestroy, []string{"cuStreamDestroy_v2"}},
	{C.F_cuStreamSynchronize, []string{"cuStreamSynchronize"}},
	{C.F_cuStreamQuery, []string{"cuStreamQuery"}},
	{C.F_cuStreamWaitEvent, []string{"cuStreamWaitEvent"}},
	{C.F_cuEventCreate, []string{"cuEventCreate"}},
	{C.F_cuEventRecord, []string{"cuEventRecord"}},
	{C.F_cuEventSynchronize, []string{"cuEventSynchronize"}},
	{C.F_cuEventQuery, []string{"cuEventQuery"}},
	{C.F_cuEventElapsedTime, []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}},
	{C.F_cuEventDestroy, []string{"cuEventDestroy_v2"}},
	{C.F_cuIpcGetMemHandle, []string{"cuIpcGetMemHandle"}},
	{C.F_cuIpcOpenMemHandle, []string{"cuIpcOpenMemHandle_v2"}},
	{C.F_cuIpcCloseMemHandle, []string{"cuIpcCloseMemHandle"}},
	// Every driver since CUDA 4.1 has these, so they are required as the
	// rest: a library without them is not a usable libcuda.
	{C.F_cuIpcGetEventHandle, []string{"cuIpcGetEventHandle"}},
	{C.F_cuIpcOpenEventHandle, []string{"cuIpcOpenEventHandle"}},
	{C.F_cuModuleLoadData, []string{"cuModuleLoadData"}},
	{C.F_cuModuleGetFunction, []string{"cuModuleGetFunction"}},
	{C.F_cuModuleUnload, []string{"cuModuleUnload"}},
	{C.F_cuLaunchKernel, []string{"cuLaunchKernel"}},
	// Virtual memory management (CUDA 10.2+); none of these has a versioned name.
	{C.F_cuMemGetAllocationGranularity, []string{"cuMemGetAllocationGranularity"}},
	{C.F_cuMemCreate, []string{"cuMemCreate"}},
	{C.F_cuMemRelease, []string{"cuMemRelease"}},
	{C.F_cuMemAddressReserve, []string{"cuMemAddressReserve"}},
	{C.F_cuMemAddressFree, []string{"cuMemAddressFree"}},
	{C.F_cuMemMap, []string{"cuMemMap"}},
	{C.F_cuMemUnmap, []string{"cuMemUnmap"}},
	{C.F_cuMemSetAccess, []string{"cuMemSetAccess"}},
	{C.F_cuMemExportToShareableHandle, []string{"cuMemExportToShareableHandle"}},
	{C.F_cuMemImportFromShareableHandle, []string{"cuMemImportFromShareableHandle"}},
}

// driver holds libcuda once loaded; it stays open for the life of the
// process.
var driver dl.Once

// Load opens the driver library, resolves every symbol and calls cuInit(0).
// It is safe for concurrent use and does nothing once it has succeeded; a
// failure is not remembered, so a later call tries again.
func Load() error {
	return driver.Load(func() (*dl.Library, error) {
		lib, err := dl.OpenEnv(EnvLib, "libcuda.so.1", "libcuda.so")
		if err != nil {
			return nil, fmt.Errorf("cuda: load the driver API: %w", err)
		}
		var missing []string
		for _, s := range symbols {
			p, _, err := lib.SymAny(s.names...)
			if err != nil {
				if !slices.Contains(vmmSlots, s.slot) {
					missing = append(missing, strings.Join(s.names, " or "))
				}
				continue
			}
			C.gpucomm_cu_set(s.slot, p)
		}
		if len(missing) > 0 {
			unload(lib)
			more := ""
			if len(missing) > 1 {
				more = fmt.Sprintf(" (and %d more symbols)", len(missing)-1)
			}
			return nil, fmt.Errorf("cuda: %s has no %s%s; the driver is too old or not CUDA's: %w",
				lib.Name, missing[0], more, errs.ErrLibraryNotFound)
		}
		if r := C.gc_cuInit(0); r != CUDA_SUCCESS {
			err := result("cuInit", r) // names read before the library goes
			unload(lib)
			return nil, err
		}
		return lib, nil
	})
}

// unload empties the table and closes lib.
func unload(lib *dl.Library) {
	C.gpucomm_cu_clear()
	lib.Close()
}

// ready loads the library on first use.
func ready() error { return Load() }

// result turns a CUresult into nil or an *Error naming call.
func result(call string, r C.CUresult) error {
	if r == CUDA_SUCCESS {
		return nil
	}
	code := int(r)
	e := &Error{Call: call, Code: code, Name: goErrorName(code)}
	if s := C.gc_errorName(r); s != nil {
		e.Name = C.GoString(s)
	}
	if s := C.gc_errorString(r); s != nil {
		e.Message = C.GoString(s)
	}
	return e
}

// ErrorName returns CUDA's name for a CUresult, from the library when loaded.
func ErrorName(code int) string {
	if driver.Loaded() {
		if s := C.gc_errorName(C.CUresult(code)); s != nil {
			return C.GoString(s)
		}
	}
	return goErrorName(code)
}

// ErrorString returns CUDA's description of a CUresult, or "" before Load.
func ErrorString(code int) string {
	if driver.Loaded() {
		if s := C.gc_errorString(C.CUresult(code)); s != nil {
			return C.GoString(s)
		}
	}
	return ""
}

// nbytes checks a length before it becomes a size_t.
func nbytes(call string, n int) (C.size_t, error) {
	if n < 0 {
		return 0, fmt.Errorf("cuda: %s: negative size %d: %w", call, n, errs.ErrInvalidArgument)
	}
	return C.size_t(n), nil
}

// DriverVersion returns the driver's CUDA version as 1000*major + 10*minor.
func DriverVersion() (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var v C.int
	r := C.gc_cuDriverGetVersion(&v)
	return int(v), result("cuDriverGetVersion", r)
}

// DeviceCount returns the number of devices this process can see.
func DeviceCount() (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var n C.int
	r := C.gc_cuDeviceGetCount(&n)
	return int(n), result("cuDeviceGetCount", r)
}

// DeviceGet returns the device with the given ordinal.
func DeviceGet(ordinal int) (Device, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var d C.CUdevice
	r := C.gc_cuDeviceGet(&d, C.int(ordinal))
	return Device(d), result("cuDeviceGet", r)
}

// DeviceName returns the device's marketing name.
func DeviceName(d Device) (string, error) {
	if err := ready(); err != nil {
		return "", err
	}
	var buf [256]C.char
	if r := C.gc_cuDeviceGetName(&buf[0], C.int(len(buf)), C.CUdevice(d)); r != CUDA_SUCCESS {
		return "", result("cuDeviceGetName", r)
	}
	return C.GoString(&buf[0]), nil
}

// DeviceUUID returns the device's UUID, the one nvidia-smi shows.
func DeviceUUID(d Device) (UUID, error) {
	var u UUID
	if err := ready(); err != nil {
		return u, err
	}
	r := C.gc_cuDeviceGetUuid(unsafe.Pointer(&u), C.CUdevice(d))
	return u, result("cuDeviceGetUuid", r)
}

// DeviceTotalMem returns the device's memory in bytes.
func DeviceTotalMem(d Device) (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var n C.size_t
	r := C.gc_cuDeviceTotalMem(&n, C.CUdevice(d))
	return int(n), result("cuDeviceTotalMem", r)
}

// DeviceAttribute returns one property of the device.
func DeviceAttribute(d Device, a Attribute) (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var v C.int
	r := C.gc_cuDeviceGetAttribute(&v, C.int(a), C.CUdevice(d))
	return int(v), result("cuDeviceGetAttribute", r)
}

// DevicePCIBusID returns the device's PCI address, "domain:bus:device.function".
func DevicePCIBusID(d Device) (string, error) {
	if err := ready(); err != nil {
		return "", err
	}
	var buf [64]C.char
	if r := C.gc_cuDeviceGetPCIBusId(&buf[0], C.int(len(buf)), C.CUdevice(d)); r != CUDA_SUCCESS {
		return "", result("cuDeviceGetPCIBusId", r)
	}
	return C.GoString(&buf[0]), nil
}

// DeviceCanAccessPeer reports whether d can map peer's memory.
func DeviceCanAccessPeer(d, peer Device) (bool, error) {
	if err := ready(); err != nil {
		return false, err
	}
	var v C.int
	r := C.gc_cuDeviceCanAccessPeer(&v, C.CUdevice(d), C.CUdevice(peer))
	return v != 0, result("cuDeviceCanAccessPeer", r)
}

// PrimaryCtxRetain returns the device's primary context, counting a reference.
func PrimaryCtxRetain(d Device) (Context, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var c C.uintptr_t
	r := C.gc_cuDevicePrimaryCtxRetain(&c, C.CUdevice(d))
	return Context(c), result("cuDevicePrimaryCtxRetain", r)
}

// PrimaryCtxRelease drops one reference taken by PrimaryCtxRetain.
func PrimaryCtxRelease(d Device) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuDevicePrimaryCtxRelease", C.gc_cuDevicePrimaryCtxRelease(C.CUdevice(d)))
}

// CtxSetCurrent makes c current on the calling OS thread; prefer WithContext.
func CtxSetCurrent(c Context) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuCtxSetCurrent", C.gc_cuCtxSetCurrent(C.uintptr_t(c)))
}

// CtxGetCurrent returns the context current on the calling OS thread, or 0.
func CtxGetCurrent() (Context, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var c C.uintptr_t
	r := C.gc_cuCtxGetCurrent(&c)
	return Context(c), result("cuCtxGetCurrent", r)
}

// CtxSynchronize waits for all work in the current context.
func CtxSynchronize() error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuCtxSynchronize", C.gc_cuCtxSynchronize())
}

// CtxEnablePeerAccess lets the current context map memory of peer's context.
// A second call returns CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED.
func CtxEnablePeerAccess(peer Context) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuCtxEnablePeerAccess", C.gc_cuCtxEnablePeerAccess(C.uintptr_t(peer), 0))
}

// MemAlloc allocates n bytes of device memory in the current context.
func MemAlloc(n int) (DevicePtr, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	sz, err := nbytes("cuMemAlloc", n)
	if err != nil {
		return 0, err
	}
	var p C.CUdeviceptr
	r := C.gc_cuMemAlloc(&p, sz)
	return DevicePtr(p), result("cuMemAlloc", r)
}

// MemFree frees memory from MemAlloc.
func MemFree(p DevicePtr) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuMemFree", C.gc_cuMemFree(C.CUdeviceptr(p)))
}

// MemAllocHost allocates n bytes of page-locked host memory. It is C memory:
// Go may hold the pointer, and uintptr(p) is what the copy calls take.
func MemAllocHost(n int) (unsafe.Pointer, error) {
	if err := ready(); err != nil {
		return nil, err
	}
	sz, err := nbytes("cuMemAllocHost", n)
	if err != nil {
		return nil, err
	}
	var p unsafe.Pointer
	r := C.gc_cuMemAllocHost(&p, sz)
	return p, result("cuMemAllocHost", r)
}

// MemFreeHost frees memory from MemAllocHost.
func MemFreeHost(p unsafe.Pointer) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuMemFreeHost", C.gc_cuMemFreeHost(p))
}

// MemHostRegister page-locks n bytes of existing host memory at p, which must
// not be Go-managed memory (use mmap'd or C memory).
func MemHostRegister(p uintptr, n int, flags uint32) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemHostRegister", n)
	if err != nil {
		return err
	}
	return result("cuMemHostRegister", C.gc_cuMemHostRegister(C.uintptr_t(p), sz, C.uint(flags)))
}

// MemHostUnregister undoes MemHostRegister.
func MemHostUnregister(p uintptr) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuMemHostUnregister", C.gc_cuMemHostUnregister(C.uintptr_t(p)))
}

// MemcpyHtoD copies n bytes from host address src to the device; it blocks.
func MemcpyHtoD(dst DevicePtr, src uintptr, n int) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemcpyHtoD", n)
	if err != nil {
		return err
	}
	return result("cuMemcpyHtoD", C.gc_cuMemcpyHtoD(C.CUdeviceptr(dst), C.uintptr_t(src), sz))
}

// MemcpyDtoH copies n bytes from the device to host address dst; it blocks.
func MemcpyDtoH(dst uintptr, src DevicePtr, n int) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemcpyDtoH", n)
	if err != nil {
		return err
	}
	return result("cuMemcpyDtoH", C.gc_cuMemcpyDtoH(C.uintptr_t(dst), C.CUdeviceptr(src), sz))
}

// MemcpyHtoDBytes copies Go memory to the device. The driver has finished
// reading src when it returns, so handing it Go memory is legal.
func MemcpyHtoDBytes(dst DevicePtr, src []byte) error {
	if err := ready(); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return result("cuMemcpyHtoD", C.gc_cuMemcpyHtoDGo(C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// MemcpyDtoHBytes copies len(dst) bytes from the device into Go memory; it
// returns once the data is in dst.
func MemcpyDtoHBytes(dst []byte, src DevicePtr) error {
	if err := ready(); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return result("cuMemcpyDtoH", C.gc_cuMemcpyDtoHGo(unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))))
}

// MemcpyDtoD copies n bytes between device buffers.
func MemcpyDtoD(dst, src DevicePtr, n int) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemcpyDtoD", n)
	if err != nil {
		return err
	}
	return result("cuMemcpyDtoD", C.gc_cuMemcpyDtoD(C.CUdeviceptr(dst), C.CUdeviceptr(src), sz))
}

// MemcpyHtoDAsync queues a copy from page-locked host memory on s.
func MemcpyHtoDAsync(dst DevicePtr, src uintptr, n int, s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemcpyHtoDAsync", n)
	if err != nil {
		return err
	}
	return result("cuMemcpyHtoDAsync", C.gc_cuMemcpyHtoDAsync(C.CUdeviceptr(dst), C.uintptr_t(src), sz, C.uintptr_t(s)))
}

// MemcpyDtoHAsync queues a copy into page-locked host memory on s.
func MemcpyDtoHAsync(dst uintptr, src DevicePtr, n int, s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemcpyDtoHAsync", n)
	if err != nil {
		return err
	}
	return result("cuMemcpyDtoHAsync", C.gc_cuMemcpyDtoHAsync(C.uintptr_t(dst), C.CUdeviceptr(src), sz, C.uintptr_t(s)))
}

// MemcpyDtoDAsync queues a device-to-device copy on s.
func MemcpyDtoDAsync(dst, src DevicePtr, n int, s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemcpyDtoDAsync", n)
	if err != nil {
		return err
	}
	return result("cuMemcpyDtoDAsync", C.gc_cuMemcpyDtoDAsync(C.CUdeviceptr(dst), C.CUdeviceptr(src), sz, C.uintptr_t(s)))
}

// MemcpyPeer copies n bytes between memory of two contexts.
func MemcpyPeer(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n int) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemcpyPeer", n)
	if err != nil {
		return err
	}
	return result("cuMemcpyPeer", C.gc_cuMemcpyPeer(C.CUdeviceptr(dst), C.uintptr_t(dstCtx), C.CUdeviceptr(src), C.uintptr_t(srcCtx), sz))
}

// MemcpyPeerAsync queues a copy between memory of two contexts on s.
func MemcpyPeerAsync(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n int, s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemcpyPeerAsync", n)
	if err != nil {
		return err
	}
	return result("cuMemcpyPeerAsync", C.gc_cuMemcpyPeerAsync(C.CUdeviceptr(dst), C.uintptr_t(dstCtx), C.CUdeviceptr(src), C.uintptr_t(srcCtx), sz, C.uintptr_t(s)))
}

// MemsetD8 sets n bytes of device memory to v.
func MemsetD8(dst DevicePtr, v byte, n int) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemsetD8", n)
	if err != nil {
		return err
	}
	return result("cuMemsetD8", C.gc_cuMemsetD8(C.CUdeviceptr(dst), C.uchar(v), sz))
}

// MemsetD8Async queues setting n bytes of device memory to v on s.
func MemsetD8Async(dst DevicePtr, v byte, n int, s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes("cuMemsetD8Async", n)
	if err != nil {
		return err
	}
	return result("cuMemsetD8Async", C.gc_cuMemsetD8Async(C.CUdeviceptr(dst), C.uchar(v), sz, C.uintptr_t(s)))
}

// MemGetInfo returns free and total bytes of the current context's device.
func MemGetInfo() (free, total int, err error) {
	if err := ready(); err != nil {
		return 0, 0, err
	}
	var f, t C.size_t
	r := C.gc_cuMemGetInfo(&f, &t)
	return int(f), int(t), result("cuMemGetInfo", r)
}

// MemGetAddressRange returns the allocation that contains p.
func MemGetAddressRange(p DevicePtr) (base DevicePtr, size int, err error) {
	if err := ready(); err != nil {
		return 0, 0, err
	}
	var b C.CUdeviceptr
	var n C.size_t
	r := C.gc_cuMemGetAddressRange(&b, &n, C.CUdeviceptr(p))
	return DevicePtr(b), int(n), result("cuMemGetAddressRange", r)
}

// StreamCreate creates a stream in the current context.
func StreamCreate(flags uint32) (Stream, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var s C.uintptr_t
	r := C.gc_cuStreamCreate(&s, C.uint(flags))
	return Stream(s), result("cuStreamCreate", r)
}

// StreamDestroy destroys s once its queued work is done.
func StreamDestroy(s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuStreamDestroy", C.gc_cuStreamDestroy(C.uintptr_t(s)))
}

// StreamSynchronize waits until all work queued on s is done.
func StreamSynchronize(s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuStreamSynchronize", C.gc_cuStreamSynchronize(C.uintptr_t(s)))
}

// StreamQuery reports whether all work queued on s is done, without waiting.
func StreamQuery(s Stream) (done bool, err error) {
	if err := ready(); err != nil {
		return false, err
	}
	r := C.gc_cuStreamQuery(C.uintptr_t(s))
	if r == CUDA_ERROR_NOT_READY {
		return false, nil
	}
	return r == CUDA_SUCCESS, result("cuStreamQuery", r)
}

// StreamQueryIn is StreamQuery with ctx made current inside the same C
// call, as EventRecordIn records: one cgo call where WithContext around
// StreamQuery makes two to four and locks the thread. A wait that polls a
// stream (a nil-stream operation of the nccl backend) calls it in a loop.
func StreamQueryIn(ctx Context, s Stream) (done bool, err error) {
	return queryIn("cuStreamQuery", ctx, C.GC_IN_STREAM_QUERY, 0, s)
}

// StreamWaitEvent makes later work on s wait for e's last record.
func StreamWaitEvent(s Stream, e Event) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuStreamWaitEvent", C.gc_cuStreamWaitEvent(C.uintptr_t(s), C.uintptr_t(e)))
}

// EventCreate creates an event in the current context.
func EventCreate(flags uint32) (Event, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var e C.uintptr_t
	r := C.gc_cuEventCreate(&e, C.uint(flags))
	return Event(e), result("cuEventCreate", r)
}

// EventRecordIn records e on s with ctx current on the calling thread for
// the call, and another context that was current before put back (where
// none was, ctx stays current: see gc_leave), all in one C call: what
// WithContext(ctx, func() error { return EventRecord(e, s) }) does, without
// its two other cgo calls and its locked thread. An event is recorded on
// every timed iteration of a benchmark and around every operation a
// timeout watches, so the difference is measured (devmem's stream host cost).
func EventRecordIn(ctx Context, e Event, s Stream) error {
	return inCtx("cuEventRecord", ctx, C.GC_IN_EVENT_RECORD, uintptr(e), 0, 0, s)
}

// The calls below are the plain ones above with ctx made current inside
// the same C call (gc_in), as EventRecordIn and StreamQueryIn are: one cgo
// call where cuda.WithContext around the plain call makes two to four and
// locks the thread. devmem makes them on every stream-ordered copy and
// every wait for a stream or an event, several a message of the mpi
// backend's IPC path.

// inCtx makes gc_in's call op on n bytes (n checked as nbytes does; 0 for
// a call of no size) and returns its error, named call.
func inCtx(call string, ctx Context, op C.int, a, b uintptr, n int, s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	sz, err := nbytes(call, n)
	if err != nil {
		return err
	}
	out := C.gc_in(C.uintptr_t(ctx), op, C.uintptr_t(a), C.uintptr_t(b), sz, C.uintptr_t(s))
	return result(stageCall(int(out.stage), call), out.r)
}

// StreamSynchronizeIn is StreamSynchronize in ctx.
func StreamSynchronizeIn(ctx Context, s Stream) error {
	return inCtx("cuStreamSynchronize", ctx, C.GC_IN_STREAM_SYNC, 0, 0, 0, s)
}

// MemcpyHtoDAsyncIn is MemcpyHtoDAsync in ctx.
func MemcpyHtoDAsyncIn(ctx Context, dst DevicePtr, src uintptr, n int, s Stream) error {
	return inCtx("cuMemcpyHtoDAsync", ctx, C.GC_IN_HTOD_ASYNC, uintptr(dst), src, n, s)
}

// MemcpyDtoHAsyncIn is MemcpyDtoHAsync in ctx.
func MemcpyDtoHAsyncIn(ctx Context, dst uintptr, src DevicePtr, n int, s Stream) error {
	return inCtx("cuMemcpyDtoHAsync", ctx, C.GC_IN_DTOH_ASYNC, dst, uintptr(src), n, s)
}

// MemcpyDtoDAsyncIn is MemcpyDtoDAsync in ctx.
func MemcpyDtoDAsyncIn(ctx Context, dst, src DevicePtr, n int, s Stream) error {
	return inCtx("cuMemcpyDtoDAsync", ctx, C.GC_IN_DTOD_ASYNC, uintptr(dst), uintptr(src), n, s)
}

// MemsetD8AsyncIn is MemsetD8Async in ctx.
func MemsetD8AsyncIn(ctx Context, dst DevicePtr, v byte, n int, s Stream) error {
	return inCtx("cuMemsetD8Async", ctx, C.GC_IN_MEMSET_ASYNC, uintptr(dst), uintptr(v), n, s)
}

// StreamWaitEventIn is StreamWaitEvent in ctx.
func StreamWaitEventIn(ctx Context, s Stream, e Event) error {
	return inCtx("cuStreamWaitEvent", ctx, C.GC_IN_STREAM_WAIT_EVENT, uintptr(e), 0, 0, s)
}

// EventSynchronizeIn is EventSynchronize in ctx.
func EventSynchronizeIn(ctx Context, e Event) error {
	return inCtx("cuEventSynchronize", ctx, C.GC_IN_EVENT_SYNC, uintptr(e), 0, 0, 0)
}

// EventQueryIn is EventQuery in ctx.
func EventQueryIn(ctx Context, e Event) (done bool, err error) {
	return queryIn("cuEventQuery", ctx, C.GC_IN_EVENT_QUERY, uintptr(e), 0)
}

// queryIn makes gc_in's query op: done, or not yet (the call's own
// CUDA_ERROR_NOT_READY, not a context's that could not be made current).
func queryIn(call string, ctx Context, op C.int, e uintptr, s Stream) (done bool, err error) {
	if err := ready(); err != nil {
		return false, err
	}
	out := C.gc_in(C.uintptr_t(ctx), op, C.uintptr_t(e), 0, 0, C.uintptr_t(s))
	if out.r == CUDA_ERROR_NOT_READY && out.stage == 3 {
		return false, nil
	}
	return out.r == CUDA_SUCCESS, result(stageCall(int(out.stage), call), out.r)
}

// ErrorOf is the *Error of a CUresult that C code of another package got
// from call (internal/nccl's, which makes a context current itself); nil
// for CUDA_SUCCESS.
func ErrorOf(call string, code int) error { return result(call, C.CUresult(code)) }

// stageCall names the call of gc_enter's stage that failed, or call.
func stageCall(stage int, call string) string {
	switch stage {
	case 1:
		return "cuCtxGetCurrent"
	case 2:
		return "cuCtxSetCurrent"
	}
	return call
}

// CtxFuncs returns the loaded cuCtxGetCurrent and cuCtxSetCurrent, for
// another package's C code that makes a context current inside its own C
// call (internal/nccl's collectives), as EventRecordIn does here.
func CtxFuncs() (get, set uintptr, err error) {
	if err := ready(); err != nil {
		return 0, 0, err
	}
	var g, s C.uintptr_t
	C.gc_ctxfns(&g, &s)
	return uintptr(g), uintptr(s), nil
}

// EventRecord records e on s.
func EventRecord(e Event, s Stream) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuEventRecord", C.gc_cuEventRecord(C.uintptr_t(e), C.uintptr_t(s)))
}

// EventSynchronize waits until the work before e's last record is done.
func EventSynchronize(e Event) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuEventSynchronize", C.gc_cuEventSynchronize(C.uintptr_t(e)))
}

// EventQuery reports whether the work before e's last record is done.
func EventQuery(e Event) (done bool, err error) {
	if err := ready(); err != nil {
		return false, err
	}
	r := C.gc_cuEventQuery(C.uintptr_t(e))
	if r == CUDA_ERROR_NOT_READY {
		return false, nil
	}
	return r == CUDA_SUCCESS, result("cuEventQuery", r)
}

// EventElapsedTime returns the time between two recorded, completed events
// (resolution about half a microsecond).
func EventElapsedTime(start, end Event) (time.Duration, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var ms C.float
	r := C.gc_cuEventElapsedTime(&ms, C.uintptr_t(start), C.uintptr_t(end))
	return time.Duration(float64(ms) * float64(time.Millisecond)), result("cuEventElapsedTime", r)
}

// EventDestroy destroys e.
func EventDestroy(e Event) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuEventDestroy", C.gc_cuEventDestroy(C.uintptr_t(e)))
}

// IpcGetMemHandle returns a handle another process can open to map the
// allocation that p starts.
func IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	if err := ready(); err != nil {
		return h, err
	}
	r := C.gc_cuIpcGetMemHandle(unsafe.Pointer(&h), C.CUdeviceptr(p))
	return h, result("cuIpcGetMemHandle", r)
}

// IpcOpenMemHandle maps another process's allocation into the current
// context. Opening a handle twice in one process fails: cache the address.
func IpcOpenMemHandle(h IpcMemHandle, flags uint32) (DevicePtr, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var p C.CUdeviceptr
	r := C.gc_cuIpcOpenMemHandle(&p, unsafe.Pointer(&h), C.uint(flags))
	return DevicePtr(p), result("cuIpcOpenMemHandle", r)
}

// IpcCloseMemHandle unmaps memory from IpcOpenMemHandle.
func IpcCloseMemHandle(p DevicePtr) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuIpcCloseMemHandle", C.gc_cuIpcCloseMemHandle(C.CUdeviceptr(p)))
}

// IpcGetEventHandle returns a handle another process of the node can open
// to wait for e, which must have been created in the current context with
// EventInterprocess|EventDisableTiming.
func IpcGetEventHandle(e Event) (IpcEventHandle, error) {
	var h IpcEventHandle
	if err := ready(); err != nil {
		return h, err
	}
	r := C.gc_cuIpcGetEventHandle(unsafe.Pointer(&h), C.uintptr_t(e))
	return h, result("cuIpcGetEventHandle", r)
}

// IpcOpenEventHandle opens another process's event in the current context.
// The event it returns behaves as a local one created with
// EventDisableTiming; EventDestroy releases it.
func IpcOpenEventHandle(h IpcEventHandle) (Event, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var e C.uintptr_t
	r := C.gc_cuIpcOpenEventHandle(&e, unsafe.Pointer(&h))
	return Event(e), result("cuIpcOpenEventHandle", r)
}

// ModuleLoadData loads a cubin or PTX image into the current context. A NUL
// is appended, as PTX text needs one and a cubin ignores it.
func ModuleLoadData(image []byte) (Module, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	if len(image) == 0 {
		return 0, fmt.Errorf("cuda: cuModuleLoadData: empty image: %w", errs.ErrInvalidArgument)
	}
	buf := C.malloc(C.size_t(len(image) + 1))
	defer C.free(buf)
	b := unsafe.Slice((*byte)(buf), len(image)+1)
	copy(b, image)
	b[len(image)] = 0
	var m C.uintptr_t
	r := C.gc_cuModuleLoadData(&m, buf)
	return Module(m), result("cuModuleLoadData", r)
}

// ModuleGetFunction returns the kernel called name (its extern "C" name).
func ModuleGetFunction(m Module, name string) (Function, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	if r := C.gc_cuModuleGetFunction(&f, C.uintptr_t(m), cname); r != CUDA_SUCCESS {
		return 0, fmt.Errorf("kernel %q: %w", name, result("cuModuleGetFunction", r))
	}
	return Function(f), nil
}

// ModuleUnload unloads m.
func ModuleUnload(m Module) error {
	if err := ready(); err != nil {
		return err
	}
	return result("cuModuleUnload", C.gc_cuModuleUnload(C.uintptr_t(m)))
}

// LaunchKernel queues f on s. Each argument is one kernel parameter already
// packed at its C size (see Arg). They are copied into one C block, values
// after the pointer array, since C may not hold Go pointers; the driver has
// read them when the call returns, so the block is freed then.
func LaunchKernel(f Function, grid, block Dim3, sharedMem int, s Stream, args ...[]byte) error {
	if err := ready(); err != nil {
		return err
	}
	if sharedMem < 0 || sharedMem > 1<<32-1 {
		return fmt.Errorf("cuda: cuLaunchKernel: shared memory %d bytes: %w", sharedMem, errs.ErrInvalidArgument)
	}
	var params unsafe.Pointer
	if len(args) > 0 {
		ptrSize := int(unsafe.Sizeof(uintptr(0)))
		offs := make([]int, len(args))
		end := len(args) * ptrSize
		for i, a := range args {
			if len(a) == 0 {
				return fmt.Errorf("cuda: cuLaunchKernel: argument %d is empty: %w", i, errs.ErrInvalidArgument)
			}
			al := argAlign(len(a))
			offs[i] = (end + al - 1) / al * al
			end = offs[i] + len(a)
		}
		params = C.malloc(C.size_t(end))
		defer C.free(params)
		// uintptr slots: the block holds C addresses, never Go pointers.
		slots := unsafe.Slice((*uintptr)(params), len(args))
		data := unsafe.Slice((*byte)(params), end)
		for i, a := range args {
			copy(data[offs[i]:], a)
			slots[i] = uintptr(params) + uintptr(offs[i])
		}
	}
	r := C.gc_cuLaunchKernel(C.uintptr_t(f),
		C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z),
		C.uint(block.X), C.uint(block.Y), C.uint(block.Z),
		C.uint(sharedMem), C.uintptr_t(s), params)
	return result("cuLaunchKernel", r)
}

// maxKernelArgs is the most parameters LaunchKernelIn passes in its one C
// call; a launch with more goes through WithContext and LaunchKernel.
const maxKernelArgs = C.GC_MAX_KERNEL_ARGS

// LaunchKernelIn is LaunchKernel with ctx made current inside the same C
// call (as EventRecordIn): one cgo call a launch, where cuda.WithContext
// around LaunchKernel makes three more and LaunchKernel two (the parameter
// block's malloc and free). The parameters go in one Go buffer that holds
// no pointers: their offsets (int32) first, then each value at its
// alignment from a 16-byte boundary, as in LaunchKernel's block; the C side
// builds the pointer array on its own stack for the call, and the driver
// copies the values before cuLaunchKernel returns. Unlike LaunchKernel's
// WithContext, a thread that had no context current keeps ctx (as
// EventRecordIn); the fallback past maxKernelArgs puts back none.
func LaunchKernelIn(ctx Context, f Function, grid, block Dim3, sharedMem int, s Stream, args ...[]byte) error {
	if err := ready(); err != nil {
		return err
	}
	if sharedMem < 0 || sharedMem > 1<<32-1 {
		return fmt.Errorf("cuda: cuLaunchKernel: shared memory %d bytes: %w", sharedMem, errs.ErrInvalidArgument)
	}
	if len(args) > maxKernelArgs {
		// More than the C side's array holds: LaunchKernel's own block.
		return WithContext(ctx, func() error { return LaunchKernel(f, grid, block, sharedMem, s, args...) })
	}
	end := 0
	for i, a := range args {
		if len(a) == 0 {
			return fmt.Errorf("cuda: cuLaunchKernel: argument %d is empty: %w", i, errs.ErrInvalidArgument)
		}
		al := argAlign(len(a))
		end = (end+al-1)/al*al + len(a)
	}
	// One allocation: the offsets, then up to 15 bytes to reach a 16-byte
	// boundary (the largest alignment argAlign asks for; the buffer is
	// 8-byte aligned), then the values.
	head := (4*len(args) + 7) / 8 * 8
	words := make([]uint64, (head+8+end)/8+1)
	all := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	offs := unsafe.Slice((*int32)(unsafe.Pointer(&words[0])), len(args))
	base := head + int(-(uintptr(unsafe.Pointer(&words[0]))+uintptr(head))&15)
	data := all[base:]
	end = 0
	for i, a := range args {
		al := argAlign(len(a))
		end = (end + al - 1) / al * al
		offs[i] = int32(end)
		copy(data[end:], a)
		end += len(a)
	}
	out := C.gc_cuLaunchKernelIn(C.uintptr_t(ctx), C.uintptr_t(f),
		C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z),
		C.uint(block.X), C.uint(block.Y), C.uint(block.Z),
		C.uint(sharedMem), C.uintptr_t(s), (*C.uchar)(unsafe.Pointer(&words[0])), C.int(base), C.int(len(args)))
	return result(stageCall(int(out.stage), "cuLaunchKernel"), out.r)
}

// argAlign is the alignment a kernel argument of n bytes gets in the
// parameter block: natural for scalars, at most 16.
func argAlign(n int) int {
	a := 1
	for a < n && a < 16 {
		a <<= 1
	}
	return a
}

// vmmSlots are the calls VMM needs; all or none are used.
var vmmSlots = []C.int{
	C.F_cuMemGetAllocationGranularity, C.F_cuMemCreate, C.F_cuMemRelease, C.F_cuMemAddressReserve,
	C.F_cuMemAddressFree, C.F_cuMemMap, C.F_cuMemUnmap, C.F_cuMemSetAccess,
	C.F_cuMemExportToShareableHandle, C.F_cuMemImportFromShareableHandle,
}

// HasVMM reports whether the loaded driver has every virtual memory
// management call (cuMemCreate and the rest); false before Load succeeds.
// Whether a device supports them is DeviceAttribute's
// AttrVirtualMemoryManagementSupported and AttrHandleTypePosixFDSupported.
func HasVMM() bool {
	if ready() != nil {
		return false
	}
	for _, s := range vmmSlots {
		if C.gpucomm_cu_has(s) == 0 {
			return false
		}
	}
	return true
}

// vmmReady loads the library and checks that call is there.
func vmmReady(call string) error {
	if err := ready(); err != nil {
		return err
	}
	if !HasVMM() {
		return fmt.Errorf("cuda: %s: the driver lacks virtual memory management (CUDA 10.2 or later): %w", call, errs.ErrUnsupported)
	}
	return nil
}

// MemGetAllocationGranularity returns the granularity, in bytes, of MemCreate
// allocations on d: their sizes, and the reserved ranges they are mapped at,
// are multiples of it.
func MemGetAllocationGranularity(d Device) (int, error) {
	if err := vmmReady("cuMemGetAllocationGranularity"); err != nil {
		return 0, err
	}
	var g C.size_t
	r := C.gc_cuMemGetAllocationGranularity(&g, C.int(d))
	return int(g), result("cuMemGetAllocationGranularity", r)
}

// MemCreate allocates n bytes (a multiple of the granularity) of pinned
// memory on device d that MemExportToShareableHandle can export as a POSIX
// file descriptor. Nothing maps it yet.
func MemCreate(n int, d Device) (MemHandle, error) {
	if err := vmmReady("cuMemCreate"); err != nil {
		return 0, err
	}
	sz, err := nbytes("cuMemCreate", n)
	if err != nil {
		return 0, err
	}
	var h C.CUmemGenericAllocationHandle
	r := C.gc_cuMemCreate(&h, sz, C.int(d))
	return MemHandle(h), result("cuMemCreate", r)
}

// MemRelease drops a handle from MemCreate or MemImportFromShareableHandle;
// the memory goes once nothing maps it either.
func MemRelease(h MemHandle) error {
	if err := vmmReady("cuMemRelease"); err != nil {
		return err
	}
	return result("cuMemRelease", C.gc_cuMemRelease(C.CUmemGenericAllocationHandle(h)))
}

// MemAddressReserve reserves n bytes of device address space aligned to align
// (0: the granularity).
func MemAddressReserve(n, align int) (DevicePtr, error) {
	if err := vmmReady("cuMemAddressReserve"); err != nil {
		return 0, err
	}
	sz, err := nbytes("cuMemAddressReserve", n)
	if err != nil {
		return 0, err
	}
	al, err := nbytes("cuMemAddressReserve", align)
	if err != nil {
		return 0, err
	}
	var p C.CUdeviceptr
	r := C.gc_cuMemAddressReserve(&p, sz, al)
	return DevicePtr(p), result("cuMemAddressReserve", r)
}

// MemAddressFree returns a range from MemAddressReserve.
func MemAddressFree(p DevicePtr, n int) error {
	if err := vmmReady("cuMemAddressFree"); err != nil {
		return err
	}
	sz, err := nbytes("cuMemAddressFree", n)
	if err != nil {
		return err
	}
	return result("cuMemAddressFree", C.gc_cuMemAddressFree(C.CUdeviceptr(p), sz))
}

// MemMap maps all n bytes of h at p, a reserved range.
func MemMap(p DevicePtr, n int, h MemHandle) error {
	if err := vmmReady("cuMemMap"); err != nil {
		return err
	}
	sz, err := nbytes("cuMemMap", n)
	if err != nil {
		return err
	}
	return result("cuMemMap", C.gc_cuMemMap(C.CUdeviceptr(p), sz, C.CUmemGenericAllocationHandle(h)))
}

// MemUnmap unmaps what MemMap mapped at p.
func MemUnmap(p DevicePtr, n int) error {
	if err := vmmReady("cuMemUnmap"); err != nil {
		return err
	}
	sz, err := nbytes("cuMemUnmap", n)
	if err != nil {
		return err
	}
	return result("cuMemUnmap", C.gc_cuMemUnmap(C.CUdeviceptr(p), sz))
}

// MemSetAccess lets device d read and write the n mapped bytes at p.
func MemSetAccess(p DevicePtr, n int, d Device) error {
	if err := vmmReady("cuMemSetAccess"); err != nil {
		return err
	}
	sz, err := nbytes("cuMemSetAccess", n)
	if err != nil {
		return err
	}
	return result("cuMemSetAccess", C.gc_cuMemSetAccess(C.CUdeviceptr(p), sz, C.int(d)))
}

// MemExportToShareableHandle returns a new file descriptor for h's memory,
// which another process imports with MemImportFromShareableHandle. The
// caller closes it.
func MemExportToShareableHandle(h MemHandle) (fd int, err error) {
	if err := vmmReady("cuMemExportToShareableHandle"); err != nil {
		return -1, err
	}
	v := C.int(-1)
	r := C.gc_cuMemExportToShareableHandle(&v, C.CUmemGenericAllocationHandle(h))
	if r != CUDA_SUCCESS {
		return -1, result("cuMemExportToShareableHandle", r)
	}
	return int(v), nil
}

// MemImportFromShareableHandle returns a handle to the memory fd names (a
// descriptor from MemExportToShareableHandle, maybe of another process). The
// caller still owns fd.
func MemImportFromShareableHandle(fd int) (MemHandle, error) {
	if err := vmmReady("cuMemImportFromShareableHandle"); err != nil {
		return 0, err
	}
	if fd < 0 || fd > 1<<31-1 {
		return 0, fmt.Errorf("cuda: cuMemImportFromShareableHandle: descriptor %d: %w", fd, errs.ErrInvalidArgument)
	}
	var h C.CUmemGenericAllocationHandle
	r := C.gc_cuMemImportFromShareableHandle(&h, C.int(fd))
	return MemHandle(h), result("cuMemImportFromShareableHandle", r)
}

// reset forgets the loaded library, so that a test can load another one.
func reset() { driver.Reset(func() { C.gpucomm_cu_clear() }) }

// TimeCalls makes n calls of kind back to back inside one C call and
// returns the host time they took: a driver call's cost with no cgo
// crossing, beside the same call made from Go once a call (NoopCall times
// the crossing alone). For the records, e and s are an event and a stream
// of ctx, and the calls other than CallEventRecordInCtx need ctx current on
// the calling thread (WithContext). Used by benchmarks (issue 23.2).
func TimeCalls(kind CallKind, n int, ctx Context, e Event, s Stream) (time.Duration, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	if kind < CallNothing || kind > CallEventRecordInCtx || n < 0 || n > 1<<30 {
		return 0, fmt.Errorf("cuda: TimeCalls(%d, %d): %w", kind, n, errs.ErrInvalidArgument)
	}
	var last C.CUresult
	ns := C.gc_time_calls(C.int(kind), C.int(n), C.uintptr_t(ctx), C.uintptr_t(e), C.uintptr_t(s), &last)
	return time.Duration(ns), result("TimeCalls", last)
}

// NoopCall is one cgo call of a C function that does nothing: the cost of
// crossing from Go to C and back, for benchmarks.
func NoopCall() { C.gc_noop() }

// TimeWait queues a device-to-device copy of n bytes on s and waits for it
// inside one C call, by cuStreamSynchronize or (poll) by calling
// cuStreamQuery until the stream is done, and returns the host time from
// before the copy was queued to the end of the wait, and the number of
// queries. ctx must be current on the calling thread. For benchmarks
// (issue 23.2: gpucomm's waits on no stream against C's).
func TimeWait(poll bool, dst, src DevicePtr, n int, s Stream) (time.Duration, int64, error) {
	if err := ready(); err != nil {
		return 0, 0, err
	}
	sz, err := nbytes("TimeWait", n)
	if err != nil {
		return 0, 0, err
	}
	kind := C.int(0)
	if poll {
		kind = 1
	}
	var polls C.int64_t
	var last C.CUresult
	ns := C.gc_time_wait(kind, C.CUdeviceptr(dst), C.CUdeviceptr(src), sz, C.uintptr_t(s), &polls, &last)
	return time.Duration(ns), int64(polls), result("TimeWait", last)
}
