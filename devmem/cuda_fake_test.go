package devmem

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCUDA is a libcuda.so.1 written for the tests, so that the cuda driver
// and the GPU tests run on machines without a GPU (TestCUDADriverOnAFake
// runs the GPU tests against it in a child process). It is stricter than
// the real driver where that catches our mistakes:
//
//   - every call that uses a context fails with CUDA_ERROR_INVALID_CONTEXT
//     unless the right context is current on the calling thread, so a call
//     made outside cuda.WithContext fails;
//   - stream work is deferred until something waits for it (a stream or
//     event synchronize, a wait, a context synchronize, and cuMemFree,
//     which waits for the device's work as the real one does), so a missing
//     synchronisation shows as stale data; the blocking cuMemcpyHtoD
//     leaves its DMA queued on the legacy stream as the real one may;
//   - asynchronous host copies refuse memory that is not page-locked;
//   - an IPC handle opens once per process, with lazy peer access only;
//   - device memory is a memfd, so IPC works between processes; as on an
//     H200, a legacy IPC handle of memory since freed still opens (cuMemFree
//     keeps an exported allocation's file), so only gpucomm's own checks
//     stand between such a handle and a use after free;
//   - an interprocess event (cuEventCreate with CU_EVENT_INTERPROCESS) keeps
//     its record numbers in a shared memfd page that its handle names, so
//     that an opened event, in this process or another, waits (spinning) for
//     the record latest when its wait was queued; a handle that names no
//     such page is CUDA_ERROR_INVALID_VALUE;
//   - VMM (cuMemCreate, cuMemMap, ...): physical allocations are memfds,
//     exported as descriptors; a mapping is usable only after
//     cuMemSetAccess, cuIpcGetMemHandle refuses VMM memory, and the memory
//     lives while a handle or a mapping of it does (GPUCOMM_FAKE_CUDA_NO_VMM
//     makes the device say it has no VMM).
//
// Its one kernel, add_one(float* x, unsigned n), adds 1 to x[i] for each
// thread i < n, from any PTX image that declares ".entry add_one".
const fakeCUDA = `
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char b[64]; } IpcHandle;

enum {
	R_INVALID_VALUE = 1, R_OUT_OF_MEMORY = 2, R_INVALID_DEVICE = 101, R_INVALID_CONTEXT = 201,
	R_ALREADY_MAPPED = 208, R_INVALID_PTX = 218, R_INVALID_HANDLE = 400, R_NOT_FOUND = 500,
	R_NOT_READY = 600, R_ILLEGAL_ADDRESS = 700, R_HOST_REGISTERED = 712, R_HOST_NOT_REGISTERED = 713,
};
#define NDEV 2
#define TOTAL ((size_t)1 << 30)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
#define LOCK pthread_mutex_lock(&mu)
#define RET(x) do { CUresult r_ = (x); pthread_mutex_unlock(&mu); return r_; } while (0)

typedef struct { int dev, refs; } Ctx;
static Ctx ctxs[NDEV] = {{0, 0}, {1, 0}};
static __thread Ctx* cur;
#define NEED_CTX if (!cur) RET(R_INVALID_CONTEXT)

enum { DEVMEM = 1, PINNED = 2, REGISTERED = 4, MAPPED = 8, VMAP = 16, RESERVED = 32 };
typedef struct { uintptr_t base; size_t size; int kind, dev, fd, peer_pid, peer_fd, exported, ph, access; } Alloc;
#define MAXA 4096
static Alloc allocs[MAXA];

static Alloc* find(uintptr_t p, size_t n, int kinds) {
	for (int i = 0; i < MAXA; i++) {
		Alloc* a = &allocs[i];
		if ((a->kind & kinds) && p >= a->base && n <= a->size && p - a->base <= a->size - n) return a;
	}
	return NULL;
}
static Alloc* exact(uintptr_t p, int kinds) {
	Alloc* a = find(p, 0, kinds);
	return a && a->base == p ? a : NULL;
}
static Alloc* slot(void) {
	for (int i = 0; i < MAXA; i++) if (!allocs[i].kind) return &allocs[i];
	return NULL;
}
static int ondev(CUdeviceptr p, size_t n, int dev) {
	Alloc* a = find((uintptr_t)p, n, DEVMEM | MAPPED | VMAP);
	return a && a->dev == dev && (a->kind != VMAP || a->access);
}
static int pinned(const void* p, size_t n) { return find((uintptr_t)p, n, PINNED | REGISTERED) != NULL; }

enum { OP_COPY = 1, OP_SET, OP_EVENT, OP_ADD1, OP_WAIT_SHARED };
struct Event;
// An interprocess event's page, shared by every process that opened it:
// the number of its latest record and of the latest one reached, and an id
// that names the event across processes.
typedef struct { uint64_t id, recorded, reached; } EventShared;
typedef struct Op {
	int kind;
	void* dst; const void* src; size_t n; int v;
	struct Event* ev;
	EventShared* sh; uint64_t seq; // OP_EVENT of an interprocess event, OP_WAIT_SHARED
	unsigned long long threads;
	void* tofree;
	struct Op* next;
} Op;
#define STREAM_MAGIC 0x5354524d
#define EVENT_MAGIC 0x4556454e
typedef struct Stream { int magic, dev, live, blocking; Op* head; Op** tail; } Stream;
typedef struct Event { int magic, dev, live, flags, recorded, done; double t; Stream* on; EventShared* sh; int fd, opened; } Event;
static Stream legacy[NDEV];
#define MAXS 1024
static Stream* streams[MAXS];

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static void waitShared(EventShared* sh, uint64_t seq);

// flush runs s's work in order, taking each op off the queue before it
// runs, since a wait for an interprocess event may flush other streams.
static void flush(Stream* s) {
	Op* o;
	while ((o = s->head)) {
		s->head = o->next;
		if (!s->head) s->tail = &s->head;
		switch (o->kind) {
		case OP_COPY: memmove(o->dst, o->src, o->n); break;
		case OP_SET: memset(o->dst, o->v, o->n); break;
		case OP_EVENT:
			o->ev->done = 1;
			o->ev->t = now();
			if (o->sh) {
				uint64_t r = __atomic_load_n(&o->sh->reached, __ATOMIC_ACQUIRE);
				while (r < o->seq && !__atomic_compare_exchange_n(&o->sh->reached, &r, o->seq, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {}
			}
			break;
		case OP_ADD1:
			for (unsigned long long i = 0; i < o->threads && i < o->n; i++) ((float*)o->dst)[i] += 1.0f;
			break;
		case OP_WAIT_SHARED: waitShared(o->sh, o->seq); break;
		}
		free(o->tofree);
		free(o);
	}
}
static void flushdev(int dev, int blockingOnly) {
	for (int i = 0; i < MAXS; i++)
		if (streams[i] && streams[i]->dev == dev && (!blockingOnly || streams[i]->blocking)) flush(streams[i]);
}
static void push(Stream* s, Op o) {
	// The legacy stream waits for blocking streams, and they for it.
	if (s->blocking) { if (s == &legacy[s->dev]) flushdev(s->dev, 1); else flush(&legacy[s->dev]); }
	Op* p = malloc(sizeof *p);
	*p = o;
	p->next = NULL;
	*s->tail = p;
	s->tail = &p->next;
}
// stream resolves a handle: 0 is the legacy stream of the current context;
// any stream must belong to the current context.
static CUresult stream(void* h, Stream** out) {
	if (!cur) return R_INVALID_CONTEXT;
	Stream* s = h ? (Stream*)h : &legacy[cur->dev];
	if (!h && !s->tail) { s->magic = STREAM_MAGIC; s->dev = cur->dev; s->live = 1; s->blocking = 1; s->tail = &s->head; }
	if (s->magic != STREAM_MAGIC || !s->live) return R_INVALID_HANDLE;
	if (s->dev != cur->dev) return R_INVALID_CONTEXT;
	*out = s;
	return 0;
}
#define STREAM(h, s) Stream* s; { CUresult r = stream(h, &s); if (r) RET(r); }

CUresult cuInit(unsigned flags) { return flags == 0 ? 0 : R_INVALID_VALUE; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return 0; }
CUresult cuGetErrorName(CUresult r, const char** s) { return R_INVALID_VALUE; }
CUresult cuGetErrorString(CUresult r, const char** s) { return R_INVALID_VALUE; }
CUresult cuDeviceGetCount(int* n) { *n = NDEV; return 0; }
CUresult cuDeviceGet(int* d, int o) { if (o < 0 || o >= NDEV) return R_INVALID_DEVICE; *d = o; return 0; }
CUresult cuDeviceGetName(char* name, int len, int d) { snprintf(name, len, "Fake GPU %d", d); return 0; }
CUresult cuDeviceGetUuid_v2(unsigned char* u, int d) { for (int i = 0; i < 16; i++) u[i] = 0xa0 + 16 * d + i; return 0; }
CUresult cuDeviceTotalMem_v2(size_t* n, int d) { *n = TOTAL; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
	switch (attr) {
	case 75: *v = 9; break;
	case 102: case 103: *v = getenv("GPUCOMM_FAKE_CUDA_NO_VMM") ? 0 : 1; break;
	case 76: *v = 0; break;
	case 10: *v = 32; break;
	default: *v = 0;
	}
	return 0;
}
CUresult cuDeviceGetPCIBusId(char* id, int len, int d) { snprintf(id, len, "0000:%02x:00.0", 0x19 + d); return 0; }
CUresult cuDeviceCanAccessPeer(int* can, int d, int peer) { *can = 1; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** c, int d) {
	LOCK;
	if (d < 0 || d >= NDEV) RET(R_INVALID_DEVICE);
	ctxs[d].refs++;
	*c = &ctxs[d];
	RET(0);
}
CUresult cuDevicePrimaryCtxRelease_v2(int d) {
	LOCK;
	if (d < 0 || d >= NDEV || ctxs[d].refs == 0) RET(R_INVALID_CONTEXT);
	ctxs[d].refs--;
	RET(0);
}
CUresult cuCtxSetCurrent(void* c) {
	if (c && c != &ctxs[0] && c != &ctxs[1]) return R_INVALID_CONTEXT;
	cur = c;
	return 0;
}
CUresult cuCtxGetCurrent(void** c) { *c = cur; return 0; }
CUresult cuCtxSynchronize(void) {
	LOCK;
	NEED_CTX;
	Stream* s;
	stream(NULL, &s);
	flush(s);
	flushdev(cur->dev, 0);
	RET(0);
}
CUresult cuCtxEnablePeerAccess(void* peer, unsigned flags) { return 0; }

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
	LOCK;
	NEED_CTX;
	if (n == 0) RET(R_INVALID_VALUE);
	size_t used = 0;
	for (int i = 0; i < MAXA; i++) if (allocs[i].kind == DEVMEM && allocs[i].dev == cur->dev) used += allocs[i].size;
	Alloc* a = slot();
	if (!a || n > TOTAL - used) RET(R_OUT_OF_MEMORY);
	int fd = memfd_create("fakecuda", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, n) != 0) RET(R_OUT_OF_MEMORY);
	void* m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) { close(fd); RET(R_OUT_OF_MEMORY); }
	memset(m, 0xcd, n); // device memory starts as garbage
	*a = (Alloc){.base = (uintptr_t)m, .size = n, .kind = DEVMEM, .dev = cur->dev, .fd = fd};
	*p = (CUdeviceptr)(uintptr_t)m;
	RET(0);
}
CUresult cuMemFree_v2(CUdeviceptr p) {
	LOCK;
	NEED_CTX;
	Alloc* a = exact((uintptr_t)p, DEVMEM);
	if (!a) RET(R_INVALID_VALUE);
	if (a->dev != cur->dev) RET(R_INVALID_CONTEXT);
	// As the real one, it waits for the work the device was given.
	Stream* l;
	stream(NULL, &l);
	flush(l);
	flushdev(cur->dev, 0);
	munmap((void*)a->base, a->size);
	if (!a->exported) close(a->fd); // an exported one's file stays: its handle still opens
	a->kind = 0;
	RET(0);
}
CUresult cuMemAllocHost_v2(void** p, size_t n) {
	LOCK;
	NEED_CTX;
	Alloc* a = slot();
	if (n == 0 || !a) RET(R_INVALID_VALUE);
	void* m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) RET(R_OUT_OF_MEMORY);
	*a = (Alloc){.base = (uintptr_t)m, .size = n, .kind = PINNED, .dev = cur->dev};
	*p = m;
	RET(0);
}
CUresult cuMemFreeHost(void* p) {
	LOCK;
	NEED_CTX;
	Alloc* a = exact((uintptr_t)p, PINNED);
	if (!a) RET(R_INVALID_VALUE);
	munmap(p, a->size);
	a->kind = 0;
	RET(0);
}
CUresult cuMemHostRegister_v2(void* p, size_t n, unsigned flags) {
	LOCK;
	NEED_CTX;
	if (n == 0) RET(R_INVALID_VALUE);
	for (int i = 0; i < MAXA; i++) {
		Alloc* a = &allocs[i];
		if ((a->kind & (PINNED | REGISTERED)) && (uintptr_t)p < a->base + a->size && a->base < (uintptr_t)p + n) RET(R_HOST_REGISTERED);
	}
	Alloc* a = slot();
	if (!a) RET(R_OUT_OF_MEMORY);
	*a = (Alloc){.base = (uintptr_t)p, .size = n, .kind = REGISTERED, .dev = cur->dev};
	RET(0);
}
CUresult cuMemHostUnregister(void* p) {
	LOCK;
	NEED_CTX;
	Alloc* a = exact((uintptr_t)p, REGISTERED);
	if (!a) RET(R_HOST_NOT_REGISTERED);
	a->kind = 0;
	RET(0);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
	LOCK;
	STREAM(NULL, s);
	if (!ondev(dst, n, s->dev)) RET(R_INVALID_VALUE);
	void* staged = malloc(n ? n : 1);
	memcpy(staged, src, n);
	push(s, (Op){.kind = OP_COPY, .dst = (void*)(uintptr_t)dst, .src = staged, .n = n, .tofree = staged});
	RET(0);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
	LOCK;
	STREAM(NULL, s);
	if (!ondev(src, n, s->dev)) RET(R_INVALID_VALUE);
	flushdev(s->dev, 1);
	flush(s);
	memcpy(dst, (void*)(uintptr_t)src, n);
	RET(0);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
	LOCK;
	STREAM(NULL, s);
	if (!ondev(dst, n, s->dev) || !ondev(src, n, s->dev)) RET(R_INVALID_VALUE);
	push(s, (Op){.kind = OP_COPY, .dst = (void*)(uintptr_t)dst, .src = (void*)(uintptr_t)src, .n = n});
	RET(0);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* h) {
	LOCK;
	STREAM(h, s);
	if (!ondev(dst, n, s->dev) || !pinned(src, n)) RET(R_INVALID_VALUE);
	push(s, (Op){.kind = OP_COPY, .dst = (void*)(uintptr_t)dst, .src = src, .n = n});
	RET(0);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* h) {
	LOCK;
	STREAM(h, s);
	if (!ondev(src, n, s->dev) || !pinned(dst, n)) RET(R_INVALID_VALUE);
	push(s, (Op){.kind = OP_COPY, .dst = dst, .src = (void*)(uintptr_t)src, .n = n});
	RET(0);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* h) {
	LOCK;
	STREAM(h, s);
	if (!ondev(dst, n, s->dev) || !ondev(src, n, s->dev)) RET(R_INVALID_VALUE);
	push(s, (Op){.kind = OP_COPY, .dst = (void*)(uintptr_t)dst, .src = (void*)(uintptr_t)src, .n = n});
	RET(0);
}
CUresult cuMemcpyPeer(CUdeviceptr dst, void* dctx, CUdeviceptr src, void* sctx, size_t n) {
	LOCK;
	NEED_CTX;
	Ctx* d = dctx; Ctx* sc = sctx;
	if (!ondev(dst, n, d->dev) || !ondev(src, n, sc->dev)) RET(R_INVALID_VALUE);
	flushdev(d->dev, 0);
	flushdev(sc->dev, 0);
	memmove((void*)(uintptr_t)dst, (void*)(uintptr_t)src, n);
	RET(0);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void* dctx, CUdeviceptr src, void* sctx, size_t n, void* h) {
	LOCK;
	STREAM(h, s);
	Ctx* d = dctx; Ctx* sc = sctx;
	if ((d != &ctxs[0] && d != &ctxs[1]) || (sc != &ctxs[0] && sc != &ctxs[1])) RET(R_INVALID_CONTEXT);
	if (!ondev(dst, n, d->dev) || !ondev(src, n, sc->dev)) RET(R_INVALID_VALUE);
	push(s, (Op){.kind = OP_COPY, .dst = (void*)(uintptr_t)dst, .src = (void*)(uintptr_t)src, .n = n});
	RET(0);
}
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
	LOCK;
	STREAM(NULL, s);
	if (!ondev(dst, n, s->dev)) RET(R_INVALID_VALUE);
	push(s, (Op){.kind = OP_SET, .dst = (void*)(uintptr_t)dst, .n = n, .v = v});
	RET(0);
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void* h) {
	LOCK;
	STREAM(h, s);
	if (!ondev(dst, n, s->dev)) RET(R_INVALID_VALUE);
	push(s, (Op){.kind = OP_SET, .dst = (void*)(uintptr_t)dst, .n = n, .v = v});
	RET(0);
}

// VMM. A physical allocation is a memfd with a count of what holds it
// (its handle until cuMemRelease, and each mapping); imported ones too.
#define GRAN ((size_t)1 << 16)
typedef struct { int live, fd, dev, released, refs; size_t size; } Phys;
#define MAXP 1024
static Phys phys[MAXP];
typedef struct { int type, id; } Loc;
typedef struct { int type, handles; Loc loc; void* win32; unsigned char comp, rdma; unsigned short usage; unsigned char res[4]; } Prop;
typedef struct { Loc loc; int flags; } Access;
static size_t vmmUsed(int dev) {
	size_t n = 0;
	for (int i = 0; i < MAXP; i++) if (phys[i].live && phys[i].dev == dev) n += phys[i].size;
	return n;
}
static int goodProp(const Prop* p) {
	return p && p->type == 1 && p->handles == 1 && p->loc.type == 1 && p->loc.id >= 0 && p->loc.id < NDEV && !p->win32;
}
static Phys* physOf(unsigned long long h) {
	if (h == 0 || h > MAXP || !phys[h - 1].live || phys[h - 1].released) return NULL;
	return &phys[h - 1];
}
static void physDrop(Phys* ph) {
	if (--ph->refs == 0) { close(ph->fd); ph->live = 0; }
}
static unsigned long long physNew(int fd, size_t size, int dev) {
	for (int i = 0; i < MAXP; i++) {
		if (phys[i].live) continue;
		phys[i] = (Phys){.live = 1, .fd = fd, .dev = dev, .refs = 1, .size = size};
		return i + 1;
	}
	return 0;
}
CUresult cuMemGetAllocationGranularity(size_t* g, const Prop* p, int option) {
	if (!goodProp(p) || option != 0) return R_INVALID_VALUE;
	*g = GRAN;
	return 0;
}
CUresult cuMemCreate(unsigned long long* h, size_t n, const Prop* p, unsigned long long flags) {
	LOCK;
	if (!goodProp(p) || flags || n == 0 || n % GRAN) RET(R_INVALID_VALUE);
	if (n > TOTAL - vmmUsed(p->loc.id)) RET(R_OUT_OF_MEMORY);
	int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, n) != 0) RET(R_OUT_OF_MEMORY);
	if (!(*h = physNew(fd, n, p->loc.id))) { close(fd); RET(R_OUT_OF_MEMORY); }
	RET(0);
}
CUresult cuMemRelease(unsigned long long h) {
	LOCK;
	Phys* ph = physOf(h);
	if (!ph) RET(R_INVALID_VALUE);
	ph->released = 1;
	physDrop(ph);
	RET(0);
}
CUresult cuMemAddressReserve(CUdeviceptr* p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags) {
	LOCK;
	if (n == 0 || n % GRAN || align % GRAN || addr || flags) RET(R_INVALID_VALUE);
	Alloc* a = slot();
	void* m = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (!a || m == MAP_FAILED) RET(R_OUT_OF_MEMORY);
	*a = (Alloc){.base = (uintptr_t)m, .size = n, .kind = RESERVED};
	*p = (CUdeviceptr)(uintptr_t)m;
	RET(0);
}
CUresult cuMemAddressFree(CUdeviceptr p, size_t n) {
	LOCK;
	Alloc* a = exact((uintptr_t)p, RESERVED);
	if (!a || a->size != n || find((uintptr_t)p, 0, VMAP)) RET(R_INVALID_VALUE);
	munmap((void*)a->base, a->size);
	a->kind = 0;
	RET(0);
}
CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, unsigned long long h, unsigned long long flags) {
	LOCK;
	Phys* ph = physOf(h);
	if (!ph || off || flags || n != ph->size || !find((uintptr_t)p, n, RESERVED) || find((uintptr_t)p, 0, VMAP)) RET(R_INVALID_VALUE);
	Alloc* a = slot();
	if (!a) RET(R_OUT_OF_MEMORY);
	if (mmap((void*)(uintptr_t)p, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph->fd, 0) == MAP_FAILED) RET(R_OUT_OF_MEMORY);
	*a = (Alloc){.base = (uintptr_t)p, .size = n, .kind = VMAP, .dev = -1, .ph = (int)h};
	ph->refs++;
	RET(0);
}
CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const Access* d, size_t count) {
	LOCK;
	Alloc* a = exact((uintptr_t)p, VMAP);
	if (!a || a->size != n || count != 1 || d->loc.type != 1 || d->loc.id < 0 || d->loc.id >= NDEV || d->flags != 3) RET(R_INVALID_VALUE);
	a->access = 1;
	a->dev = d->loc.id;
	RET(0);
}
CUresult cuMemUnmap(CUdeviceptr p, size_t n) {
	LOCK;
	Alloc* a = exact((uintptr_t)p, VMAP);
	if (!a || a->size != n) RET(R_INVALID_VALUE);
	for (int d = 0; d < NDEV; d++) flushdev(d, 0); // the real one waits for work on the memory
	mmap((void*)a->base, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	physDrop(&phys[a->ph - 1]);
	a->kind = 0;
	RET(0);
}
CUresult cuMemExportToShareableHandle(void* out, unsigned long long h, int type, unsigned long long flags) {
	LOCK;
	Phys* ph = physOf(h);
	if (!ph || type != 1 || flags) RET(R_INVALID_VALUE);
	int fd = fcntl(ph->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0) RET(R_OUT_OF_MEMORY);
	*(int*)out = fd;
	RET(0);
}
CUresult cuMemImportFromShareableHandle(unsigned long long* h, void* os, int type) {
	LOCK;
	int fd = (int)(intptr_t)os;
	struct stat st;
	if (type != 1 || fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size % GRAN) RET(R_INVALID_VALUE);
	int mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (mine < 0) RET(R_OUT_OF_MEMORY);
	if (!(*h = physNew(mine, st.st_size, cur ? cur->dev : 0))) { close(mine); RET(R_OUT_OF_MEMORY); }
	RET(0);
}
CUresult cuMemGetInfo_v2(size_t* f, size_t* t) {
	LOCK;
	NEED_CTX;
	size_t used = 0;
	for (int i = 0; i < MAXA; i++) if (allocs[i].kind == DEVMEM && allocs[i].dev == cur->dev) used += allocs[i].size;
	used += vmmUsed(cur->dev);
	*f = TOTAL - used;
	*t = TOTAL;
	RET(0);
}
CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* n, CUdeviceptr p) {
	LOCK;
	NEED_CTX;
	Alloc* a = find((uintptr_t)p, 0, DEVMEM | MAPPED | VMAP);
	if (!a || a->dev != cur->dev) RET(R_NOT_FOUND);
	*base = a->base;
	*n = a->size;
	RET(0);
}

CUresult cuStreamCreate(void** h, unsigned flags) {
	LOCK;
	NEED_CTX;
	for (int i = 0; i < MAXS; i++) {
		if (streams[i]) continue;
		Stream* s = calloc(1, sizeof *s);
		*s = (Stream){.magic = STREAM_MAGIC, .dev = cur->dev, .live = 1, .blocking = !(flags & 1)};
		s->tail = &s->head;
		streams[i] = s;
		*h = s;
		RET(0);
	}
	RET(R_OUT_OF_MEMORY);
}
CUresult cuStreamDestroy_v2(void* h) {
	LOCK;
	if (!h) RET(R_INVALID_HANDLE);
	STREAM(h, s);
	flush(s); // the real driver lets queued work finish
	for (int i = 0; i < MAXS; i++) if (streams[i] == s) streams[i] = NULL;
	s->live = 0; // kept, so that a later use is caught
	RET(0);
}
CUresult cuStreamSynchronize(void* h) {
	LOCK;
	STREAM(h, s);
	flush(s);
	RET(0);
}
CUresult cuStreamQuery(void* h) {
	LOCK;
	STREAM(h, s);
	RET(s->head ? R_NOT_READY : 0);
}
// A wait for an interprocess event is stream work: it waits, when its
// stream runs, for the record that was latest when it was queued.
CUresult cuStreamWaitEvent(void* h, void* e, unsigned flags) {
	LOCK;
	STREAM(h, s);
	Event* ev = e;
	if (!ev || ev->magic != EVENT_MAGIC || !ev->live) RET(R_INVALID_HANDLE);
	if (ev->sh) {
		uint64_t want = __atomic_load_n(&ev->sh->recorded, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&ev->sh->reached, __ATOMIC_ACQUIRE) < want) push(s, (Op){.kind = OP_WAIT_SHARED, .sh = ev->sh, .seq = want});
		RET(0);
	}
	if (ev->recorded && !ev->done) flush(ev->on);
	RET(0);
}

// waitShared runs the streams of this process that hold a record of the
// event up to seq, then waits until another process has run it too (with
// the lock held: this process waits, as its GPU would). A record that never
// comes ends the wait after a minute, leaving the data it guarded stale.
static void flushIfRecords(Stream* s, EventShared* sh, uint64_t seq) {
	for (Op* o = s ? s->head : NULL; o; o = o->next) {
		if (o->kind == OP_EVENT && o->sh && o->sh->id == sh->id && o->seq <= seq) { flush(s); return; }
	}
}
static void waitShared(EventShared* sh, uint64_t seq) {
	for (int i = 0; i < MAXS; i++) flushIfRecords(streams[i], sh, seq);
	for (int d = 0; d < NDEV; d++) flushIfRecords(&legacy[d], sh, seq);
	for (double end = now() + 60; __atomic_load_n(&sh->reached, __ATOMIC_ACQUIRE) < seq && now() < end;) usleep(100);
}
static uint64_t eventIds;
CUresult cuEventCreate(void** e, unsigned flags) {
	LOCK;
	NEED_CTX;
	if ((flags & 4) && !(flags & 2)) RET(R_INVALID_VALUE); // interprocess needs CU_EVENT_DISABLE_TIMING
	Event* ev = calloc(1, sizeof *ev);
	*ev = (Event){.magic = EVENT_MAGIC, .dev = cur->dev, .live = 1, .flags = flags, .fd = -1};
	if (flags & 4) {
		int fd = memfd_create("fakecuda-event", MFD_CLOEXEC);
		void* m = MAP_FAILED;
		if (fd >= 0 && ftruncate(fd, 4096) == 0) m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) { if (fd >= 0) close(fd); free(ev); RET(R_OUT_OF_MEMORY); }
		ev->sh = m;
		ev->sh->id = (uint64_t)getpid() << 32 | ++eventIds;
		ev->fd = fd;
	}
	*e = ev;
	RET(0);
}
static CUresult event(void* e, Event** out) {
	Event* ev = e;
	if (!cur) return R_INVALID_CONTEXT;
	if (!ev || ev->magic != EVENT_MAGIC || !ev->live) return R_INVALID_HANDLE;
	if (ev->dev != cur->dev) return R_INVALID_CONTEXT;
	*out = ev;
	return 0;
}
#define EVENT(h, ev) Event* ev; { CUresult r = event(h, &ev); if (r) RET(r); }
CUresult cuEventRecord(void* e, void* h) {
	LOCK;
	STREAM(h, s);
	EVENT(e, ev);
	ev->recorded = 1;
	ev->done = 0;
	ev->on = s;
	Op o = {.kind = OP_EVENT, .ev = ev};
	if (ev->sh) {
		o.sh = ev->sh;
		o.seq = __atomic_add_fetch(&ev->sh->recorded, 1, __ATOMIC_ACQ_REL);
	}
	push(s, o);
	RET(0);
}
CUresult cuEventSynchronize(void* e) {
	LOCK;
	EVENT(e, ev);
	if (ev->sh) waitShared(ev->sh, __atomic_load_n(&ev->sh->recorded, __ATOMIC_ACQUIRE));
	else if (ev->recorded && !ev->done) flush(ev->on);
	RET(0);
}
CUresult cuEventQuery(void* e) {
	LOCK;
	EVENT(e, ev);
	if (ev->sh) RET(__atomic_load_n(&ev->sh->reached, __ATOMIC_ACQUIRE) >= __atomic_load_n(&ev->sh->recorded, __ATOMIC_ACQUIRE) ? 0 : R_NOT_READY);
	RET(!ev->recorded || ev->done ? 0 : R_NOT_READY);
}
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) {
	LOCK;
	EVENT(a, start);
	EVENT(b, end);
	if ((start->flags | end->flags) & 2 || !start->recorded || !end->recorded) RET(R_INVALID_HANDLE);
	if (!start->done || !end->done) RET(R_NOT_READY);
	*ms = (float)((end->t - start->t) * 1e3);
	RET(0);
}
// An interprocess event's page stays mapped: a wait queued for it may
// still read it. Its descriptor goes, so that its handle opens no more.
CUresult cuEventDestroy_v2(void* e) {
	LOCK;
	EVENT(e, ev);
	ev->live = 0;
	if (ev->fd >= 0) { close(ev->fd); ev->fd = -1; }
	RET(0);
}

// An event's handle: the magic, the exporter's pid, its descriptor of the
// event's page, and the event's id, which the page must hold.
static const char ipcEventMagic[8] = "FAKEEVT";
CUresult cuIpcGetEventHandle(IpcHandle* h, void* e) {
	LOCK;
	EVENT(e, ev);
	if (!ev->sh || ev->opened) RET(R_INVALID_VALUE);
	memset(h, 0, sizeof *h);
	memcpy(h->b, ipcEventMagic, 8);
	int32_t pid = getpid(), fd = ev->fd;
	memcpy(h->b + 8, &pid, 4);
	memcpy(h->b + 12, &fd, 4);
	memcpy(h->b + 16, &ev->sh->id, 8);
	RET(0);
}
CUresult cuIpcOpenEventHandle(void** e, IpcHandle h) {
	LOCK;
	NEED_CTX;
	if (memcmp(h.b, ipcEventMagic, 8) != 0) RET(R_INVALID_VALUE);
	int32_t pid, fd;
	uint64_t id;
	memcpy(&pid, h.b + 8, 4);
	memcpy(&fd, h.b + 12, 4);
	memcpy(&id, h.b + 16, 8);
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
	int f = open(path, O_RDWR | O_CLOEXEC);
	if (f < 0) RET(R_INVALID_VALUE);
	struct stat st;
	void* m = MAP_FAILED;
	if (fstat(f, &st) == 0 && st.st_size == 4096) m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	close(f);
	if (m == MAP_FAILED) RET(R_INVALID_VALUE);
	if (((EventShared*)m)->id != id) { munmap(m, 4096); RET(R_INVALID_VALUE); }
	Event* ev = calloc(1, sizeof *ev);
	*ev = (Event){.magic = EVENT_MAGIC, .dev = cur->dev, .live = 1, .flags = 6, .sh = m, .fd = -1, .opened = 1};
	*e = ev;
	RET(0);
}

static const char ipcMagic[8] = "FAKEIPC";
CUresult cuIpcGetMemHandle(IpcHandle* h, CUdeviceptr p) {
	LOCK;
	NEED_CTX;
	Alloc* a = exact((uintptr_t)p, DEVMEM);
	if (!a || a->dev != cur->dev) RET(R_INVALID_VALUE);
	memset(h, 0, sizeof *h);
	memcpy(h->b, ipcMagic, 8);
	int32_t pid = getpid(), fd = a->fd;
	uint64_t size = a->size;
	memcpy(h->b + 8, &pid, 4);
	memcpy(h->b + 12, &fd, 4);
	memcpy(h->b + 16, &size, 8);
	a->exported = 1;
	RET(0);
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, IpcHandle h, unsigned flags) {
	LOCK;
	NEED_CTX;
	if (memcmp(h.b, ipcMagic, 8) != 0 || flags != 1) RET(R_INVALID_VALUE);
	int32_t pid, fd;
	uint64_t size;
	memcpy(&pid, h.b + 8, 4);
	memcpy(&fd, h.b + 12, 4);
	memcpy(&size, h.b + 16, 8);
	if (pid == getpid()) RET(R_INVALID_CONTEXT);
	for (int i = 0; i < MAXA; i++)
		if (allocs[i].kind == MAPPED && allocs[i].peer_pid == pid && allocs[i].peer_fd == fd && allocs[i].dev == cur->dev) RET(R_ALREADY_MAPPED);
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
	int f = open(path, O_RDWR | O_CLOEXEC);
	if (f < 0) RET(R_INVALID_VALUE);
	struct stat st;
	if (fstat(f, &st) != 0 || (uint64_t)st.st_size != size) { close(f); RET(R_INVALID_VALUE); }
	void* m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	close(f);
	Alloc* a = slot();
	if (m == MAP_FAILED || !a) RET(R_OUT_OF_MEMORY);
	*a = (Alloc){.base = (uintptr_t)m, .size = size, .kind = MAPPED, .dev = cur->dev, .peer_pid = pid, .peer_fd = fd};
	*p = (CUdeviceptr)(uintptr_t)m;
	RET(0);
}
CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
	LOCK;
	NEED_CTX;
	Alloc* a = exact((uintptr_t)p, MAPPED);
	if (!a || a->dev != cur->dev) RET(R_INVALID_VALUE);
	flushdev(cur->dev, 0);
	munmap((void*)a->base, a->size);
	a->kind = 0;
	RET(0);
}

#define MODULE_MAGIC 0x4d4f444c
typedef struct { int magic, dev, live; } Module;
typedef struct { Module* m; } Function;
CUresult cuModuleLoadData(void** m, const void* image) {
	LOCK;
	NEED_CTX;
	if (!strstr((const char*)image, ".entry add_one")) RET(R_INVALID_PTX);
	Module* mod = calloc(1, sizeof *mod);
	*mod = (Module){MODULE_MAGIC, cur->dev, 1};
	*m = mod;
	RET(0);
}
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
	LOCK;
	NEED_CTX;
	Module* mod = m;
	if (!mod || mod->magic != MODULE_MAGIC || !mod->live || mod->dev != cur->dev) RET(R_INVALID_HANDLE);
	if (strcmp(name, "add_one") != 0) RET(R_NOT_FOUND);
	Function* fn = calloc(1, sizeof *fn);
	fn->m = mod;
	*f = fn;
	RET(0);
}
CUresult cuModuleUnload(void* m) {
	LOCK;
	NEED_CTX;
	Module* mod = m;
	if (!mod || mod->magic != MODULE_MAGIC || !mod->live || mod->dev != cur->dev) RET(R_INVALID_HANDLE);
	mod->live = 0;
	RET(0);
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shmem, void* h, void** params, void** extra) {
	LOCK;
	STREAM(h, s);
	Function* fn = f;
	if (!fn || !fn->m->live || fn->m->dev != s->dev) RET(R_INVALID_HANDLE);
	if (!params || extra || (uintptr_t)params[0] % 8 || (uintptr_t)params[1] % 4) RET(R_INVALID_VALUE);
	CUdeviceptr x = *(CUdeviceptr*)params[0];
	unsigned n = *(unsigned*)params[1];
	if (!ondev(x, (size_t)n * 4, s->dev) && !pinned((void*)(uintptr_t)x, (size_t)n * 4)) RET(R_ILLEGAL_ADDRESS);
	unsigned long long threads = (unsigned long long)gx * gy * gz * bx * by * bz;
	push(s, (Op){.kind = OP_ADD1, .dst = (void*)(uintptr_t)x, .n = n, .threads = threads});
	RET(0);
}
`

