//go:build cgo

package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// fakeDriver implements, in C, just enough of the driver for the tests to
// check that arguments and results cross the table intact. Every other symbol
// Load needs becomes a stub returning CUDA_SUCCESS.
const fakeDriver = `
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <stdlib.h>
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char b[64]; } Handle;
#define BASE 0x1000ULL
static unsigned char mem[1 << 16];
static __thread void* current;

CUresult cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
CUresult cuDriverGetVersion(int* v) { *v = 12040; return 0; }
CUresult cuGetErrorName(CUresult r, const char** s) {
	if (r == 2) { *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0; }
	return 1; /* unknown here: Go's table must answer */
}
CUresult cuGetErrorString(CUresult r, const char** s) {
	if (r == 2) { *s = "out of memory"; return 0; }
	return 1;
}
CUresult cuDeviceGetCount(int* n) { *n = 2; return 0; }
CUresult cuDeviceGetName(char* name, int len, int d) { snprintf(name, len, "Fake GPU %d", d); return 0; }
CUresult cuDeviceGetUuid_v2(unsigned char* u, int d) { for (int i = 0; i < 16; i++) u[i] = i + d; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int d) { *v = attr * 10 + d; return 0; }
CUresult cuDeviceGetPCIBusId(char* id, int len, int d) { snprintf(id, len, "0000:%02x:00.0", d); return 0; }
CUresult cuDeviceTotalMem_v2(size_t* n, int d) { *n = (size_t)80 << 30; return 0; }
// Context 0x97 cannot be made current, and says so with CUDA_ERROR_NOT_READY
// (600), which an In call must not take for its own call's "not done yet".
CUresult cuCtxSetCurrent(void* c) {
	if (c == (void*)0x97) return 600;
	current = c;
	return 0;
}
CUresult cuCtxGetCurrent(void** c) { *c = current; return 0; }
// An event records only with the context of its own handle current.
CUresult cuEventRecord(void* e, void* s) { return current == e ? 0 : 201; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
	if (n > sizeof mem) return 2;
	*p = BASE;
	return 0;
}
CUresult cuMemAllocHost_v2(void** p, size_t n) { *p = malloc(n); return 0; }
CUresult cuMemFreeHost(void* p) { free(p); return 0; }
CUresult cuMemGetInfo_v2(size_t* f, size_t* t) { *f = 100; *t = 200; return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { memcpy(mem + (dst - BASE), src, n); return 0; }
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { memcpy(dst, mem + (src - BASE), n); return 0; }
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) { memset(mem + (dst - BASE), v, n); return 0; }
CUresult cuStreamCreate(void** s, unsigned flags) { *s = (void*)(uintptr_t)(0x5000 + flags); return 0; }
// Stream 0x5002 is busy, and queries only with context 0x99 current.
CUresult cuStreamQuery(void* s) {
	if (s == (void*)0x5002) return current == (void*)0x99 ? 600 : 201;
	return s ? 0 : 600;
}
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) { *ms = 1.5f; return 0; }
// The In calls' driver calls: each works only with context 0x99 current
// and on stream 0x5001 (0 for the event calls), so that a context not made
// current, or an argument that did not cross gc_in intact, is an error.
#define IN_OK(s) if (current != (void*)0x99) return 201; if ((s) != (void*)0x5001) return 400
CUresult cuStreamSynchronize(void* s) { IN_OK(s); return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* s) { IN_OK(s); memcpy(mem + (dst - BASE), src, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* s) { IN_OK(s); memcpy(dst, mem + (src - BASE), n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* s) { IN_OK(s); memmove(mem + (dst - BASE), mem + (src - BASE), n); return 0; }
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void* s) { IN_OK(s); memset(mem + (dst - BASE), v, n); return 0; }
CUresult cuStreamWaitEvent(void* s, void* e, unsigned flags) { IN_OK(s); return e == (void*)0x77 && flags == 0 ? 0 : 400; }
// Event 0x78 is not reached yet; 0x77 is.
CUresult cuEventSynchronize(void* e) { IN_OK((void*)0x5001); return e == (void*)0x77 ? 0 : 400; }
CUresult cuEventQuery(void* e) { IN_OK((void*)0x5001); return e == (void*)0x77 ? 0 : e == (void*)0x78 ? 600 : 400; }
CUresult cuIpcGetMemHandle(Handle* h, CUdeviceptr p) { for (int i = 0; i < 64; i++) h->b[i] = (unsigned char)(i * 3 + 1); return 0; }
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, Handle h, unsigned flags) {
	for (int i = 0; i < 64; i++) if (h.b[i] != (unsigned char)(i * 3 + 1)) return 400;
	*p = 0xabc0 + flags;
	return 0;
}
// The event handle of event 0x77 holds i*5+7 in byte i, so that only one
// that crossed by value with all 64 bytes intact opens (as event 0x79).
CUresult cuIpcGetEventHandle(Handle* h, void* e) {
	if (e != (void*)0x77) return 400;
	for (int i = 0; i < 64; i++) h->b[i] = (unsigned char)(i * 5 + 7);
	return 0;
}
CUresult cuIpcOpenEventHandle(void** e, Handle h) {
	for (int i = 0; i < 64; i++) if (h.b[i] != (unsigned char)(i * 5 + 7)) return 1;
	*e = (void*)0x79;
	return 0;
}
CUresult cuModuleLoadData(void** m, const void* image) {
	if (strcmp((const char*)image, "// ptx") != 0) return 218;
	*m = (void*)0x77;
	return 0;
}
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
	if (m != (void*)0x77 || strcmp(name, "k") != 0) return 500;
	*f = (void*)0x88;
	return 0;
}
/* VMM: each call checks that cuda.h's struct layouts arrived as declared. */
typedef struct { int type, id; } Loc;
typedef struct { int type, handles; Loc loc; void* win32; unsigned char comp, rdma; unsigned short usage; unsigned char res[4]; } Prop;
typedef struct { Loc loc; int flags; } Access;
static int goodProp(const Prop* p, int dev) {
	return p->type == 1 && p->handles == 1 && p->loc.type == 1 && p->loc.id == dev && !p->win32 &&
		!p->comp && !p->rdma && !p->usage && !p->res[0] && !p->res[3] && sizeof(Prop) == 32;
}
CUresult cuMemGetAllocationGranularity(size_t* g, const Prop* p, int option) {
	if (!goodProp(p, p->loc.id) || option != 0) return 1;
	*g = (size_t)2 << 20;
	return 0;
}
CUresult cuMemCreate(unsigned long long* h, size_t n, const Prop* p, unsigned long long flags) {
	if (!goodProp(p, 1) || flags != 0 || n != (size_t)4 << 20) return 1;
	*h = 0x4321;
	return 0;
}
CUresult cuMemAddressReserve(CUdeviceptr* p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags) {
	if (n != (size_t)4 << 20 || align != (size_t)2 << 20 || addr || flags) return 1;
	*p = 0x7f0000000000ULL;
	return 0;
}
CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, unsigned long long h, unsigned long long flags) {
	return p == 0x7f0000000000ULL && n == (size_t)4 << 20 && off == 0 && h == 0x4321 && flags == 0 ? 0 : 1;
}
CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const Access* d, size_t count) {
	return p == 0x7f0000000000ULL && count == 1 && d->loc.type == 1 && d->loc.id == 1 && d->flags == 3 && sizeof(Access) == 12 ? 0 : 1;
}
CUresult cuMemExportToShareableHandle(void* out, unsigned long long h, int type, unsigned long long flags) {
	if (h != 0x4321 || type != 1 || flags) return 1;
	*(int*)out = 42;
	return 0;
}
CUresult cuMemImportFromShareableHandle(unsigned long long* h, void* os, int type) {
	if ((uintptr_t)os != 42 || type != 1) return 400;
	*h = 0x4322;
	return 0;
}
CUresult cuMemUnmap(CUdeviceptr p, size_t n) { return p == 0x7f0000000000ULL && n == (size_t)4 << 20 ? 0 : 1; }
CUresult cuMemAddressFree(CUdeviceptr p, size_t n) { return p == 0x7f0000000000ULL && n == (size_t)4 << 20 ? 0 : 1; }
CUresult cuMemRelease(unsigned long long h) { return h == 0x4321 || h == 0x4322 ? 0 : 400; }
/* Succeeds only if every argument arrived where the Go side put it. */
// A launch works with no context current (LaunchKernel's test) or 0x99
// (LaunchKernelIn's).
static const int fake_sizes[8] = {1, 2, 4, 8, 16, 24, 3, 256};
static int fake_align(int n) { int a = 1; while (a < n && a < 16) a <<= 1; return a; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shmem, void* s, void** params, void** extra) {
	// Kernel 0x89 takes gx parameters, parameter i of fake_sizes[i % 8]
	// bytes, each byte i+1, at its alignment; with none, params is NULL.
	if (f == (void*)0x89) {
		if (current != NULL && current != (void*)0x99) return 201;
		if (gx == 0) return params == NULL ? 0 : 1;
		if (params == NULL) return 1;
		for (unsigned i = 0; i < gx; i++) {
			int n = fake_sizes[i % 8];
			unsigned char* p = params[i];
			if ((uintptr_t)p % fake_align(n) != 0) return 1;
			for (int k = 0; k < n; k++) if (p[k] != (unsigned char)(i + 1)) return 1;
		}
		return 0;
	}
	if (f != (void*)0x88 || gx != 2 || gy != 3 || gz != 1 || bx != 128 || by != 1 || bz != 1) return 1;
	if (current != NULL && current != (void*)0x99) return 201;
	if (shmem != 256 || s != (void*)0x5001 || extra != NULL) return 1;
	if (*(int*)params[0] != -7 || *(double*)params[1] != 2.5 || *(CUdeviceptr*)params[2] != BASE) return 1;
	if (*(unsigned char*)params[3] != 9 || ((uintptr_t)params[1] % 8) != 0) return 1;
	return 0;
}
`

