// gpucomm's own declarations of the NCCL types and calls it uses, called
// through a table filled by dlsym at run time. Only nccl_cgo.go includes
// this file. Handles, buffers and streams arrive as uintptr_t.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef struct gpucomm_ncclComm* ncclComm_t;
typedef struct gpucomm_cudaStream* cudaStream_t;
typedef struct { char internal[128]; } ncclUniqueId;

// The head of ncclConfig_t as NCCL 2.14 defined it. NCCL reads only `size`
// bytes and treats fields newer than `version` as unset, so this prefix is
// valid for every later release.
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
} gpucomm_ncclConfig;

enum {
	K_ncclGetVersion, K_ncclGetErrorString, K_ncclGetLastError, K_ncclGetUniqueId,
	K_ncclCommInitRank, K_ncclCommInitRankConfig, K_ncclCommSplit,
	K_ncclCommFinalize, K_ncclCommDestroy, K_ncclCommAbort, K_ncclCommGetAsyncError,
	K_ncclCommCount, K_ncclCommCuDevice, K_ncclCommUserRank,
	K_ncclAllReduce, K_ncclReduce, K_ncclBroadcast, K_ncclAllGather, K_ncclReduceScatter,
	K_ncclSend, K_ncclRecv, K_ncclGroupStart, K_ncclGroupEnd,
	K_count
};

static void* gpucomm_nccl[K_count];
static void gpucomm_nccl_set(int slot, void* fn) { gpucomm_nccl[slot] = fn; }
static void gpucomm_nccl_clear(void) { for (int i = 0; i < K_count; i++) gpucomm_nccl[i] = NULL; }
static int gpucomm_nccl_has(int slot) { return gpucomm_nccl[slot] != NULL; }

#define NC(name, params) ((ncclResult_t (*) params) gpucomm_nccl[K_##name])
#define COMM(c) ((ncclComm_t)(c))
#define BUF(p) ((void*)(p))
#define STREAM(s) ((cudaStream_t)(s))

static const char* gn_errorString(ncclResult_t r) {
	if (!gpucomm_nccl[K_ncclGetErrorString]) return NULL;
	return ((const char* (*)(ncclResult_t)) gpucomm_nccl[K_ncclGetErrorString])(r);
}
static const char* gn_lastError(uintptr_t comm) {
	if (!gpucomm_nccl[K_ncclGetLastError]) return NULL;
	return ((const char* (*)(ncclComm_t)) gpucomm_nccl[K_ncclGetLastError])(COMM(comm));
}

static ncclResult_t gn_ncclGetVersion(int* v) { return NC(ncclGetVersion, (int*))(v); }
static ncclResult_t gn_ncclGetUniqueId(void* id) { return NC(ncclGetUniqueId, (ncclUniqueId*))((ncclUniqueId*)id); }

// The unique id travels by value, as NCCL's prototypes say.
static ncclResult_t gn_ncclCommInitRank(uintptr_t* comm, int nranks, const void* id, int rank) {
	ncclUniqueId u;
	memcpy(&u, id, sizeof u);
	ncclComm_t c = NULL;
	ncclResult_t r = NC(ncclCommInitRank, (ncclComm_t*, int, ncclUniqueId, int))(&c, nranks, u, rank);
	*comm = (uintptr_t)c;
	return r;
}
static ncclResult_t gn_ncclCommInitRankConfig(uintptr_t* comm, int nranks, const void* id, int rank, int blocking) {
	ncclUniqueId u;
	memcpy(&u, id, sizeof u);
	// Zeroed room after the prefix, for any release that reads past `size`.
	struct { gpucomm_ncclConfig c; char room[512]; } cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.c.size = sizeof cfg.c;
	cfg.c.magic = 0xcafebeef;
	cfg.c.version = 21400;
	cfg.c.blocking = blocking;
	ncclComm_t c = NULL;
	ncclResult_t r = NC(ncclCommInitRankConfig, (ncclComm_t*, int, ncclUniqueId, int, void*))(&c, nranks, u, rank, &cfg);
	*comm = (uintptr_t)c;
	return r;
}
// A NULL config: the new communicator inherits the parent's.
static ncclResult_t gn_ncclCommSplit(uintptr_t comm, int color, int key, uintptr_t* out) {
	ncclComm_t c = NULL;
	ncclResult_t r = NC(ncclCommSplit, (ncclComm_t, int, int, ncclComm_t*, void*))(COMM(comm), color, key, &c, NULL);
	*out = (uintptr_t)c;
	return r;
}
static ncclResult_t gn_ncclCommFinalize(uintptr_t comm) { return NC(ncclCommFinalize, (ncclComm_t))(COMM(comm)); }
static ncclResult_t gn_ncclCommDestroy(uintptr_t comm) { return NC(ncclCommDestroy, (ncclComm_t))(COMM(comm)); }
static ncclResult_t gn_ncclCommAbort(uintptr_t comm) { return NC(ncclCommAbort, (ncclComm_t))(COMM(comm)); }
static ncclResult_t gn_ncclCommGetAsyncError(uintptr_t comm, int* async) { return NC(ncclCommGetAsyncError, (ncclComm_t, int*))(COMM(comm), async); }
static ncclResult_t gn_ncclCommCount(uintptr_t comm, int* n) { return NC(ncclCommCount, (ncclComm_t, int*))(COMM(comm), n); }
static ncclResult_t gn_ncclCommCuDevice(uintptr_t comm, int* d) { return NC(ncclCommCuDevice, (ncclComm_t, int*))(COMM(comm), d); }
static ncclResult_t gn_ncclCommUserRank(uintptr_t comm, int* r) { return NC(ncclCommUserRank, (ncclComm_t, int*))(COMM(comm), r); }

