// gpucomm's own declarations of the few CUDA driver API types and calls it
// uses, called through a table of function pointers filled by dlsym at run
// time (see Load). Only cuda_cgo.go includes this file: the table is static.
//
// Every trampoline takes handles and host addresses as uintptr_t so that Go
// never converts an integer back into a pointer.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct gpucomm_CUctx* CUcontext;
typedef struct gpucomm_CUstream* CUstream;
typedef struct gpucomm_CUevent* CUevent;
typedef struct gpucomm_CUmodule* CUmodule;
typedef struct gpucomm_CUfunction* CUfunction;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { char reserved[64]; } CUipcEventHandle;
typedef struct { char bytes[16]; } CUuuid;

// Virtual memory management (CUDA 10.2+), as cuda.h declares it: a physical
// allocation (CUmemGenericAllocationHandle) mapped into a reserved range.
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
	int type;                 // CUmemAllocationType
	int requestedHandleTypes; // CUmemAllocationHandleType
	CUmemLocation location;
	void* win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;
enum {
	GC_MEM_ALLOCATION_TYPE_PINNED = 1,
	GC_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
	GC_MEM_LOCATION_TYPE_DEVICE = 1,
	GC_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
	GC_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
};

// One slot per call; the Go table symbols names the library symbol of each.
enum {
	F_cuInit, F_cuDriverGetVersion, F_cuGetErrorName, F_cuGetErrorString,
	F_cuDeviceGetCount, F_cuDeviceGet, F_cuDeviceGetName, F_cuDeviceGetUuid,
	F_cuDeviceTotalMem, F_cuDeviceGetAttribute, F_cuDeviceGetPCIBusId,
	F_cuDeviceCanAccessPeer,
	F_cuDevicePrimaryCtxRetain, F_cuDevicePrimaryCtxRelease,
	F_cuCtxSetCurrent, F_cuCtxGetCurrent, F_cuCtxSynchronize, F_cuCtxEnablePeerAccess,
	F_cuMemAlloc, F_cuMemFree, F_cuMemAllocHost, F_cuMemFreeHost,
	F_cuMemHostRegister, F_cuMemHostUnregister,
	F_cuMemcpyHtoD, F_cuMemcpyDtoH, F_cuMemcpyDtoD,
	F_cuMemcpyHtoDAsync, F_cuMemcpyDtoHAsync, F_cuMemcpyDtoDAsync,
	F_cuMemcpyPeer, F_cuMemcpyPeerAsync, F_cuMemsetD8, F_cuMemsetD8Async,
	F_cuMemGetInfo, F_cuMemGetAddressRange,
	F_cuStreamCreate, F_cuStreamDestroy, F_cuStreamSynchronize, F_cuStreamQuery,
	F_cuStreamWaitEvent,
	F_cuEventCreate, F_cuEventRecord, F_cuEventSynchronize, F_cuEventQuery,
	F_cuEventElapsedTime, F_cuEventDestroy,
	F_cuIpcGetMemHandle, F_cuIpcOpenMemHandle, F_cuIpcCloseMemHandle,
	F_cuIpcGetEventHandle, F_cuIpcOpenEventHandle,
	F_cuModuleLoadData, F_cuModuleGetFunction, F_cuModuleUnload, F_cuLaunchKernel,
	// Optional: a driver without them loads, and VMM calls say so.
	F_cuMemGetAllocationGranularity, F_cuMemCreate, F_cuMemRelease,
	F_cuMemAddressReserve, F_cuMemAddressFree, F_cuMemMap, F_cuMemUnmap, F_cuMemSetAccess,
	F_cuMemExportToShareableHandle, F_cuMemImportFromShareableHandle,
	F_count
};

static void* gpucomm_cu[F_count];
static void gpucomm_cu_set(int slot, void* fn) { gpucomm_cu[slot] = fn; }
static void gpucomm_cu_clear(void) { for (int i = 0; i < F_count; i++) gpucomm_cu[i] = NULL; }
static int gpucomm_cu_has(int slot) { return gpucomm_cu[slot] != NULL; }