var definedRE = regexp.MustCompile(`(?m)^CUresult (\w+)\(`)

// libcuda is how this package loads the driver, for the shared loader checks.
var libcuda = dltest.Library{Env: EnvLib, File: "libcuda.so.1", Defaults: []string{"libcuda.so.1", "libcuda.so"}, Reset: reset, Load: Load}

// buildFake builds a libcuda with the given C source plus a stub for every
// symbol Load needs that the source does not define. Names in omit get no
// stub, to test fallbacks and missing symbols.
func buildFake(t *testing.T, src string, omit ...string) string {
	t.Helper()
	need := make([]string, len(symbols))
	for i, s := range symbols {
		need[i] = s.names[0]
	}
	return libcuda.Build(t, dltest.WithStubs(src, definedRE, "CUresult %s(void) { return 0; }\n", need, omit...))
}

func TestSymbolTableCoversEverySlotOnce(t *testing.T) {
	slots := make([]int, len(symbols))
	for i, s := range symbols {
		slots[i] = int(s.slot)
	}
	dltest.EverySlotOnce(t, slots, int(fCount))
}

// A call before Load loads on first use and reports what Load does.
func TestLoadWithMissingOverrideWrapsErrLibraryNotFound(t *testing.T) {
	libcuda.CheckMissingFile(t, func() error { _, err := MemAlloc(16); return err })
}