// Host work runs when nobody synchronizes the stream: the drain goroutine
// takes it, in order, with the copies queued behind it, and the error
// it meets waits for the next Synchronize, which reports it once. A
// Destroy right after a HostFunc runs it once. (Against the fake, through
// TestCUDADriverOnAFakeLibrary, as well as on a GPU.)
func TestCUDAOnGPUHostWorkRunsWithoutSynchronize(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	var ran []string // written by host functions only, which run one at a time
	sentinel := errors.New("from a host function")
	done := make(chan struct{})
	must(t, s.HostFunc(func() error { ran = append(ran, "first"); return nil }))
	must(t, s.HostFunc(func() error { ran = append(ran, "failing"); return sentinel }))
	// The copy is queued behind both; the check behind it.
	copyThenCheck(t, d, s, 9, func() { ran = append(ran, "after the copy") }, done)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("host work on a stream nobody synchronizes did not run")
	}
	if want := []string{"first", "failing", "after the copy"}; !slices.Equal(ran, want) {
		t.Errorf("host functions ran as %q, want %q", ran, want)
	}
	if err := s.Synchronize(); !errors.Is(err, sentinel) {
		t.Errorf("Synchronize after host work that failed unwatched returned %v, want its error", err)
	}
	must(t, s.Synchronize()) // reported once

	s2, err := d.NewStream()
	must(t, err)
	var runs atomic.Int64
	must(t, s2.HostFunc(func() error { runs.Add(1); return sentinel }))
	if err := s2.Destroy(); !errors.Is(err, sentinel) {
		t.Errorf("Destroy right after a failing HostFunc returned %v, want its error", err)
	}
	time.Sleep(20 * time.Millisecond) // a drain goroutine still running must find nothing
	if r := runs.Load(); r != 1 {
		t.Errorf("a host function queued before Destroy ran %d times, want once", r)
	}
}