// CU(name, (param types)) is the table entry for name cast to its prototype.
#define CU(name, params) ((CUresult (*) params) gpucomm_cu[F_##name])
#define H(T, v) ((T)(v))

// NULL when the library gives no name, so that Go falls back to its table.
static const char* gc_errorName(CUresult r) {
	const char* s = NULL;
	if (!gpucomm_cu[F_cuGetErrorName] || CU(cuGetErrorName, (CUresult, const char**))(r, &s) != 0) return NULL;
	return s;
}
static const char* gc_errorString(CUresult r) {
	const char* s = NULL;
	if (!gpucomm_cu[F_cuGetErrorString] || CU(cuGetErrorString, (CUresult, const char**))(r, &s) != 0) return NULL;
	return s;
}

static CUresult gc_cuInit(unsigned flags) { return CU(cuInit, (unsigned))(flags); }
static CUresult gc_cuDriverGetVersion(int* v) { return CU(cuDriverGetVersion, (int*))(v); }
static CUresult gc_cuDeviceGetCount(int* n) { return CU(cuDeviceGetCount, (int*))(n); }
static CUresult gc_cuDeviceGet(CUdevice* d, int ordinal) { return CU(cuDeviceGet, (CUdevice*, int))(d, ordinal); }
static CUresult gc_cuDeviceGetName(char* name, int len, CUdevice d) { return CU(cuDeviceGetName, (char*, int, CUdevice))(name, len, d); }
static CUresult gc_cuDeviceGetUuid(void* uuid, CUdevice d) { return CU(cuDeviceGetUuid, (CUuuid*, CUdevice))((CUuuid*)uuid, d); }
static CUresult gc_cuDeviceTotalMem(size_t* n, CUdevice d) { return CU(cuDeviceTotalMem, (size_t*, CUdevice))(n, d); }
static CUresult gc_cuDeviceGetAttribute(int* v, int attr, CUdevice d) { return CU(cuDeviceGetAttribute, (int*, int, CUdevice))(v, attr, d); }
static CUresult gc_cuDeviceGetPCIBusId(char* id, int len, CUdevice d) { return CU(cuDeviceGetPCIBusId, (char*, int, CUdevice))(id, len, d); }
static CUresult gc_cuDeviceCanAccessPeer(int* can, CUdevice d, CUdevice peer) { return CU(cuDeviceCanAccessPeer, (int*, CUdevice, CUdevice))(can, d, peer); }

