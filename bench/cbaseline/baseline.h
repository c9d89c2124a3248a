// Declarations shared by the C timing loops (mpi_baseline.c, nccl_baseline.c)
// and the cgo files of package cbaseline. Buffer addresses travel as
// uintptr_t and are cast only here, so Go never turns a uintptr into a pointer.

#ifndef GPUCOMM_BENCH_BASELINE_H
#define GPUCOMM_BENCH_BASELINE_H

#include <stddef.h>
#include <stdint.h>

// Operations: the same values as the Coll constants in cbaseline.go.
enum {
	GCB_ALLREDUCE = 1,
	GCB_ALLGATHER,
	GCB_REDUCESCATTER,
	GCB_BROADCAST,
	GCB_REDUCE,
	GCB_ALLTOALL,
	GCB_PINGPONG,
	GCB_BANDWIDTH,
};

// Results other than a library's own error codes (which are positive).
enum {
	GCB_OK = 0,
	GCB_ENOTINIT = -1, // MPI_Init has not been called (or MPI was finalized)
	GCB_ETYPE = -2,    // the library has no such datatype or reduction
	GCB_EARG = -3,     // a bad argument (count, peer, window, iterations)
	GCB_ENOMEM = -4,
	GCB_ELOAD = -5,    // NCCL and CUDA are not bound (gcb_nccl_bind); see the message
	GCB_ECUDA = -6,    // a CUDA driver call failed; see the message
};

// gcb_args.op of an operation that does not reduce: no library's reduction,
// so a loop that finds it where one reduces answers GCB_ETYPE (never a Sum).
enum { GCB_NO_OP = -1 };

// One timing: what to run and on which buffers.
typedef struct {
	int coll;
	uintptr_t send, recv;
	size_t count; // the library's count argument (per rank for allgather, reducescatter, alltoall)
	// The element type and reduction in the library's own numbering, from
	// gpucomm's mappings (Go maps them; these loops have no table of their
	// own): for MPI, internal/mpi's Datatype and Op (which its gc_type and
	// gc_op turn into MPI handles, as for the mpi backends); for NCCL,
	// ncclDataType_t and ncclRedOp_t (internal/ncclmap, as for the nccl
	// backend). op is GCB_NO_OP where the operation does not reduce.
	int dtype, op;
	size_t elt; // bytes of one element (NCCL's alltoall offsets)
	int root;
	int peer;      // the other rank of pingpong and bandwidth
	int initiator; // 1 on the rank that starts the ping-pong or sends the window
	int window;    // sends per window (bandwidth)
	int warmup;    // untimed iterations first
	int sync_each; // barrier before every timed iteration (wall-clock timing)
} gcb_args;

// MPI (built with -tags mpi or mpich): time iters iterations of a->coll on
// MPI_COMM_WORLD, writing each one's seconds (MPI_Wtime) to times.
int gcb_mpi_initialized(void);
int gcb_mpi_run(const gcb_args *a, int iters, double *times);
void gcb_mpi_error_string(int code, char *buf, int len);
// GCB_OK if internal/mpi's gc_type has an MPI datatype for dtype and, when
// reduces, its gc_op an MPI_Op for op (internal/mpi numbering); GCB_ETYPE
// otherwise.
int gcb_mpi_maps(int dtype, int reduces, int op);

// NCCL and the CUDA driver, called through the functions gpucomm's loaders
// resolved (internal/nccl, internal/cuda), handed to gcb_nccl_bind once, in
// this order, before any other gcb_nccl_ call; each loop then runs on a
// communicator and a stream of its own on one GPU.
enum {
	GCB_FN_ncclGetUniqueId,
	GCB_FN_ncclCommInitRank,
	GCB_FN_ncclCommDestroy,
	GCB_FN_ncclAllReduce,
	GCB_FN_ncclAllGather,
	GCB_FN_ncclReduceScatter,
	GCB_FN_ncclBroadcast,
	GCB_FN_ncclReduce,
	GCB_FN_ncclSend,
	GCB_FN_ncclRecv,
	GCB_FN_ncclGroupStart,
	GCB_FN_ncclGroupEnd,
	GCB_FN_ncclGetErrorString,
	GCB_FN_cuDeviceGet,
	GCB_FN_cuDevicePrimaryCtxRetain,
	GCB_FN_cuDevicePrimaryCtxRelease,
	GCB_FN_cuCtxSetCurrent,
	GCB_FN_cuStreamCreate,
	GCB_FN_cuStreamSynchronize,
	GCB_FN_cuStreamDestroy,
	GCB_FN_cuEventCreate,
	GCB_FN_cuEventRecord,
	GCB_FN_cuEventElapsedTime,
	GCB_FN_cuEventDestroy,
	GCB_FN_cuGetErrorString,
	GCB_FN_COUNT
};
// GCB_OK, or GCB_EARG if a function is missing (NULL).
int gcb_nccl_bind(void *const fn[GCB_FN_COUNT]);
typedef struct gcb_nccl gcb_nccl;
int gcb_nccl_unique_id(unsigned char id[128], char *err, int errlen);
int gcb_nccl_open(int ordinal, int nranks, int rank, const unsigned char id[128], gcb_nccl **out, char *err, int errlen);
int gcb_nccl_run(gcb_nccl *s, const gcb_args *a, int iters, double *times, char *err, int errlen);
int gcb_nccl_close(gcb_nccl *s, char *err, int errlen);

#endif
