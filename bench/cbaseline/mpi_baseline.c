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

// internal/mpi's one table from its Datatype and Op numbers to MPI handles
// (gpucomm_mpi.c, linked into every binary that has this file: mpi_cgo.go
// imports package mpi): the handles the mpi backends use, the replacement
// of a library's faulty unsigned min and max included. MPI_DATATYPE_NULL
// and MPI_OP_NULL for a number it does not know.
MPI_Datatype gc_type(int dt);
MPI_Op gc_op(int op, int dt);

static int coll_reduces(int coll) {
	return coll == GCB_ALLREDUCE || coll == GCB_REDUCESCATTER || coll == GCB_REDUCE;
}

// The handles for a's dtype and, when reduces, op; GCB_ETYPE for a number
// internal/mpi does not map.
static int handles(int dtype, int reduces, int op, MPI_Datatype *t, MPI_Op *o) {
	*t = gc_type(dtype);
	*o = MPI_OP_NULL;
	if (*t == MPI_DATATYPE_NULL) return GCB_ETYPE;
	if (!reduces) return GCB_OK;
	if (op == GCB_NO_OP || (*o = gc_op(op, dtype)) == MPI_OP_NULL) return GCB_ETYPE;
	return GCB_OK;
}

int gcb_mpi_maps(int dtype, int reduces, int op) {
	MPI_Datatype t;
	MPI_Op o;
	return handles(dtype, reduces, op, &t, &o);
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
	int n = (int)a->count;
	MPI_Datatype t;
	MPI_Op op;
	int rc = handles(a->dtype, coll_reduces(a->coll), a->op, &t, &op);
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