static CUresult gc_cuDevicePrimaryCtxRetain(uintptr_t* ctx, CUdevice d) {
	CUcontext c = NULL;
	CUresult r = CU(cuDevicePrimaryCtxRetain, (CUcontext*, CUdevice))(&c, d);
	*ctx = (uintptr_t)c;
	return r;
}
static CUresult gc_cuDevicePrimaryCtxRelease(CUdevice d) { return CU(cuDevicePrimaryCtxRelease, (CUdevice))(d); }
static CUresult gc_cuCtxSetCurrent(uintptr_t ctx) { return CU(cuCtxSetCurrent, (CUcontext))(H(CUcontext, ctx)); }
static CUresult gc_cuCtxGetCurrent(uintptr_t* ctx) {
	CUcontext c = NULL;
	CUresult r = CU(cuCtxGetCurrent, (CUcontext*))(&c);
	*ctx = (uintptr_t)c;
	return r;
}
// gc_enter makes ctx current on this thread and leaves in *prev what was
// current; gc_leave puts back another context that was current, and leaves
// ctx current where none was: Go's threads start with none and carry no
// other library's, and the next call on the thread then finds ctx current
// and sets nothing (one driver call a call instead of three; the cudaaware
// backend's MPI threads keep the context so too). Both run inside one C call of the caller's
// (gc_in and gc_cuLaunchKernelIn here; internal/nccl's collectives through the two
// pointers gc_ctxfns hands out), so no Go thread switch can come between
// them: one cgo call where cuda.WithContext makes three and locks the
// goroutine to its thread. *stage says which call failed: 1 get, 2 set.
static CUresult gc_enter(uintptr_t ctx, CUcontext* prev, int* stage) {
	*stage = 1;
	CUresult r = CU(cuCtxGetCurrent, (CUcontext*))(prev);
	if (r != 0) return r;
	if (*prev != H(CUcontext, ctx)) {
		*stage = 2;
		r = CU(cuCtxSetCurrent, (CUcontext))(H(CUcontext, ctx));
	}
	return r;
}
static void gc_leave(uintptr_t ctx, CUcontext prev) {
	if (prev != NULL && prev != H(CUcontext, ctx)) CU(cuCtxSetCurrent, (CUcontext))(prev);
}
// gc_staged is a call's result and the stage it came from, returned by
// value: a stage written through a pointer from Go would move to the heap,
// an allocation on every event record and stream poll.
typedef struct { CUresult r; int stage; } gc_staged;
static void gc_ctxfns(uintptr_t* get, uintptr_t* set) {
	*get = (uintptr_t)gpucomm_cu[F_cuCtxGetCurrent];
	*set = (uintptr_t)gpucomm_cu[F_cuCtxSetCurrent];
}
static CUresult gc_cuCtxSynchronize(void) { return CU(cuCtxSynchronize, (void))(); }
static CUresult gc_cuCtxEnablePeerAccess(uintptr_t peer, unsigned flags) { return CU(cuCtxEnablePeerAccess, (CUcontext, unsigned))(H(CUcontext, peer), flags); }

static CUresult gc_cuMemAlloc(CUdeviceptr* p, size_t n) { return CU(cuMemAlloc, (CUdeviceptr*, size_t))(p, n); }
static CUresult gc_cuMemFree(CUdeviceptr p) { return CU(cuMemFree, (CUdeviceptr))(p); }
static CUresult gc_cuMemAllocHost(void** p, size_t n) { return CU(cuMemAllocHost, (void**, size_t))(p, n); }
static CUresult gc_cuMemFreeHost(void* p) { return CU(cuMemFreeHost, (void*))(p); }
static CUresult gc_cuMemHostRegister(uintptr_t p, size_t n, unsigned flags) { return CU(cuMemHostRegister, (void*, size_t, unsigned))(H(void*, p), n, flags); }
static CUresult gc_cuMemHostUnregister(uintptr_t p) { return CU(cuMemHostUnregister, (void*))(H(void*, p)); }

