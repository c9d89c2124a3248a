// Declarations shared by gpucomm_mpi.c and the cgo files of package mpi.
// Every buffer address that Go hands over travels as uintptr_t and is cast
// here, so Go code never turns a uintptr into an unsafe.Pointer.

#ifndef GPUCOMM_MPI_H
#define GPUCOMM_MPI_H

#include <mpi.h>
#include <stdint.h>

// Datatype numbers: the same values as the Datatype constants in datatype.go.
enum {
	GC_INT8 = 1,
	GC_UINT8,
	GC_INT32,
	GC_UINT32,
	GC_INT64,
	GC_UINT64,
	GC_FLOAT16,
	GC_BFLOAT16,
	GC_FLOAT32,
	GC_FLOAT64,
	GC_BYTE,
};

// Op numbers: the same values as the Op constants in datatype.go, every
// predefined reduction of MPI's (the logical and bitwise ones on integer
// types only).
enum { GC_SUM = 1, GC_PROD, GC_MIN, GC_MAX };
enum { GC_LAND = 16, GC_LOR, GC_LXOR, GC_BAND, GC_BOR, GC_BXOR };

// Rank and tag wildcards as Go spells them (AnySource, ProcNull, AnyTag);
// gc_peer and gc_tag turn them into the library's own values.
enum { GC_ANY_SOURCE = -1, GC_PROC_NULL = -2, GC_ANY_TAG = -1 };

// What Go reads of an MPI_Status, with the count already in elements.
typedef struct {
	int source;
	int tag;
	int count;
	int cancelled;
	int error;
} gc_status;

// A call's return code, its completion flag (tests) and status, returned by
// value so that Go passes no pointer for them (which would put them on the
// heap).
typedef struct {
	int rc;
	int flag;
	gc_status st;
} gc_result;

// Lifecycle.
int gc_init(int level, int *provided, int *owned);
int gc_onstack_fixed_count(void); // handlers gc_init gave SA_ONSTACK, for the tests
int gc_finalize(int *called);
int gc_is_initialized(void);
int gc_foreign_init(void); // tests only: another library's MPI_Init_thread
int gc_foreign_finalize(void);
int gc_is_finalized(void);
int gc_tag_ub(int *ub);
int gc_library_version(char *buf, int *len);
const char *gc_library_file(void);
void gc_cuda_aware(int *known, int *aware);
int gc_error_string(int code, char *buf, int *len, int *cls);
int gc_class_is_argument(int cls);
int gc_class_is_truncate(int cls);
int gc_replaced_ops(void);

// Handles and tables.
MPI_Comm gc_comm_world(void);
MPI_Datatype gc_type(int dt);
MPI_Op gc_op(int op, int dt);
int gc_type_info(int dt, char *name, int *size);

// Communicators.
int gc_comm_rank_size(MPI_Comm c, int *rank, int *size);
int gc_comm_dup(MPI_Comm c, MPI_Comm *out);
int gc_comm_split(MPI_Comm c, int color, int key, MPI_Comm *out, int *isnull);
int gc_comm_split_shared(MPI_Comm c, int key, MPI_Comm *out, int *isnull);
int gc_comm_free(MPI_Comm *c);
int gc_abort(MPI_Comm c, int code);

// Collectives on addresses outside the Go heap.
int gc_barrier(MPI_Comm c);
int gc_bcast(uintptr_t buf, int n, int dt, int root, MPI_Comm c);
int gc_reduce(uintptr_t s, uintptr_t r, int n, int dt, int op, int root, int inplace, MPI_Comm c);
int gc_allreduce(uintptr_t s, uintptr_t r, int n, int dt, int op, int inplace, MPI_Comm c);
int gc_reduce_local(uintptr_t in, uintptr_t inout, int n, int dt, int op);
int gc_allgather(uintptr_t s, uintptr_t r, int n, int dt, int inplace, MPI_Comm c);
int gc_reduce_scatter_block(uintptr_t s, uintptr_t r, int n, int dt, int op, int inplace, MPI_Comm c);
int gc_alltoall(uintptr_t s, uintptr_t r, int n, int dt, int inplace, MPI_Comm c);
int gc_gather(uintptr_t s, uintptr_t r, int n, int dt, int root, int inplace, MPI_Comm c);
int gc_scatter(uintptr_t s, uintptr_t r, int n, int dt, int root, int inplace, MPI_Comm c);

// Collectives on Go memory, used only by blocking calls (cgo pointer rules).
int gc_allreduce_go(void *buf, int n, int dt, int op, MPI_Comm c);
int gc_bcast_go(void *buf, int n, int dt, int root, MPI_Comm c);
int gc_allgather_go(void *s, void *r, int n, int dt, MPI_Comm c);
int gc_allgatherv_go(void *s, int n, void *r, int *counts, int *displs, MPI_Comm c);

// Point to point.
int gc_send(uintptr_t buf, int n, int dt, int dest, int tag, MPI_Comm c);
gc_result gc_recv(uintptr_t buf, int n, int dt, int src, int tag, MPI_Comm c);
int gc_sendrecv(uintptr_t s, int sn, int dest, int stag, uintptr_t r, int rn, int src, int rtag, int dt,
		MPI_Comm c, gc_status *st);

// Nonblocking calls and completion.
int gc_isend(uintptr_t buf, int n, int dt, int dest, int tag, MPI_Comm c, MPI_Request *req);
int gc_irecv(uintptr_t buf, int n, int dt, int src, int tag, MPI_Comm c, MPI_Request *req);
int gc_ibarrier(MPI_Comm c, MPI_Request *req);
int gc_ibcast(uintptr_t buf, int n, int dt, int root, MPI_Comm c, MPI_Request *req);
int gc_iallreduce(uintptr_t s, uintptr_t r, int n, int dt, int op, int inplace, MPI_Comm c, MPI_Request *req);
int gc_waitall(int n, MPI_Request *reqs, const int *dts, gc_status *out);
int gc_testall(int n, MPI_Request *reqs, const int *dts, int *flag, gc_status *out);
int gc_cancel(MPI_Request *req);
gc_result gc_wait1(MPI_Request *req, int dt);
gc_result gc_iprobe(int src, int tag, int dt, MPI_Comm c);
gc_result gc_test1(MPI_Request *req, int dt);

#endif