func TestLoadWithDefaultNamesAbsentWrapsErrLibraryNotFound(t *testing.T) {
	libcuda.CheckDefaultsAbsent(t)
}

func TestLoadNamesTheFirstMissingSymbol(t *testing.T) {
	libcuda.Use(t, libcuda.Build(t, "int cuInit(unsigned f) { return 0; }\n"))
	err := Load()
	if !errors.Is(err, errs.ErrLibraryNotFound) {
		t.Fatalf("Load = %v, want ErrLibraryNotFound", err)
	}
	want := fmt.Sprintf("has no %s (and %d more symbols)", symbols[1].names[0], len(symbols)-len(vmmSlots)-2)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q lacks %q", err, want)
	}
	// The failure is not sticky: a complete library loads afterwards.
	libcuda.Use(t, buildFake(t, fakeDriver))
	if err := Load(); err != nil {
		t.Fatalf("Load after a failed Load: %v", err)
	}
}

// The IPC event calls are required: a library without one is refused,
// named, as any other missing symbol.
func TestLoadRefusesADriverWithoutIPCEvents(t *testing.T) {
	for _, call := range []string{"cuIpcGetEventHandle", "cuIpcOpenEventHandle"} {
		src := strings.Replace(fakeDriver, "CUresult "+call+"(", "CUresult not_"+call+"(", 1)
		libcuda.Use(t, buildFake(t, src, call))
		err := Load()
		if !errors.Is(err, errs.ErrLibraryNotFound) || !strings.Contains(err.Error(), "has no "+call+";") {
			t.Errorf("Load of a driver without %s = %v, want ErrLibraryNotFound naming it", call, err)
		}
	}
	libcuda.Use(t, buildFake(t, fakeDriver))
	if err := Load(); err != nil {
		t.Fatalf("Load of the complete fake: %v", err)
	}
}

func TestLoadReportsCuInitFailure(t *testing.T) {
	src := strings.Replace(fakeDriver, "return flags == 0 ? 0 : 1;", "return 100;", 1)
	libcuda.Use(t, buildFake(t, src))
	err := Load()
	if !IsCode(err, CUDA_ERROR_NO_DEVICE) || !strings.Contains(err.Error(), "cuInit") {
		t.Fatalf("Load = %v, want cuInit's CUDA_ERROR_NO_DEVICE", err)
	}
}