// The Go-memory variants take void* so that cgo sees (and pins) the Go
// pointer for the length of the blocking call.
static CUresult gc_cuMemcpyHtoDGo(CUdeviceptr dst, const void* src, size_t n) { return CU(cuMemcpyHtoD, (CUdeviceptr, const void*, size_t))(dst, src, n); }
static CUresult gc_cuMemcpyDtoHGo(void* dst, CUdeviceptr src, size_t n) { return CU(cuMemcpyDtoH, (void*, CUdeviceptr, size_t))(dst, src, n); }
static CUresult gc_cuMemcpyHtoD(CUdeviceptr dst, uintptr_t src, size_t n) { return gc_cuMemcpyHtoDGo(dst, H(const void*, src), n); }
static CUresult gc_cuMemcpyDtoH(uintptr_t dst, CUdeviceptr src, size_t n) { return gc_cuMemcpyDtoHGo(H(void*, dst), src, n); }
static CUresult gc_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) { return CU(cuMemcpyDtoD, (CUdeviceptr, CUdeviceptr, size_t))(dst, src, n); }
static CUresult gc_cuMemcpyHtoDAsync(CUdeviceptr dst, uintptr_t src, size_t n, uintptr_t s) { return CU(cuMemcpyHtoDAsync, (CUdeviceptr, const void*, size_t, CUstream))(dst, H(const void*, src), n, H(CUstream, s)); }
static CUresult gc_cuMemcpyDtoHAsync(uintptr_t dst, CUdeviceptr src, size_t n, uintptr_t s) { return CU(cuMemcpyDtoHAsync, (void*, CUdeviceptr, size_t, CUstream))(H(void*, dst), src, n, H(CUstream, s)); }
static CUresult gc_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s) { return CU(cuMemcpyDtoDAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))(dst, src, n, H(CUstream, s)); }
static CUresult gc_cuMemcpyPeer(CUdeviceptr dst, uintptr_t dctx, CUdeviceptr src, uintptr_t sctx, size_t n) {
	return CU(cuMemcpyPeer, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t))(dst, H(CUcontext, dctx), src, H(CUcontext, sctx), n);
}
static CUresult gc_cuMemcpyPeerAsync(CUdeviceptr dst, uintptr_t dctx, CUdeviceptr src, uintptr_t sctx, size_t n, uintptr_t s) {
	return CU(cuMemcpyPeerAsync, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream))(dst, H(CUcontext, dctx), src, H(CUcontext, sctx), n, H(CUstream, s));
}
static CUresult gc_cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n) { return CU(cuMemsetD8, (CUdeviceptr, unsigned char, size_t))(dst, v, n); }
static CUresult gc_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, uintptr_t s) { return CU(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))(dst, v, n, H(CUstream, s)); }
static CUresult gc_cuMemGetInfo(size_t* free, size_t* total) { return CU(cuMemGetInfo, (size_t*, size_t*))(free, total); }
static CUresult gc_cuMemGetAddressRange(CUdeviceptr* base, size_t* n, CUdeviceptr p) { return CU(cuMemGetAddressRange, (CUdeviceptr*, size_t*, CUdeviceptr))(base, n, p); }

static CUresult gc_cuStreamCreate(uintptr_t* s, unsigned flags) {
	CUstream h = NULL;
	CUresult r = CU(cuStreamCreate, (CUstream*, unsigned))(&h, flags);
	*s = (uintptr_t)h;
	return r;
}
static CUresult gc_cuStreamDestroy(uintptr_t s) { return CU(cuStreamDestroy, (CUstream))(H(CUstream, s)); }
static CUresult gc_cuStreamSynchronize(uintptr_t s) { return CU(cuStreamSynchronize, (CUstream))(H(CUstream, s)); }
static CUresult gc_cuStreamQuery(uintptr_t s) { return CU(cuStreamQuery, (CUstream))(H(CUstream, s)); }
static CUresult gc_cuStreamWaitEvent(uintptr_t s, uintptr_t e) { return CU(cuStreamWaitEvent, (CUstream, CUevent, unsigned))(H(CUstream, s), H(CUevent, e), 0); }

static CUresult gc_cuEventCreate(uintptr_t* e, unsigned flags) {
	CUevent h = NULL;
	CUresult r = CU(cuEventCreate, (CUevent*, unsigned))(&h, flags);
	*e = (uintptr_t)h;
	return r;
}
static CUresult gc_cuEventRecord(uintptr_t e, uintptr_t s) { return CU(cuEventRecord, (CUevent, CUstream))(H(CUevent, e), H(CUstream, s)); }
static CUresult gc_cuEventSynchronize(uintptr_t e) { return CU(cuEventSynchronize, (CUevent))(H(CUevent, e)); }
static CUresult gc_cuEventQuery(uintptr_t e) { return CU(cuEventQuery, (CUevent))(H(CUevent, e)); }
static CUresult gc_cuEventElapsedTime(float* ms, uintptr_t start, uintptr_t end) { return CU(cuEventElapsedTime, (float*, CUevent, CUevent))(ms, H(CUevent, start), H(CUevent, end)); }
static CUresult gc_cuEventDestroy(uintptr_t e) { return CU(cuEventDestroy, (CUevent))(H(CUevent, e)); }

