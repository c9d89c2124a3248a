//go:build cgo && (mpi || mpich)

// The MPI baseline: each operation called straight from a C loop on
// MPI_COMM_WORLD, timed with MPI_Wtime, so bench can show what gpucomm adds.
// The build tag keeps it out of binaries without MPI (no mpi.h there).

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "baseline.h"

int gcb_mpi_initialized(void) {
	int init = 0, fin = 0;
	MPI_Initialized(&init);
	MPI_Finalized(&fin);
	return init && !fin;
}

void gcb_mpi_error_string(int code, char *buf, int len) {
	char msg[MPI_MAX_ERROR_STRING];
	int n = 0;
	if (MPI_Error_string(code, msg, &n) != MPI_SUCCESS) {
		n = 0;
	}
	msg[n < MPI_MAX_ERROR_STRING ? n : MPI_MAX_ERROR_STRING - 1] = 0;
	strncpy(buf, msg, len - 1);
	buf[len - 1] = 0;
}

// Half and bfloat16 move as 16-bit integers; MPI has no arithmetic on them.
static int mpi_type(int dt, int reduces, MPI_Datatype *t) {
	switch (dt) {
	case GCB_INT8: *t = MPI_INT8_T; return GCB_OK;
	case GCB_UINT8: *t = MPI_UINT8_T; return GCB_OK;
	case GCB_INT32: *t = MPI_INT32_T; return GCB_OK;
	case GCB_UINT32: *t = MPI_UINT32_T; return GCB_OK;
	case GCB_INT64: *t = MPI_INT64_T; return GCB_OK;
	case GCB_UINT64: *t = MPI_UINT64_T; return GCB_OK;
	case GCB_FLOAT32: *t = MPI_FLOAT; return GCB_OK;
	case GCB_FLOAT64: *t = MPI_DOUBLE; return GCB_OK;
	case GCB_FLOAT16:
	case GCB_BFLOAT16:
		if (reduces) return GCB_ETYPE;
		*t = MPI_UINT16_T;
		return GCB_OK;
	}
	return GCB_ETYPE;
}

// Avg has no MPI op: it is timed as MPI_SUM, the part MPI would do of it.
static int mpi_op(int op, MPI_Op *o) {
	switch (op) {
	case GCB_SUM: case GCB_AVG: *o = MPI_SUM; return GCB_OK;
	case GCB_PROD: *o = MPI_PROD; return GCB_OK;
	case GCB_MIN: *o = MPI_MIN; return GCB_OK;
	case GCB_MAX: *o = MPI_MAX; return GCB_OK;
	}
	return GCB_ETYPE;
}

int gcb_mpi_maps(int dtype, int reduces, int op) {
	MPI_Datatype t;
	MPI_Op o;
	int rc = mpi_type(dtype, reduces, &t);
	return rc == GCB_OK && reduces ? mpi_op(op, &o) : rc;
}

static int coll_once(const gcb_args *a, int n, MPI_Datatype t, MPI_Op op) {
	void *s = (void *)a->send, *r = (void *)a->recv;
	switch (a->coll) {
	case GCB_ALLREDUCE: return MPI_Allreduce(s, r, n, t, op, MPI_COMM_WORLD);
	case GCB_ALLGATHER: return MPI_Allgather(s, n, t, r, n, t, MPI_COMM_WORLD);
	case GCB_REDUCESCATTER: return MPI_Reduce_scatter_block(s, r, n, t, op, MPI_COMM_WORLD);
	case GCB_BROADCAST: {
		// MPI broadcasts in place: the root's data must already sit in the
		// buffer every rank receives into.
		int rank = 0;
		MPI_Comm_rank(MPI_COMM_WORLD, &rank);
		return MPI_Bcast(rank == a->root ? s : r, n, t, a->root, MPI_COMM_WORLD);
	}
	case GCB_REDUCE: return MPI_Reduce(s, r, n, t, op, a->root, MPI_COMM_WORLD);
	case GCB_ALLTOALL: return MPI_Alltoall(s, n, t, r, n, t, MPI_COMM_WORLD);
	}
	return GCB_EARG;
}

static int run_coll(const gcb_args *a, int n, MPI_Datatype t, MPI_Op op, int iters, double *times) {
	int rc;
	for (int i = 0; i < a->warmup; i++) {
		if ((rc = coll_once(a, n, t, op)) != MPI_SUCCESS) return rc;
	}
	if ((rc = MPI_Barrier(MPI_COMM_WORLD)) != MPI_SUCCESS) return rc;
	for (int i = 0; i < iters; i++) {
		if (a->sync_each && (rc = MPI_Barrier(MPI_COMM_WORLD)) != MPI_SUCCESS) return rc;
		double t0 = MPI_Wtime();
		if ((rc = coll_once(a, n, t, op)) != MPI_SUCCESS) return rc;
		times[i] = MPI_Wtime() - t0;
	}
	return MPI_SUCCESS;
}