func TestLoadFallsBackToUnversionedSymbol(t *testing.T) {
	src := strings.Replace(fakeDriver, "cuEventElapsedTime_v2(float* ms, void* a, void* b) { *ms = 1.5f",
		"cuEventElapsedTime(float* ms, void* a, void* b) { *ms = 2.5f", 1)
	noUUID := strings.Replace(src, "CUresult cuDeviceGetUuid_v2(", "CUresult notCuDeviceGetUuid(", 1)
	libcuda.Use(t, buildFake(t, noUUID, "cuEventElapsedTime_v2", "cuDeviceGetUuid_v2"))
	if err := Load(); err == nil || !strings.Contains(err.Error(), "cuDeviceGetUuid_v2 or cuDeviceGetUuid") {
		t.Fatalf("Load = %v, want both cuDeviceGetUuid names", err)
	}
	unversioned := strings.Replace(src, "CUresult cuDeviceGetUuid_v2(", "CUresult cuDeviceGetUuid(", 1)
	libcuda.Use(t, buildFake(t, unversioned, "cuEventElapsedTime_v2", "cuDeviceGetUuid_v2"))
	d, err := EventElapsedTime(0, 0)
	if err != nil || d != 2500*time.Microsecond {
		t.Fatalf("EventElapsedTime = %v, %v; want 2.5ms from the unversioned symbol", d, err)
	}
	if u, err := DeviceUUID(0); err != nil || u[15] != 15 {
		t.Fatalf("DeviceUUID = %v, %v; want the unversioned symbol's bytes", u, err)
	}
}

func TestCallErrorsNameCallAndCUDAName(t *testing.T) {
	libcuda.Use(t, buildFake(t, fakeDriver))
	_, err := MemAlloc(1 << 20)
	if !IsCode(err, CUDA_ERROR_OUT_OF_MEMORY) {
		t.Fatalf("MemAlloc = %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	for _, want := range []string{"cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	// A code the library cannot name is named from Go's table.
	_, err = ModuleLoadData([]byte("not ptx"))
	if !IsCode(err, CUDA_ERROR_INVALID_PTX) || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_PTX") {
		t.Errorf("ModuleLoadData = %v, want CUDA_ERROR_INVALID_PTX", err)
	}
	if _, err := MemAlloc(-1); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("MemAlloc(-1) = %v, want ErrInvalidArgument", err)
	}
}

