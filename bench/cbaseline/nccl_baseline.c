//go:build cgo

// The NCCL baseline: each operation called straight from a C loop on an
// NCCL communicator and a CUDA stream of its own, each iteration timed with
// CUDA events, or, with sync_each (gpucomm timed by wall clock: -nostream,
// -wall), by the host's monotonic clock from the call to the end of a
// stream synchronize, after a barrier and a synchronize, as gpucomm's
// wall-clock iteration is timed. It calls NCCL and CUDA through the
// functions gpucomm's own loaders resolved (internal/nccl, internal/cuda: GPUCOMM_NCCL_LIB and
// GPUCOMM_CUDA_LIB honoured, versioned CUDA symbols chosen as they choose
// them), handed over once by gcb_nccl_bind, so that it times the library
// the nccl backend uses; it never opens a library itself.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baseline.h"

// The few NCCL and CUDA driver declarations used here, ABI-compatible with
// nccl.h and cuda.h.
typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;

// The types and reductions come mapped from Go (internal/ncclmap); the loop
// itself names only those of its barrier and its acknowledgement.
enum { ncclUint8 = 1 };
enum { ncclMax = 2 };
enum { CU_STREAM_NON_BLOCKING = 1, CU_EVENT_DEFAULT = 0 };

// The functions, typed; filled from gcb_nccl_bind's table (GCB_FN_*).
static struct {
	int bound;
	ncclResult_t (*GetUniqueId)(ncclUniqueId *);
	ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
	ncclResult_t (*CommDestroy)(ncclComm_t);
	ncclResult_t (*AllReduce)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*AllGather)(const void *, void *, size_t, int, ncclComm_t, CUstream);
	ncclResult_t (*ReduceScatter)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*Broadcast)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*Reduce)(const void *, void *, size_t, int, int, int, ncclComm_t, CUstream);
	ncclResult_t (*Send)(const void *, size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*Recv)(void *, size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*GroupStart)(void);
	ncclResult_t (*GroupEnd)(void);
	const char *(*GetErrorString)(ncclResult_t);

	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*PrimaryCtxRelease)(CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*StreamCreate)(CUstream *, unsigned);
	CUresult (*StreamSynchronize)(CUstream);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*EventCreate)(CUevent *, unsigned);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
	CUresult (*EventDestroy)(CUevent);
	CUresult (*GetErrorString_cu)(CUresult, const char **);
} L;

struct gcb_nccl {
	ncclComm_t comm;
	CUdevice dev;
	CUcontext ctx;
	CUstream stream;
	CUevent *ev;
	int nev;
	int rank, nranks;
};

int gcb_nccl_bind(void *const fn[GCB_FN_COUNT]) {
	for (int i = 0; i < GCB_FN_COUNT; i++) {
		if (fn[i] == NULL) return GCB_EARG;
	}
	*(void **)&L.GetUniqueId = fn[GCB_FN_ncclGetUniqueId];
	*(void **)&L.CommInitRank = fn[GCB_FN_ncclCommInitRank];
	*(void **)&L.CommDestroy = fn[GCB_FN_ncclCommDestroy];
	*(void **)&L.AllReduce = fn[GCB_FN_ncclAllReduce];
	*(void **)&L.AllGather = fn[GCB_FN_ncclAllGather];
	*(void **)&L.ReduceScatter = fn[GCB_FN_ncclReduceScatter];
	*(void **)&L.Broadcast = fn[GCB_FN_ncclBroadcast];
	*(void **)&L.Reduce = fn[GCB_FN_ncclReduce];
	*(void **)&L.Send = fn[GCB_FN_ncclSend];
	*(void **)&L.Recv = fn[GCB_FN_ncclRecv];
	*(void **)&L.GroupStart = fn[GCB_FN_ncclGroupStart];
	*(void **)&L.GroupEnd = fn[GCB_FN_ncclGroupEnd];
	*(void **)&L.GetErrorString = fn[GCB_FN_ncclGetErrorString];
	*(void **)&L.DeviceGet = fn[GCB_FN_cuDeviceGet];
	*(void **)&L.PrimaryCtxRetain = fn[GCB_FN_cuDevicePrimaryCtxRetain];
	*(void **)&L.PrimaryCtxRelease = fn[GCB_FN_cuDevicePrimaryCtxRelease];
	*(void **)&L.CtxSetCurrent = fn[GCB_FN_cuCtxSetCurrent];
	*(void **)&L.StreamCreate = fn[GCB_FN_cuStreamCreate];
	*(void **)&L.StreamSynchronize = fn[GCB_FN_cuStreamSynchronize];
	*(void **)&L.StreamDestroy = fn[GCB_FN_cuStreamDestroy];
	*(void **)&L.EventCreate = fn[GCB_FN_cuEventCreate];
	*(void **)&L.EventRecord = fn[GCB_FN_cuEventRecord];
	*(void **)&L.EventElapsedTime = fn[GCB_FN_cuEventElapsedTime];
	*(void **)&L.EventDestroy = fn[GCB_FN_cuEventDestroy];
	*(void **)&L.GetErrorString_cu = fn[GCB_FN_cuGetErrorString];
	L.bound = 1;
	return GCB_OK;
}