// A collective may make a CUDA context current around itself, inside the
// same C call (one cgo call where cuda.WithContext makes three and locks the
// goroutine to its thread): cuCtxGetCurrent and cuCtxSetCurrent come from
// internal/cuda's table (gn_set_ctxfns); ctx 0 leaves the thread as it is.
// A CUDA failure is returned in cu (with stage 1 get, 2 set), NCCL's in r.
typedef struct { ncclResult_t r; int cu; int stage; } gn_ret;
static void* gn_ctxget;
static void* gn_ctxset;
static void gn_set_ctxfns(uintptr_t get, uintptr_t set) { gn_ctxget = (void*)get; gn_ctxset = (void*)set; }
static int gn_enter(uintptr_t ctx, uintptr_t* prev, gn_ret* ret) {
	*prev = ctx;
	if (ctx == 0) return 1;
	ret->stage = 1;
	if (!gn_ctxget || !gn_ctxset) { ret->cu = 201; return 0; } // CUDA_ERROR_INVALID_CONTEXT
	ret->cu = ((int (*)(uintptr_t*))gn_ctxget)(prev);
	if (ret->cu != 0) return 0;
	if (*prev != ctx) {
		ret->stage = 2;
		ret->cu = ((int (*)(uintptr_t))gn_ctxset)(ctx);
	}
	return ret->cu == 0;
}
// gn_leave puts back another context that was current; where none was it
// leaves ctx current, as internal/cuda's gc_leave does (and for the same
// reason: a Go thread's next call then sets nothing).
static void gn_leave(uintptr_t ctx, uintptr_t prev) {
	if (prev != 0 && prev != ctx) ((int (*)(uintptr_t))gn_ctxset)(prev);
}
#define GN_IN(ctx, call) \
	gn_ret ret = {0, 0, 0}; \
	uintptr_t prev; \
	if (!gn_enter(ctx, &prev, &ret)) return ret; \
	ret.r = call; \
	gn_leave(ctx, prev); \
	return ret;

static gn_ret gn_ncclAllReduce(uintptr_t ctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, uintptr_t comm, uintptr_t s) {
	GN_IN(ctx, NC(ncclAllReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))( BUF(send), BUF(recv), count, dt, op, COMM(comm), STREAM(s)))
}
static gn_ret gn_ncclReduce(uintptr_t ctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, int root, uintptr_t comm, uintptr_t s) {
	GN_IN(ctx, NC(ncclReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t))( BUF(send), BUF(recv), count, dt, op, root, COMM(comm), STREAM(s)))
}
static gn_ret gn_ncclBroadcast(uintptr_t ctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int root, uintptr_t comm, uintptr_t s) {
	GN_IN(ctx, NC(ncclBroadcast, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))( BUF(send), BUF(recv), count, dt, root, COMM(comm), STREAM(s)))
}
static gn_ret gn_ncclAllGather(uintptr_t ctx, uintptr_t send, uintptr_t recv, size_t sendcount, int dt, uintptr_t comm, uintptr_t s) {
	GN_IN(ctx, NC(ncclAllGather, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))( BUF(send), BUF(recv), sendcount, dt, COMM(comm), STREAM(s)))
}
static gn_ret gn_ncclReduceScatter(uintptr_t ctx, uintptr_t send, uintptr_t recv, size_t recvcount, int dt, int op, uintptr_t comm, uintptr_t s) {
	GN_IN(ctx, NC(ncclReduceScatter, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))( BUF(send), BUF(recv), recvcount, dt, op, COMM(comm), STREAM(s)))
}
static ncclResult_t gn_ncclSend(uintptr_t send, size_t count, int dt, int peer, uintptr_t comm, uintptr_t s) {
	return NC(ncclSend, (const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))(BUF(send), count, dt, peer, COMM(comm), STREAM(s));
}
static ncclResult_t gn_ncclRecv(uintptr_t recv, size_t count, int dt, int peer, uintptr_t comm, uintptr_t s) {
	return NC(ncclRecv, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))(BUF(recv), count, dt, peer, COMM(comm), STREAM(s));
}
static ncclResult_t gn_ncclGroupStart(void) { return NC(ncclGroupStart, (void))(); }
static ncclResult_t gn_ncclGroupEnd(void) { return NC(ncclGroupEnd, (void))(); }