func TestCallsCarryArgumentsAndResults(t *testing.T) {
	libcuda.Use(t, buildFake(t, fakeDriver))
	check := func(what string, got, want any, err error) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", what, got, err, want)
		}
	}
	v, err := DriverVersion()
	check("DriverVersion", v, 12040, err)
	n, err := DeviceCount()
	check("DeviceCount", n, 2, err)
	name, err := DeviceName(1)
	check("DeviceName", name, "Fake GPU 1", err)
	u, err := DeviceUUID(1)
	check("DeviceUUID", u, UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, err)
	a, err := DeviceAttribute(1, AttrComputeCapabilityMajor)
	check("DeviceAttribute", a, 751, err)
	bus, err := DevicePCIBusID(3)
	check("DevicePCIBusID", bus, "0000:03:00.0", err)
	total, err := DeviceTotalMem(0)
	check("DeviceTotalMem", total, 80<<30, err)
	free, err := func() (int, error) { f, _, err := MemGetInfo(); return f, err }()
	check("MemGetInfo", free, 100, err)
	s, err := StreamCreate(StreamNonBlocking)
	check("StreamCreate", s, Stream(0x5001), err)
	done, err := StreamQuery(0)
	check("StreamQuery(busy)", done, false, err)
	done, err = StreamQuery(s)
	check("StreamQuery(idle)", done, true, err)
	d, err := EventElapsedTime(1, 2)
	check("EventElapsedTime", d, 1500*time.Microsecond, err)

	h, err := IpcGetMemHandle(0x1000)
	check("IpcGetMemHandle[63]", h[63], byte(63*3+1), err)
	p, err := IpcOpenMemHandle(h, IpcMemLazyEnablePeerAccess)
	check("IpcOpenMemHandle", p, DevicePtr(0xabc1), err)
	h[5]++
	if _, err := IpcOpenMemHandle(h, 0); !IsCode(err, CUDA_ERROR_INVALID_HANDLE) {
		t.Errorf("IpcOpenMemHandle(corrupt) = %v, want CUDA_ERROR_INVALID_HANDLE", err)
	}

	eh, err := IpcGetEventHandle(0x77)
	check("IpcGetEventHandle[63]", eh[63], byte((63*5+7)&0xff), err)
	ev, err := IpcOpenEventHandle(eh)
	check("IpcOpenEventHandle", ev, Event(0x79), err)
	if _, err := IpcGetEventHandle(0x78); !IsCode(err, CUDA_ERROR_INVALID_HANDLE) || !strings.Contains(err.Error(), "cuIpcGetEventHandle") {
		t.Errorf("IpcGetEventHandle(not interprocess) = %v, want cuIpcGetEventHandle's CUDA_ERROR_INVALID_HANDLE", err)
	}
	eh[63]++
	if ev, err := IpcOpenEventHandle(eh); !IsCode(err, CUDA_ERROR_INVALID_VALUE) || !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("IpcOpenEventHandle(corrupt) = %#x, %v; want CUDA_ERROR_INVALID_VALUE", ev, err)
	}

	m, err := ModuleLoadData([]byte("// ptx"))
	check("ModuleLoadData", m, Module(0x77), err)
	f, err := ModuleGetFunction(m, "k")
	check("ModuleGetFunction", f, Function(0x88), err)
	if _, err := ModuleGetFunction(m, "missing"); !IsCode(err, CUDA_ERROR_NOT_FOUND) || !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("ModuleGetFunction(missing) = %v", err)
	}
	dev, err := MemAlloc(64)
	check("MemAlloc", dev, DevicePtr(0x1000), err)

	// EventRecordIn makes ctx current for the record and puts back another
	// context that was current, on this thread (the fake's current is per
	// thread).
	runtime.LockOSThread()
	if err := CtxSetCurrent(0x11); err != nil {
		t.Fatal(err)
	}
	if err := EventRecord(0x99, s); !IsCode(err, 201) {
		t.Errorf("EventRecord with another context current = %v, want the fake's refusal", err)
	}
	check("EventRecordIn(0x99)", true, true, EventRecordIn(0x99, 0x99, s))
	now, err := CtxGetCurrent()
	check("the context after EventRecordIn", now, Context(0x11), err)
	if err := CtxSetCurrent(0x99); err != nil {
		t.Fatal(err)
	}
	check("EventRecordIn with its context already current", true, true, EventRecordIn(0x99, 0x99, s))
	now, err = CtxGetCurrent()
	check("the context after that", now, Context(0x99), err)
	err = EventRecordIn(0x98, 0x99, s)
	if !IsCode(err, 201) || !strings.Contains(err.Error(), "cuEventRecord") {
		t.Errorf("EventRecordIn with a context the record refuses = %v, want cuEventRecord's error", err)
	}
	now, err = CtxGetCurrent()
	check("the context after a failed record", now, Context(0x99), err)
	// From a thread with no context current (a Go thread's start) the
	// context stays current after the record, so that the next call on the
	// thread makes no driver call to set it.
	if err := CtxSetCurrent(0); err != nil {
		t.Fatal(err)
	}
	check("EventRecordIn(0x99) from no context", true, true, EventRecordIn(0x99, 0x99, s))
	now, err = CtxGetCurrent()
	check("the context after a record from none", now, Context(0x99), err)
	// StreamQueryIn queries in the context it is given, in one C call.
	if err := CtxSetCurrent(0x11); err != nil {
		t.Fatal(err)
	}
	if _, err := StreamQuery(0x5002); !IsCode(err, 201) {
		t.Errorf("StreamQuery with another context current = %v, want the fake's refusal", err)
	}
	done, err = StreamQueryIn(0x99, 0x5002)
	check("StreamQueryIn(busy)", done, false, err)
	now, err = CtxGetCurrent()
	check("the context after StreamQueryIn", now, Context(0x11), err)
	if _, err := StreamQueryIn(0x98, 0x5002); !IsCode(err, 201) || !strings.Contains(err.Error(), "cuStreamQuery") {
		t.Errorf("StreamQueryIn with a context the query refuses = %v, want cuStreamQuery's error", err)
	}
	done, err = StreamQueryIn(0x99, s)
	check("StreamQueryIn(idle)", done, true, err)
	// The other In calls: each makes its call in the context it is given
	// and puts back the one that was current (0x11 here), with its
	// arguments intact (the fake moves real bytes through its memory), and
	// a context the call refuses is named by the call.
	host := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	back := make([]byte, 8)
	pin := runtime.Pinner{}
	pin.Pin(&host[0])
	pin.Pin(&back[0])
	in := []struct {
		name string
		call func(ctx Context) error
	}{
		{"cuMemcpyHtoDAsync", func(ctx Context) error {
			return MemcpyHtoDAsyncIn(ctx, dev+32, uintptr(unsafe.Pointer(&host[0])), 8, s)
		}},
		{"cuMemcpyDtoHAsync", func(ctx Context) error {
			return MemcpyDtoHAsyncIn(ctx, uintptr(unsafe.Pointer(&back[0])), dev+32, 8, s)
		}},
		{"cuStreamSynchronize", func(ctx Context) error { return StreamSynchronizeIn(ctx, s) }},
		{"cuMemsetD8Async", func(ctx Context) error { return MemsetD8AsyncIn(ctx, dev+8, 0xab, 8, s) }},
		{"cuMemcpyDtoDAsync", func(ctx Context) error { return MemcpyDtoDAsyncIn(ctx, dev+16, dev+8, 8, s) }},
		{"cuStreamWaitEvent", func(ctx Context) error { return StreamWaitEventIn(ctx, s, 0x77) }},
		{"cuEventSynchronize", func(ctx Context) error { return EventSynchronizeIn(ctx, 0x77) }},
		{"cuEventQuery", func(ctx Context) error {
			done, err := EventQueryIn(ctx, 0x77)
			if err == nil && !done {
				return errors.New("event 0x77 is reached, EventQueryIn says not")
			}
			return err
		}},
	}
	if err := CtxSetCurrent(0x11); err != nil {
		t.Fatal(err)
	}
	for _, c := range in {
		check(c.name+" in 0x99", true, true, c.call(0x99))
		now, err := CtxGetCurrent()
		check("the context after "+c.name, now, Context(0x11), err)
		if err := c.call(0x98); !IsCode(err, 201) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s in a context the call refuses = %v, want its error", c.name, err)
		}
	}
	// Pinned host memory through the asynchronous copies, both ways (the
	// table above ran each once, in a context the copy refuses too).
	check("MemcpyHtoDAsyncIn", true, true, MemcpyHtoDAsyncIn(0x99, dev+24, uintptr(unsafe.Pointer(&host[0])), 8, s))
	check("MemcpyDtoHAsyncIn", true, true, MemcpyDtoHAsyncIn(0x99, uintptr(unsafe.Pointer(&back[0])), dev+24, 8, s))
	check("the bytes back", string(back), string(host), nil)
	check("MemcpyDtoHAsyncIn of the memset and its copy", true, true, MemcpyDtoHAsyncIn(0x99, uintptr(unsafe.Pointer(&back[0])), dev+16, 8, s))
	check("the memset's bytes, copied on the device", string(back), strings.Repeat("\xab", 8), nil)
	pin.Unpin()
	done, err = EventQueryIn(0x99, 0x78)
	check("EventQueryIn(not reached)", done, false, err)
	// A context that cannot be made current is an error naming the set, even
	// where its code is the one a query reads as "not done yet".
	if done, err := EventQueryIn(0x97, 0x78); done || !IsCode(err, 600) || !strings.Contains(err.Error(), "cuCtxSetCurrent") {
		t.Errorf("EventQueryIn in a context that cannot be made current = %v, %v; want cuCtxSetCurrent's error", done, err)
	}
	if done, err := StreamQueryIn(0x97, 0x5002); done || !IsCode(err, 600) || !strings.Contains(err.Error(), "cuCtxSetCurrent") {
		t.Errorf("StreamQueryIn in a context that cannot be made current = %v, %v; want cuCtxSetCurrent's error", done, err)
	}
	// Launches of 0 to 200 parameters of 1 to 256 bytes (kernels.Reduce's
	// pointer table is 256): each value intact at its alignment, none as a
	// NULL block; past maxKernelArgs through LaunchKernel's own block.
	for _, n := range []int{0, 1, 7, 13, maxKernelArgs, maxKernelArgs + 1, 200} {
		sizes := []int{1, 2, 4, 8, 16, 24, 3, 256}
		args := make([][]byte, n)
		for i := range args {
			args[i] = bytes.Repeat([]byte{byte(i + 1)}, sizes[i%8])
		}
		if err := LaunchKernelIn(0x99, 0x89, Dim3{uint32(n), 1, 1}, Dim3{1, 1, 1}, 0, s, args...); err != nil {
			t.Errorf("LaunchKernelIn of %d parameters: %v", n, err)
		}
		now, err := CtxGetCurrent()
		check(fmt.Sprintf("the context after a launch of %d parameters", n), now, Context(0x11), err)
	}
	if err := MemcpyDtoDAsyncIn(0x99, dev, dev, -1, s); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("MemcpyDtoDAsyncIn of -1 bytes = %v, want ErrInvalidArgument", err)
	}
	_ = CtxSetCurrent(0)
	runtime.UnlockOSThread()
	if e := ErrorOf("cuCtxSetCurrent", 201); !IsCode(e, 201) || !strings.Contains(e.Error(), "cuCtxSetCurrent") {
		t.Errorf("ErrorOf = %v", e)
	}
	if ErrorOf("cuCtxSetCurrent", 0) != nil {
		t.Error("ErrorOf(CUDA_SUCCESS) is an error")
	}

	err = LaunchKernel(f, Dim3{2, 3, 1}, Dim3{128, 1, 1}, 256, s, Arg(int32(-7)), Arg(2.5), Arg(dev), Arg(uint8(9)))
	check("LaunchKernel", true, true, err)
	err = LaunchKernel(f, Dim3{2, 3, 1}, Dim3{128, 1, 1}, 256, s, Arg(int32(-7)), Arg(2.5), Arg(dev), Arg(uint8(8)))
	if !IsCode(err, CUDA_ERROR_INVALID_VALUE) {
		t.Errorf("LaunchKernel with a wrong argument = %v, want the fake's refusal", err)
	}
	// LaunchKernelIn lays the same parameters out in Go memory, makes its
	// context current for the launch and puts back the one before.
	runtime.LockOSThread()
	if err := CtxSetCurrent(0x11); err != nil {
		t.Fatal(err)
	}
	err = LaunchKernelIn(0x99, f, Dim3{2, 3, 1}, Dim3{128, 1, 1}, 256, s, Arg(int32(-7)), Arg(2.5), Arg(dev), Arg(uint8(9)))
	check("LaunchKernelIn", true, true, err)
	now, err = CtxGetCurrent()
	check("the context after LaunchKernelIn", now, Context(0x11), err)
	if err := LaunchKernelIn(0x98, f, Dim3{2, 3, 1}, Dim3{128, 1, 1}, 256, s, Arg(int32(-7)), Arg(2.5), Arg(dev), Arg(uint8(9))); !IsCode(err, 201) {
		t.Errorf("LaunchKernelIn in a context the launch refuses = %v, want its error", err)
	}
	now, err = CtxGetCurrent()
	check("the context after a refused launch", now, Context(0x11), err)
	err = LaunchKernelIn(0x99, f, Dim3{2, 3, 1}, Dim3{128, 1, 1}, 256, s, Arg(int32(-7)), Arg(2.5), Arg(dev), Arg(uint8(8)))
	if !IsCode(err, CUDA_ERROR_INVALID_VALUE) || !strings.Contains(err.Error(), "cuLaunchKernel") {
		t.Errorf("LaunchKernelIn with a wrong argument = %v, want the fake's refusal", err)
	}
	if err := LaunchKernelIn(0x99, f, Dim3{2, 3, 1}, Dim3{128, 1, 1}, 256, s, Arg(int32(-7)), nil); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("LaunchKernelIn with an empty argument = %v, want ErrInvalidArgument", err)
	}
	_ = CtxSetCurrent(0)
	runtime.UnlockOSThread()
}