// Go binds before any other call; this only keeps a NULL call from crashing.
static int loaded(char *err, int errlen) {
	if (!L.bound) {
		snprintf(err, errlen, "NCCL and CUDA are not bound (gcb_nccl_bind)");
		return GCB_ELOAD;
	}
	return GCB_OK;
}

static int nccl_fail(const char *what, ncclResult_t r, char *err, int errlen) {
	snprintf(err, errlen, "%s: %s (NCCL error %d)", what, L.GetErrorString(r), r);
	return r > 0 ? r : GCB_EARG;
}

static int cuda_fail(const char *what, CUresult r, char *err, int errlen) {
	const char *msg = "unknown error";
	if (L.GetErrorString_cu(r, &msg) != 0 || msg == NULL) msg = "unknown error";
	snprintf(err, errlen, "%s: %s (CUDA error %d)", what, msg, r);
	return GCB_ECUDA;
}

#define NCCL(call, what) do { ncclResult_t r_ = (call); if (r_ != 0) return nccl_fail(what, r_, err, errlen); } while (0)
#define CU(call, what) do { CUresult r_ = (call); if (r_ != 0) return cuda_fail(what, r_, err, errlen); } while (0)

int gcb_nccl_unique_id(unsigned char id[128], char *err, int errlen) {
	int rc = loaded(err, errlen);
	if (rc != GCB_OK) return rc;
	ncclUniqueId u;
	NCCL(L.GetUniqueId(&u), "ncclGetUniqueId");
	memcpy(id, u.internal, 128);
	return GCB_OK;
}

int gcb_nccl_open(int ordinal, int nranks, int rank, const unsigned char id[128], gcb_nccl **out, char *err, int errlen) {
	int rc = loaded(err, errlen);
	if (rc != GCB_OK) return rc;
	gcb_nccl *s = calloc(1, sizeof *s);
	if (s == NULL) return GCB_ENOMEM;
	s->rank = rank;
	s->nranks = nranks;
	ncclUniqueId u;
	memcpy(u.internal, id, 128);
	CUresult cr = L.DeviceGet(&s->dev, ordinal);
	if (cr == 0) cr = L.PrimaryCtxRetain(&s->ctx, s->dev);
	if (cr != 0) {
		free(s);
		return cuda_fail("cuDevicePrimaryCtxRetain", cr, err, errlen);
	}
	// NCCL takes the device from the context current on this thread.
	if ((cr = L.CtxSetCurrent(s->ctx)) == 0) cr = L.StreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
	if (cr != 0) {
		L.PrimaryCtxRelease(s->dev);
		free(s);
		return cuda_fail("cuStreamCreate", cr, err, errlen);
	}
	ncclResult_t nr = L.CommInitRank(&s->comm, nranks, u, rank);
	if (nr != 0) {
		L.StreamDestroy(s->stream);
		L.PrimaryCtxRelease(s->dev);
		free(s);
		return nccl_fail("ncclCommInitRank", nr, err, errlen);
	}
	*out = s;
	return GCB_OK;
}