// gc_in makes one driver call, op, with ctx current, in one C call of Go's,
// as internal/nccl's collectives do: the calls that a stream-ordered operation
// makes on every message or chunk (a copy or a memset queued on a stream, a
// wait for a stream or an event, an event's record, a poll of a stream),
// which cuda.WithContext surrounds with two or three more cgo calls and a
// locked thread. a and b are the call's pointers or event (or the memset's
// byte in b), n its bytes, s its stream.
enum {
	GC_IN_STREAM_SYNC = 1, GC_IN_HTOD_ASYNC, GC_IN_DTOH_ASYNC, GC_IN_DTOD_ASYNC,
	GC_IN_MEMSET_ASYNC, GC_IN_STREAM_WAIT_EVENT, GC_IN_EVENT_SYNC, GC_IN_EVENT_QUERY,
	GC_IN_EVENT_RECORD, GC_IN_STREAM_QUERY,
};
static gc_staged gc_in(uintptr_t ctx, int op, uintptr_t a, uintptr_t b, size_t n, uintptr_t s) {
	gc_staged out = {0, 3};
	if (op < GC_IN_STREAM_SYNC || op > GC_IN_STREAM_QUERY) {
		out.r = 1; // CUDA_ERROR_INVALID_VALUE: not a call of gc_in's
		return out;
	}
	CUcontext prev = NULL;
	out.r = gc_enter(ctx, &prev, &out.stage);
	if (out.r != 0) return out;
	out.stage = 3;
	switch (op) {
	case GC_IN_STREAM_SYNC: out.r = gc_cuStreamSynchronize(s); break;
	case GC_IN_HTOD_ASYNC: out.r = gc_cuMemcpyHtoDAsync((CUdeviceptr)a, b, n, s); break;
	case GC_IN_DTOH_ASYNC: out.r = gc_cuMemcpyDtoHAsync(a, (CUdeviceptr)b, n, s); break;
	case GC_IN_DTOD_ASYNC: out.r = gc_cuMemcpyDtoDAsync((CUdeviceptr)a, (CUdeviceptr)b, n, s); break;
	case GC_IN_MEMSET_ASYNC: out.r = gc_cuMemsetD8Async((CUdeviceptr)a, (unsigned char)b, n, s); break;
	case GC_IN_STREAM_WAIT_EVENT: out.r = gc_cuStreamWaitEvent(s, a); break;
	case GC_IN_EVENT_SYNC: out.r = gc_cuEventSynchronize(a); break;
	case GC_IN_EVENT_QUERY: out.r = gc_cuEventQuery(a); break;
	case GC_IN_EVENT_RECORD: out.r = gc_cuEventRecord(a, s); break;
	case GC_IN_STREAM_QUERY: out.r = gc_cuStreamQuery(s); break;
	}
	gc_leave(ctx, prev);
	return out;
}