func TestVMMCallsCarryTheirStructs(t *testing.T) {
	libcuda.Use(t, buildFake(t, fakeDriver))
	if !HasVMM() {
		t.Fatal("HasVMM = false with every VMM symbol present")
	}
	const mib = 1 << 20
	g, err := MemGetAllocationGranularity(1)
	if err != nil || g != 2*mib {
		t.Fatalf("MemGetAllocationGranularity = %d, %v", g, err)
	}
	h, err := MemCreate(4*mib, 1)
	if err != nil || h != 0x4321 {
		t.Fatalf("MemCreate = %#x, %v", h, err)
	}
	p, err := MemAddressReserve(4*mib, g)
	if err != nil || p != 0x7f0000000000 {
		t.Fatalf("MemAddressReserve = %#x, %v", p, err)
	}
	for name, err := range map[string]error{"MemMap": MemMap(p, 4*mib, h), "MemSetAccess": MemSetAccess(p, 4*mib, 1)} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	fd, err := MemExportToShareableHandle(h)
	if err != nil || fd != 42 {
		t.Fatalf("MemExportToShareableHandle = %d, %v", fd, err)
	}
	imp, err := MemImportFromShareableHandle(fd)
	if err != nil || imp != 0x4322 {
		t.Fatalf("MemImportFromShareableHandle = %#x, %v", imp, err)
	}
	if _, err := MemImportFromShareableHandle(7); !IsCode(err, CUDA_ERROR_INVALID_HANDLE) {
		t.Errorf("import of another descriptor = %v, want the fake's refusal", err)
	}
	if _, err := MemImportFromShareableHandle(-1); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("import of descriptor -1 = %v, want ErrInvalidArgument", err)
	}
	for name, err := range map[string]error{"MemUnmap": MemUnmap(p, 4*mib), "MemAddressFree": MemAddressFree(p, 4*mib),
		"MemRelease": MemRelease(h), "MemRelease(imported)": MemRelease(imp)} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := MemCreate(-1, 0); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("MemCreate(-1) = %v", err)
	}
}