static int events(gcb_nccl *s, int n, char *err, int errlen) {
	if (n <= s->nev) return GCB_OK;
	CUevent *ev = realloc(s->ev, sizeof(CUevent) * (size_t)n);
	if (ev == NULL) return GCB_ENOMEM;
	s->ev = ev;
	for (; s->nev < n; s->nev++) {
		CU(L.EventCreate(&s->ev[s->nev], CU_EVENT_DEFAULT), "cuEventCreate");
	}
	return GCB_OK;
}

static int one(gcb_nccl *s, const gcb_args *a, char *err, int errlen) {
	const void *sb = (const void *)a->send;
	void *rb = (void *)a->recv;
	int dt = a->dtype, op = a->op;
	switch (a->coll) {
	case GCB_ALLREDUCE: NCCL(L.AllReduce(sb, rb, a->count, dt, op, s->comm, s->stream), "ncclAllReduce"); break;
	case GCB_ALLGATHER: NCCL(L.AllGather(sb, rb, a->count, dt, s->comm, s->stream), "ncclAllGather"); break;
	case GCB_REDUCESCATTER: NCCL(L.ReduceScatter(sb, rb, a->count, dt, op, s->comm, s->stream), "ncclReduceScatter"); break;
	case GCB_BROADCAST: NCCL(L.Broadcast(sb, rb, a->count, dt, a->root, s->comm, s->stream), "ncclBroadcast"); break;
	case GCB_REDUCE: NCCL(L.Reduce(sb, rb, a->count, dt, op, a->root, s->comm, s->stream), "ncclReduce"); break;
	case GCB_ALLTOALL:
		// As nccl-tests: one send and one receive per peer in a group.
		NCCL(L.GroupStart(), "ncclGroupStart");
		for (int r = 0; r < s->nranks; r++) {
			size_t off = (size_t)r * a->count * a->elt;
			NCCL(L.Send((const char *)sb + off, a->count, dt, r, s->comm, s->stream), "ncclSend");
			NCCL(L.Recv((char *)rb + off, a->count, dt, r, s->comm, s->stream), "ncclRecv");
		}
		NCCL(L.GroupEnd(), "ncclGroupEnd");
		break;
	case GCB_PINGPONG:
		if (a->initiator) {
			NCCL(L.Send(sb, a->count, dt, a->peer, s->comm, s->stream), "ncclSend");
			NCCL(L.Recv(rb, a->count, dt, a->peer, s->comm, s->stream), "ncclRecv");
		} else {
			NCCL(L.Recv(rb, a->count, dt, a->peer, s->comm, s->stream), "ncclRecv");
			NCCL(L.Send(rb, a->count, dt, a->peer, s->comm, s->stream), "ncclSend");
		}
		break;
	case GCB_BANDWIDTH:
		// The window goes out as one group, as osu_bw posts it nonblocking.
		NCCL(L.GroupStart(), "ncclGroupStart");
		for (int w = 0; w < a->window; w++) {
			if (a->initiator) NCCL(L.Send(sb, a->count, dt, a->peer, s->comm, s->stream), "ncclSend");
			else NCCL(L.Recv(rb, a->count, dt, a->peer, s->comm, s->stream), "ncclRecv");
		}
		NCCL(L.GroupEnd(), "ncclGroupEnd");
		if (a->initiator) NCCL(L.Recv(rb, 1, ncclUint8, a->peer, s->comm, s->stream), "ncclRecv (ack)");
		else NCCL(L.Send(rb, 1, ncclUint8, a->peer, s->comm, s->stream), "ncclSend (ack)");
		break;
	default:
		return GCB_EARG;
	}
	return GCB_OK;
}