// gc_time_calls makes n calls of one kind back to back in C and returns
// the nanoseconds they took by the host's monotonic clock: what a call
// costs with no cgo crossing around it, beside the same call made from Go
// (internal/cuda's BenchmarkGPUHostCallCost, issue 23.2). kind 0: nothing
// (the loop), 1: cuCtxGetCurrent, 2: cuEventRecord(e, s), 3: gc_in's
// record (the context checked first, as EventRecordIn records).
static int64_t gc_time_calls(int kind, int n, uintptr_t ctx, uintptr_t e, uintptr_t s, CUresult* last) {
	struct timespec t0, t1;
	CUcontext c = NULL;
	*last = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n && *last == 0; i++) { // the first error ends the loop
		switch (kind) {
		case 1: *last = CU(cuCtxGetCurrent, (CUcontext*))(&c); break;
		case 2: *last = gc_cuEventRecord(e, s); break;
		case 3: *last = gc_in(ctx, GC_IN_EVENT_RECORD, e, 0, 0, s).r; break;
		default: __asm__ volatile("" ::: "memory"); break;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
}
static void gc_noop(void) {}
// gc_time_wait queues a copy of n bytes on s and waits for it, all in C,
// returning the nanoseconds from before the copy was queued to the end of
// the wait: kind 0 waits in cuStreamSynchronize, kind 1 polls cuStreamQuery
// in a loop (*polls counts the queries). What a wait's way costs, with no
// Go between (internal/cuda's BenchmarkGPUWaitLatency, issue 23.2).
static int64_t gc_time_wait(int kind, CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s, int64_t* polls, CUresult* last) {
	struct timespec t0, t1;
	*polls = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	*last = gc_cuMemcpyDtoDAsync(dst, src, n, s);
	if (*last == 0) {
		if (kind == 0) {
			*last = gc_cuStreamSynchronize(s);
		} else {
			do {
				*last = gc_cuStreamQuery(s);
				(*polls)++;
			} while (*last == 600); // CUDA_ERROR_NOT_READY
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
}

static CUresult gc_cuIpcGetMemHandle(void* h, CUdeviceptr p) { return CU(cuIpcGetMemHandle, (CUipcMemHandle*, CUdeviceptr))((CUipcMemHandle*)h, p); }
// The handle travels by value, as the driver's prototype says.
static CUresult gc_cuIpcOpenMemHandle(CUdeviceptr* p, const void* h, unsigned flags) {
	CUipcMemHandle v;
	for (int i = 0; i < 64; i++) v.reserved[i] = ((const char*)h)[i];
	return CU(cuIpcOpenMemHandle, (CUdeviceptr*, CUipcMemHandle, unsigned))(p, v, flags);
}
static CUresult gc_cuIpcCloseMemHandle(CUdeviceptr p) { return CU(cuIpcCloseMemHandle, (CUdeviceptr))(p); }
static CUresult gc_cuIpcGetEventHandle(void* h, uintptr_t e) { return CU(cuIpcGetEventHandle, (CUipcEventHandle*, CUevent))((CUipcEventHandle*)h, H(CUevent, e)); }
// By value too, as the memory handle.
static CUresult gc_cuIpcOpenEventHandle(uintptr_t* e, const void* h) {
	CUipcEventHandle v;
	for (int i = 0; i < 64; i++) v.reserved[i] = ((const char*)h)[i];
	CUevent ev = NULL;
	CUresult r = CU(cuIpcOpenEventHandle, (CUevent*, CUipcEventHandle))(&ev, v);
	*e = (uintptr_t)ev;
	return r;
}

static CUresult gc_cuModuleLoadData(uintptr_t* m, const void* image) {
	CUmodule h = NULL;
	CUresult r = CU(cuModuleLoadData, (CUmodule*, const void*))(&h, image);
	*m = (uintptr_t)h;
	return r;
}
static CUresult gc_cuModuleGetFunction(uintptr_t* f, uintptr_t m, const char* name) {
	CUfunction h = NULL;
	CUresult r = CU(cuModuleGetFunction, (CUfunction*, CUmodule, const char*))(&h, H(CUmodule, m), name);
	*f = (uintptr_t)h;
	return r;
}
static CUresult gc_cuModuleUnload(uintptr_t m) { return CU(cuModuleUnload, (CUmodule))(H(CUmodule, m)); }
// params is an array of pointers to the argument values (LaunchKernel's
// C-allocated block; gc_cuLaunchKernelIn's array on its stack).
static CUresult gc_cuLaunchKernel(uintptr_t f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, uintptr_t s, void* params) {
	return CU(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**))(
		H(CUfunction, f), gx, gy, gz, bx, by, bz, shmem, H(CUstream, s), (void**)params, NULL);
}

// gc_cuLaunchKernelIn launches f with ctx current (as gc_in). buf is Go
// memory holding no pointers: nargs int32 offsets first, then the values,
// parameter i at buf + base + offs[i]; the pointer array is built here, on
// the C stack, and the driver copies the values before it returns: one C
// call, where LaunchKernel's parameter block costs a malloc and a free.
#define GC_MAX_KERNEL_ARGS 64
static gc_staged gc_cuLaunchKernelIn(uintptr_t ctx, uintptr_t f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, uintptr_t s,
		unsigned char* buf, int base, int nargs) {
	gc_staged out = {0, 3};
	void* slots[GC_MAX_KERNEL_ARGS];
	if (nargs < 0 || nargs > GC_MAX_KERNEL_ARGS) {
		out.r = 1; // CUDA_ERROR_INVALID_VALUE; Go checks first
		return out;
	}
	const int32_t* offs = (const int32_t*)buf;
	for (int i = 0; i < nargs; i++) slots[i] = buf + base + offs[i];
	CUcontext prev = NULL;
	out.r = gc_enter(ctx, &prev, &out.stage);
	if (out.r != 0) return out;
	out.stage = 3;
	out.r = gc_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, nargs > 0 ? (void*)slots : NULL);
	gc_leave(ctx, prev);
	return out;
}

// VMM. Allocations are always pinned device memory on one device, exportable
// as a POSIX file descriptor; access is read/write for that device.
static void gc_vmmProp(CUmemAllocationProp* p, int dev) {
	char* b = (char*)p;
	for (size_t i = 0; i < sizeof *p; i++) b[i] = 0;
	p->type = GC_MEM_ALLOCATION_TYPE_PINNED;
	p->requestedHandleTypes = GC_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	p->location.type = GC_MEM_LOCATION_TYPE_DEVICE;
	p->location.id = dev;
}
static CUresult gc_cuMemGetAllocationGranularity(size_t* g, int dev) {
	CUmemAllocationProp p;
	gc_vmmProp(&p, dev);
	return CU(cuMemGetAllocationGranularity, (size_t*, const CUmemAllocationProp*, int))(g, &p, GC_MEM_ALLOC_GRANULARITY_MINIMUM);
}
static CUresult gc_cuMemCreate(CUmemGenericAllocationHandle* h, size_t n, int dev) {
	CUmemAllocationProp p;
	gc_vmmProp(&p, dev);
	return CU(cuMemCreate, (CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long))(h, n, &p, 0);
}
static CUresult gc_cuMemRelease(CUmemGenericAllocationHandle h) { return CU(cuMemRelease, (CUmemGenericAllocationHandle))(h); }
static CUresult gc_cuMemAddressReserve(CUdeviceptr* p, size_t n, size_t align) {
	return CU(cuMemAddressReserve, (CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long))(p, n, align, 0, 0);
}
static CUresult gc_cuMemAddressFree(CUdeviceptr p, size_t n) { return CU(cuMemAddressFree, (CUdeviceptr, size_t))(p, n); }
static CUresult gc_cuMemMap(CUdeviceptr p, size_t n, CUmemGenericAllocationHandle h) {
	return CU(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))(p, n, 0, h, 0);
}
static CUresult gc_cuMemUnmap(CUdeviceptr p, size_t n) { return CU(cuMemUnmap, (CUdeviceptr, size_t))(p, n); }
static CUresult gc_cuMemSetAccess(CUdeviceptr p, size_t n, int dev) {
	CUmemAccessDesc d;
	d.location.type = GC_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = dev;
	d.flags = GC_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return CU(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc*, size_t))(p, n, &d, 1);
}
// The POSIX handle type writes an int where shareableHandle points.
static CUresult gc_cuMemExportToShareableHandle(int* fd, CUmemGenericAllocationHandle h) {
	return CU(cuMemExportToShareableHandle, (void*, CUmemGenericAllocationHandle, int, unsigned long long))(fd, h, GC_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}
// and takes the descriptor itself, cast to a pointer, on import.
static CUresult gc_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* h, int fd) {
	return CU(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle*, void*, int))(h, (void*)(uintptr_t)fd, GC_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
}