// A zero-byte exchange: the two ranks of a point-to-point test start together
// without involving the ranks that sit it out.
static int pair_sync(int peer) {
	return MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, 3, NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

// osu_latency: half the round trip of a message there and back.
static int run_pingpong(const gcb_args *a, int n, MPI_Datatype t, int iters, double *times) {
	void *s = (void *)a->send, *r = (void *)a->recv;
	int rc;
	if ((rc = pair_sync(a->peer)) != MPI_SUCCESS) return rc;
	for (int i = -a->warmup; i < iters; i++) {
		double t0 = MPI_Wtime();
		if (a->initiator) {
			if ((rc = MPI_Send(s, n, t, a->peer, 1, MPI_COMM_WORLD)) != MPI_SUCCESS) return rc;
			if ((rc = MPI_Recv(r, n, t, a->peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) != MPI_SUCCESS) return rc;
		} else {
			if ((rc = MPI_Recv(r, n, t, a->peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) != MPI_SUCCESS) return rc;
			if ((rc = MPI_Send(r, n, t, a->peer, 1, MPI_COMM_WORLD)) != MPI_SUCCESS) return rc;
		}
		if (i >= 0) times[i] = a->initiator ? (MPI_Wtime() - t0) / 2 : 0;
	}
	return MPI_SUCCESS;
}

// osu_bw: a window of nonblocking sends, then a one-byte ack back; the time
// of one message is the window's time over its length.
static int run_bandwidth(const gcb_args *a, int n, MPI_Datatype t, int iters, double *times) {
	void *s = (void *)a->send, *r = (void *)a->recv;
	MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)a->window);
	// Real statuses rather than MPI_STATUSES_IGNORE, which GCC's array-bounds
	// check misreads in MPICH's prototype.
	MPI_Status *st = malloc(sizeof(MPI_Status) * (size_t)a->window);
	if (reqs == NULL || st == NULL) {
		free(reqs);
		free(st);
		return GCB_ENOMEM;
	}
	int rc = pair_sync(a->peer);
	for (int i = -a->warmup; i < iters && rc == MPI_SUCCESS; i++) {
		double t0 = MPI_Wtime();
		for (int w = 0; w < a->window && rc == MPI_SUCCESS; w++) {
			rc = a->initiator ? MPI_Isend(s, n, t, a->peer, 2, MPI_COMM_WORLD, &reqs[w])
			                  : MPI_Irecv(r, n, t, a->peer, 2, MPI_COMM_WORLD, &reqs[w]);
		}
		if (rc != MPI_SUCCESS) break;
		if ((rc = MPI_Waitall(a->window, reqs, st)) != MPI_SUCCESS) break;
		rc = a->initiator ? MPI_Recv(r, 1, MPI_BYTE, a->peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
		                  : MPI_Send(r, 1, MPI_BYTE, a->peer, 4, MPI_COMM_WORLD);
		if (rc == MPI_SUCCESS && i >= 0) times[i] = a->initiator ? (MPI_Wtime() - t0) / a->window : 0;
	}
	free(reqs);
	free(st);
	return rc;
}

int gcb_mpi_run(const gcb_args *a, int iters, double *times) {
	if (!gcb_mpi_initialized()) return GCB_ENOTINIT;
	if (a->count > (size_t)0x7fffffff || iters < 0 || a->warmup < 0) return GCB_EARG;
	int n = (int)a->count, reduces = a->coll == GCB_ALLREDUCE || a->coll == GCB_REDUCESCATTER || a->coll == GCB_REDUCE;
	MPI_Datatype t;
	MPI_Op op = MPI_SUM;
	int rc = mpi_type(a->dtype, reduces, &t);
	if (rc == GCB_OK && reduces) rc = mpi_op(a->op, &op);
	if (rc != GCB_OK) return rc;
	switch (a->coll) {
	case GCB_PINGPONG:
		return run_pingpong(a, n, t, iters, times);
	case GCB_BANDWIDTH:
		if (a->window < 1) return GCB_EARG;
		return run_bandwidth(a, n, t, iters, times);
	}
	return run_coll(a, n, t, op, iters, times);
}