static double now_s(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

// per_message turns a round trip into one-way latency and a window into
// one message's time on the initiator; its peer reports zeros.
static double per_message(const gcb_args *a, double t) {
	if (a->coll == GCB_PINGPONG) return a->initiator ? t / 2 : 0;
	if (a->coll == GCB_BANDWIDTH) return a->initiator ? t / a->window : 0;
	return t;
}

// barrier queues the loop's barrier, a one-element allreduce, on the
// stream: every rank starts after all have arrived. Point-to-point pairs
// skip it (the other ranks sit their test out).
static int barrier(gcb_nccl *s, const gcb_args *a, char *err, int errlen) {
	if (a->coll == GCB_PINGPONG || a->coll == GCB_BANDWIDTH || a->recv == 0) return GCB_OK;
	NCCL(L.AllReduce((void *)a->recv, (void *)a->recv, 1, ncclUint8, ncclMax, s->comm, s->stream), "ncclAllReduce (barrier)");
	return GCB_OK;
}

// run_wall times each iteration by the host's clock, as gpucomm's
// wall-clock iterations are (bench's wallIteration): every rank met first
// for a collective (the barrier, waited for), then the call and a
// synchronize of the stream.
static int run_wall(gcb_nccl *s, const gcb_args *a, int iters, double *times, char *err, int errlen) {
	int rc;
	for (int i = 0; i < iters; i++) {
		if ((rc = barrier(s, a, err, errlen)) != GCB_OK) return rc;
		CU(L.StreamSynchronize(s->stream), "cuStreamSynchronize");
		double t0 = now_s();
		if ((rc = one(s, a, err, errlen)) != GCB_OK) return rc;
		CU(L.StreamSynchronize(s->stream), "cuStreamSynchronize");
		times[i] = per_message(a, now_s() - t0);
	}
	return GCB_OK;
}

int gcb_nccl_run(gcb_nccl *s, const gcb_args *in, int iters, double *times, char *err, int errlen) {
	if (s == NULL || iters < 0 || in->warmup < 0) return GCB_EARG;
	gcb_args a = *in;
	// Go mapped dtype and op (internal/ncclmap); an unmapped one never comes
	// this far, and where one reduces, an unset op is GCB_ETYPE, not a Sum.
	int reduces = a.coll == GCB_ALLREDUCE || a.coll == GCB_REDUCESCATTER || a.coll == GCB_REDUCE;
	if (a.dtype < 0 || a.elt == 0 || (reduces && a.op == GCB_NO_OP)) return GCB_ETYPE;
	int rc;
	CU(L.CtxSetCurrent(s->ctx), "cuCtxSetCurrent");
	// Events only where they time: a wall-clock run keeps none alive.
	if (!a.sync_each && (rc = events(s, 2 * iters, err, errlen)) != GCB_OK) return rc;
	for (int i = 0; i < a.warmup; i++) {
		if ((rc = one(s, &a, err, errlen)) != GCB_OK) return rc;
	}
	if ((rc = barrier(s, &a, err, errlen)) != GCB_OK) return rc;
	CU(L.StreamSynchronize(s->stream), "cuStreamSynchronize");
	if (a.sync_each) return run_wall(s, &a, iters, times, err, errlen);
	for (int i = 0; i < iters; i++) {
		CU(L.EventRecord(s->ev[2 * i], s->stream), "cuEventRecord");
		if ((rc = one(s, &a, err, errlen)) != GCB_OK) return rc;
		CU(L.EventRecord(s->ev[2 * i + 1], s->stream), "cuEventRecord");
	}
	CU(L.StreamSynchronize(s->stream), "cuStreamSynchronize");
	for (int i = 0; i < iters; i++) {
		float ms = 0;
		CU(L.EventElapsedTime(&ms, s->ev[2 * i], s->ev[2 * i + 1]), "cuEventElapsedTime");
		times[i] = per_message(&a, ms / 1e3);
	}
	return GCB_OK;
}

int gcb_nccl_close(gcb_nccl *s, char *err, int errlen) {
	if (s == NULL) return GCB_OK;
	int rc = GCB_OK;
	if (L.CtxSetCurrent(s->ctx) == 0) {
		for (int i = 0; i < s->nev; i++) L.EventDestroy(s->ev[i]);
		L.StreamSynchronize(s->stream);
		L.StreamDestroy(s->stream);
	}
	ncclResult_t nr = L.CommDestroy(s->comm);
	if (nr != 0) rc = nccl_fail("ncclCommDestroy", nr, err, errlen);
	L.PrimaryCtxRelease(s->dev);
	free(s->ev);
	free(s);
	return rc;
}