func TestDriverWithoutVMMLoadsAndSaysUnsupported(t *testing.T) {
	var omit []string
	for _, s := range symbols {
		if slices.Contains(vmmSlots, s.slot) {
			omit = append(omit, s.names[0])
		}
	}
	src := fakeDriver[:strings.Index(fakeDriver, "/* VMM:")] + fakeDriver[strings.Index(fakeDriver, "/* Succeeds only"):]
	libcuda.Use(t, buildFake(t, src, omit...))
	if err := Load(); err != nil {
		t.Fatalf("Load without the VMM symbols: %v", err)
	}
	if HasVMM() {
		t.Fatal("HasVMM = true without the symbols")
	}
	if _, err := MemCreate(1<<20, 0); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "cuMemCreate") {
		t.Errorf("MemCreate without the symbol = %v, want ErrUnsupported naming it", err)
	}
	if _, err := MemImportFromShareableHandle(3); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("MemImportFromShareableHandle without the symbol = %v", err)
	}
	if _, err := MemAlloc(64); err != nil {
		t.Errorf("MemAlloc on a driver without VMM: %v", err)
	}
}

func TestBlockingCopiesMoveGoMemory(t *testing.T) {
	libcuda.Use(t, buildFake(t, fakeDriver))
	dev, err := MemAlloc(8)
	if err != nil {
		t.Fatal(err)
	}
	if err := MemsetD8(dev, 0xee, 8); err != nil {
		t.Fatal(err)
	}
	if err := MemcpyHtoDBytes(dev, []byte("gpucomm")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if err := MemcpyDtoHBytes(got, dev); err != nil {
		t.Fatal(err)
	}
	if string(got) != "gpucomm\xee" {
		t.Fatalf("round trip = %q", got)
	}
	// The uintptr form, with page-locked (here: C) memory.
	pinned, err := MemAllocHost(4)
	if err != nil {
		t.Fatal(err)
	}
	defer MemFreeHost(pinned)
	if err := MemcpyDtoH(uintptr(pinned), dev, 4); err != nil {
		t.Fatal(err)
	}
	if got := string(unsafe.Slice((*byte)(pinned), 4)); got != "gpuc" {
		t.Fatalf("MemcpyDtoH = %q", got)
	}
}

func TestWithContextSetsAndRestoresCurrent(t *testing.T) {
	libcuda.Use(t, buildFake(t, fakeDriver))
	runtime.LockOSThread() // the fake's current context is per thread, like CUDA's
	defer runtime.UnlockOSThread()
	if err := CtxSetCurrent(1); err != nil {
		t.Fatal(err)
	}
	err := WithContext(2, func() error {
		if c, err := CtxGetCurrent(); err != nil || c != 2 {
			return fmt.Errorf("inside: current = %v, %v", c, err)
		}
		return errors.New("from fn")
	})
	if err == nil || err.Error() != "from fn" {
		t.Fatalf("WithContext = %v, want fn's error", err)
	}
	if c, err := CtxGetCurrent(); err != nil || c != 1 {
		t.Fatalf("after: current = %v, %v; want the previous context 1", c, err)
	}
	// A thread with no current context is left with none.
	if err := CtxSetCurrent(0); err != nil {
		t.Fatal(err)
	}
	if err := WithContext(2, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if c, err := CtxGetCurrent(); err != nil || c != 0 {
		t.Fatalf("after, from no context: current = %v, %v; want none", c, err)
	}
}

func TestArgAlignIsNaturalUpTo16(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 8: 8, 12: 16, 16: 16, 40: 16} {
		if got := argAlign(n); got != want {
			t.Errorf("argAlign(%d) = %d, want %d", n, got, want)
		}
	}
}
