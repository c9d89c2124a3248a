//go:build (mpi || mpich) && !(mpi && mpich) && cgo

// The C half of package mpi: handle tables, user-defined reductions for
// float16 and bfloat16, and thin wrappers that turn uintptr_t addresses back
// into pointers. It builds against Open MPI (pointer handles) and MPICH (int
// handles) alike; Go code never sees which.

#define _GNU_SOURCE
#include <dlfcn.h>

#include "gpucomm_mpi.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

// Open MPI declares its CUDA query in mpi-ext.h, which not every build ships.
#if defined(OPEN_MPI) && OPEN_MPI && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

#define PTR(x) ((void *)(uintptr_t)(x))

// ---- float16 and bfloat16 ----
//
// Values are widened to float, combined, and rounded back to nearest even.
// float is enough: a sum or product of two float16 or two bfloat16 values is
// either exact in float or so far from a rounding midpoint of the narrow type
// that rounding twice cannot change the result. Every NaN result becomes the
// canonical quiet NaN (0x7e00, 0x7fc0), so results do not depend on which
// rank's NaN an implementation happened to keep.

static inline float gc_bits_float(uint32_t x) {
	float f;
	memcpy(&f, &x, sizeof f);
	return f;
}

static inline uint32_t gc_float_bits(float f) {
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	return x;
}

static inline float gc_f16_to_float(uint16_t h) {
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
	if (e == 0x1f)
		return gc_bits_float(sign | 0x7f800000 | (m << 13));
	if (e == 0) {
		if (m == 0)
			return gc_bits_float(sign);
		e = 113; // subnormal: normalise m * 2^-24
		while (!(m & 0x400)) {
			m <<= 1;
			e--;
		}
		return gc_bits_float(sign | (e << 23) | ((m & 0x3ff) << 13));
	}
	return gc_bits_float(sign | ((e + 112) << 23) | (m << 13));
}

static inline uint16_t gc_float_to_f16(float f) {
	uint32_t x = gc_float_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t ax = x & 0x7fffffff;
	if (ax > 0x7f800000)
		return 0x7e00;
	if (ax >= 0x477ff000) // 65520 and above round to infinity
		return sign | 0x7c00;
	if (ax < 0x38800000) { // below 2^-14: subnormal or zero
		if (ax <= 0x33000000) // at most 2^-25, the tie, rounds to zero
			return sign;
		uint32_t mant = (ax & 0x7fffff) | 0x800000;
		uint32_t shift = 126 - (ax >> 23);
		uint32_t h = mant >> shift;
		uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return sign | (uint16_t)h;
	}
	uint32_t h = (ax - 0x38000000) >> 13;
	uint32_t rem = ax & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
		h++; // a carry into the exponent is the right answer
	return sign | (uint16_t)h;
}

static inline float gc_bf16_to_float(uint16_t h) { return gc_bits_float((uint32_t)h << 16); }

static inline uint16_t gc_float_to_bf16(float f) {
	uint32_t x = gc_float_bits(f);
	if ((x & 0x7fffffff) > 0x7f800000)
		return 0x7fc0;
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

// NaN wins; -0 is below +0, so the result does not depend on operand order.
static inline float gc_min(float a, float b) {
	if (isnan(a) || isnan(b))
		return NAN;
	if (a < b)
		return a;
	if (b < a)
		return b;
	return signbit(a) ? a : b;
}

static inline float gc_max(float a, float b) {
	if (isnan(a) || isnan(b))
		return NAN;
	if (a > b)
		return a;
	if (b > a)
		return b;
	return signbit(a) ? b : a;
}

#define GC_SUM_F(a, b) ((a) + (b))
#define GC_PROD_F(a, b) ((a) * (b))

#define GC_HALF_OP(name, widen, narrow, combine)                                    \
	static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {           \
		(void)dt;                                                                   \
		const uint16_t *a = in;                                                     \
		uint16_t *b = inout;                                                        \
		for (int i = 0, n = *len; i < n; i++)                                       \
			b[i] = narrow(combine(widen(a[i]), widen(b[i])));                       \
	}

GC_HALF_OP(gc_f16_sum, gc_f16_to_float, gc_float_to_f16, GC_SUM_F)
GC_HALF_OP(gc_f16_prod, gc_f16_to_float, gc_float_to_f16, GC_PROD_F)
GC_HALF_OP(gc_f16_min, gc_f16_to_float, gc_float_to_f16, gc_min)
GC_HALF_OP(gc_f16_max, gc_f16_to_float, gc_float_to_f16, gc_max)
GC_HALF_OP(gc_bf16_sum, gc_bf16_to_float, gc_float_to_bf16, GC_SUM_F)
GC_HALF_OP(gc_bf16_prod, gc_bf16_to_float, gc_float_to_bf16, GC_PROD_F)
GC_HALF_OP(gc_bf16_min, gc_bf16_to_float, gc_float_to_bf16, gc_min)
GC_HALF_OP(gc_bf16_max, gc_bf16_to_float, gc_float_to_bf16, gc_max)

// [0] float16, [1] bfloat16; index op-1.
static MPI_User_function *const gc_half_fns[2][4] = {
	{gc_f16_sum, gc_f16_prod, gc_f16_min, gc_f16_max},
	{gc_bf16_sum, gc_bf16_prod, gc_bf16_min, gc_bf16_max},
};
static MPI_Op gc_half_ops[2][4];
static int gc_half_ops_ready;

static int gc_create_half_ops(void) {
	if (gc_half_ops_ready)
		return MPI_SUCCESS;
	for (int t = 0; t < 2; t++)
		for (int o = 0; o < 4; o++) {
			int rc = MPI_Op_create(gc_half_fns[t][o], 1, &gc_half_ops[t][o]);
			if (rc != MPI_SUCCESS)
				return rc;
		}
	gc_half_ops_ready = 1;
	return MPI_SUCCESS;
}

static void gc_free_half_ops(void) {
	if (!gc_half_ops_ready)
		return;
	for (int t = 0; t < 2; t++)
		for (int o = 0; o < 4; o++)
			MPI_Op_free(&gc_half_ops[t][o]);
	gc_half_ops_ready = 0;
}

// ---- unsigned min and max ----
//
// Some libraries compare unsigned integers as signed in MPI_MIN and MPI_MAX
// (MPICH 4.0.2, pmodels/mpich#6083). gc_init probes each built-in op with
// MPI_Reduce_local and replaces the wrong ones with these.

#define GC_UINT_OP(name, T, better)                                                 \
	static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {           \
		(void)dt;                                                                   \
		const T *a = in;                                                            \
		T *b = inout;                                                               \
		for (int i = 0, n = *len; i < n; i++)                                       \
			if (a[i] better b[i])                                                   \
				b[i] = a[i];                                                        \
	}

GC_UINT_OP(gc_u8_min, uint8_t, <)
GC_UINT_OP(gc_u8_max, uint8_t, >)
GC_UINT_OP(gc_u32_min, uint32_t, <)
GC_UINT_OP(gc_u32_max, uint32_t, >)
GC_UINT_OP(gc_u64_min, uint64_t, <)
GC_UINT_OP(gc_u64_max, uint64_t, >)

// [0] uint8, [1] uint32, [2] uint64; [0] min, [1] max.
static MPI_User_function *const gc_uint_fns[3][2] = {
	{gc_u8_min, gc_u8_max},
	{gc_u32_min, gc_u32_max},
	{gc_u64_min, gc_u64_max},
};
static MPI_Op gc_uint_ops[3][2];
static int gc_uint_fixed[3][2];

static int gc_uint_index(int dt) {
	switch (dt) {
	case GC_UINT8: return 0;
	case GC_UINT32: return 1;
	case GC_UINT64: return 2;
	}
	return -1;
}

static int gc_fix_uint(int t, int o) {
	if (gc_uint_fixed[t][o])
		return MPI_SUCCESS;
	int rc = MPI_Op_create(gc_uint_fns[t][o], 1, &gc_uint_ops[t][o]);
	if (rc == MPI_SUCCESS)
		gc_uint_fixed[t][o] = 1;
	return rc;
}

// Reduce {1, max} with {max, 1}: min must give {1, 1}, max {max, max}; a
// library that compares as signed gets both wrong.
#define GC_PROBE_UINT(T, t, dt)                                                     \
	do {                                                                            \
		T in[2] = {1, (T)-1}, mn[2] = {(T)-1, 1}, mx[2] = {(T)-1, 1};               \
		int rc = MPI_Reduce_local(in, mn, 2, gc_type(dt), MPI_MIN);                 \
		if (rc == MPI_SUCCESS)                                                      \
			rc = MPI_Reduce_local(in, mx, 2, gc_type(dt), MPI_MAX);                 \
		if (rc == MPI_SUCCESS && !(mn[0] == 1 && mn[1] == 1))                       \
			rc = gc_fix_uint(t, 0);                                                 \
		if (rc == MPI_SUCCESS && !(mx[0] == (T)-1 && mx[1] == (T)-1))               \
			rc = gc_fix_uint(t, 1);                                                 \
		if (rc != MPI_SUCCESS)                                                      \
			return rc;                                                              \
	} while (0)

static int gc_probe_uint(void) {
	GC_PROBE_UINT(uint8_t, 0, GC_UINT8);
	GC_PROBE_UINT(uint32_t, 1, GC_UINT32);
	GC_PROBE_UINT(uint64_t, 2, GC_UINT64);
	return MPI_SUCCESS;
}

static void gc_free_uint_ops(void) {
	for (int t = 0; t < 3; t++)
		for (int o = 0; o < 2; o++)
			if (gc_uint_fixed[t][o]) {
				MPI_Op_free(&gc_uint_ops[t][o]);
				gc_uint_fixed[t][o] = 0;
			}
}

int gc_replaced_ops(void) {
	int mask = 0;
	for (int t = 0; t < 3; t++)
		for (int o = 0; o < 2; o++)
			if (gc_uint_fixed[t][o])
				mask |= 1 << (2 * t + o);
	return mask;
}

// ---- tables ----

// The one table from Datatype to MPI datatype. float16 and bfloat16 travel
// as 2-byte integers; only their reductions need to know what they are.
MPI_Datatype gc_type(int dt) {
	switch (dt) {
	case GC_INT8: return MPI_INT8_T;
	case GC_UINT8: return MPI_UINT8_T;
	case GC_INT32: return MPI_INT32_T;
	case GC_UINT32: return MPI_UINT32_T;
	case GC_INT64: return MPI_INT64_T;
	case GC_UINT64: return MPI_UINT64_T;
	case GC_FLOAT16: return MPI_UINT16_T;
	case GC_BFLOAT16: return MPI_UINT16_T;
	case GC_FLOAT32: return MPI_FLOAT;
	case GC_FLOAT64: return MPI_DOUBLE;
	case GC_BYTE: return MPI_BYTE;
	}
	return MPI_DATATYPE_NULL;
}

static int gc_integer(int dt) {
	switch (dt) {
	case GC_INT8: case GC_UINT8: case GC_INT32: case GC_UINT32: case GC_INT64: case GC_UINT64:
		return 1;
	}
	return 0;
}

// The one table from Op (and, for the user ops, Datatype) to MPI_Op;
// MPI_OP_NULL, which MPI refuses, for an op dt does not have.
MPI_Op gc_op(int op, int dt) {
	if (op >= GC_LAND && !gc_integer(dt))
		return MPI_OP_NULL;
	int u = gc_uint_index(dt);
	if (u >= 0 && (op == GC_MIN || op == GC_MAX) && gc_uint_fixed[u][op == GC_MAX])
		return gc_uint_ops[u][op == GC_MAX];
	if ((dt == GC_FLOAT16 || dt == GC_BFLOAT16) && op >= GC_SUM && op <= GC_MAX)
		return gc_half_ops[dt == GC_BFLOAT16][op - GC_SUM];
	switch (op) {
	case GC_SUM: return MPI_SUM;
	case GC_PROD: return MPI_PROD;
	case GC_MIN: return MPI_MIN;
	case GC_MAX: return MPI_MAX;
	case GC_LAND: return MPI_LAND;
	case GC_LOR: return MPI_LOR;
	case GC_LXOR: return MPI_LXOR;
	case GC_BAND: return MPI_BAND;
	case GC_BOR: return MPI_BOR;
	case GC_BXOR: return MPI_BXOR;
	}
	return MPI_OP_NULL;
}

int gc_type_info(int dt, char *name, int *size) {
	int len = 0;
	int rc = MPI_Type_get_name(gc_type(dt), name, &len);
	if (rc != MPI_SUCCESS)
		return rc;
	return MPI_Type_size(gc_type(dt), size);
}

static int gc_peer(int p) {
	if (p == GC_ANY_SOURCE)
		return MPI_ANY_SOURCE;
	if (p == GC_PROC_NULL)
		return MPI_PROC_NULL;
	return p;
}

static int gc_peer_back(int p) {
	if (p == MPI_ANY_SOURCE)
		return GC_ANY_SOURCE;
	if (p == MPI_PROC_NULL)
		return GC_PROC_NULL;
	return p;
}

static int gc_tag(int t) { return t == GC_ANY_TAG ? MPI_ANY_TAG : t; }

static void gc_fill_status(MPI_Status *s, int dt, gc_status *out) {
	int count = 0, cancelled = 0;
	if (MPI_Get_count(s, gc_type(dt), &count) != MPI_SUCCESS || count == MPI_UNDEFINED)
		count = -1;
	MPI_Test_cancelled(s, &cancelled);
	out->source = gc_peer_back(s->MPI_SOURCE);
	out->tag = s->MPI_TAG == MPI_ANY_TAG ? GC_ANY_TAG : s->MPI_TAG;
	out->count = count;
	out->cancelled = cancelled;
	out->error = s->MPI_ERROR;
}

// ---- lifecycle ----

static int gc_level_to_mpi(int level) {
	switch (level) {
	case 0: return MPI_THREAD_SINGLE;
	case 1: return MPI_THREAD_FUNNELED;
	case 2: return MPI_THREAD_SERIALIZED;
	}
	return MPI_THREAD_MULTIPLE;
}

static int gc_level_from_mpi(int level) {
	if (level == MPI_THREAD_SINGLE)
		return 0;
	if (level == MPI_THREAD_FUNNELED)
		return 1;
	if (level == MPI_THREAD_SERIALIZED)
		return 2;
	return 3;
}

// ---- signal handlers ----

// Go runs its signal handlers on each thread's alternate signal stack, and
// requires any handler that non-Go code installs to ask for it too
// (SA_ONSTACK, os/signal's "Go programs that use cgo"): a handler without it
// runs on whatever stack the signal interrupted, a goroutine's among them,
// and when it passes the signal on to Go's handler, as MPICH's does, the Go
// runtime stops the program ("fatal error: non-Go code set up signal handler
// without SA_ONSTACK flag"). MPICH's MPI_Init installs one for SIGUSR1 with
// signal() (SA_RESTART only), counting the notices and chaining to the
// handler it replaced, Go's; Hydra sends SIGUSR1 to every rank when one dies
// (-disable-auto-cleanup), and a survivor of a killed node died of it.
// gc_signals_onstack adds SA_ONSTACK to the handlers that MPI_Init
// installed without it (before, when not NULL, is every signal's action
// before MPI_Init; NULL when another library initialised MPI, whose
// handlers cannot be told from the program's: then every handler that
// lacks it), keeping the handler, its mask and its other flags. Handlers
// that were there before MPI_Init, the program's own, are left as they are.
// A thread without an alternate stack (one of MPI's own) still runs the
// handler on its own stack, as before.
static int gc_onstack_fixed;

static void gc_signals_onstack(const struct sigaction *before) {
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sigaction(sig, NULL, &sa) != 0) // glibc's own signals, ...
			continue;
		if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN || (sa.sa_flags & SA_ONSTACK))
			continue;
		if (before != NULL && before[sig].sa_handler == sa.sa_handler)
			continue; // not MPI_Init's
		sa.sa_flags |= SA_ONSTACK;
		if (sigaction(sig, &sa, NULL) == 0)
			gc_onstack_fixed++;
	}
}

int gc_onstack_fixed_count(void) { return gc_onstack_fixed; }

int gc_init(int level, int *provided, int *owned) {
	int flag = 0, p = MPI_THREAD_SINGLE, rc;
	MPI_Initialized(&flag);
	if (flag) {
		*owned = 0;
		rc = MPI_Query_thread(&p);
	} else {
		*owned = 1;
		struct sigaction before[NSIG];
		for (int sig = 1; sig < NSIG; sig++)
			if (sigaction(sig, NULL, &before[sig]) != 0)
				before[sig].sa_handler = SIG_DFL;
		rc = MPI_Init_thread(NULL, NULL, gc_level_to_mpi(level), &p);
		// MPI's handlers must suit Go before anything else runs.
		gc_signals_onstack(before);
	}
	if (!*owned)
		gc_signals_onstack(NULL);
	if (rc != MPI_SUCCESS)
		return rc;
	*provided = gc_level_from_mpi(p);
	rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rc != MPI_SUCCESS)
		return rc;
	rc = gc_create_half_ops();
	if (rc != MPI_SUCCESS)
		return rc;
	return gc_probe_uint();
}

int gc_finalize(int *called) {
	int flag = 0;
	*called = 0;
	MPI_Finalized(&flag);
	if (flag)
		return MPI_SUCCESS; // someone else finalized already: never twice
	gc_free_half_ops();
	gc_free_uint_ops();
	*called = 1;
	return MPI_Finalize();
}

int gc_foreign_init(void) {
	int p;
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &p);
}

int gc_foreign_finalize(void) { return MPI_Finalize(); }

int gc_is_initialized(void) {
	int flag = 0;
	MPI_Initialized(&flag);
	return flag;
}

int gc_is_finalized(void) {
	int flag = 0;
	MPI_Finalized(&flag);
	return flag;
}

int gc_tag_ub(int *ub) {
	void *v = NULL;
	int flag = 0;
	int rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag);
	*ub = (rc == MPI_SUCCESS && flag && v) ? *(int *)v : 32767; // the least MPI promises
	return rc;
}

int gc_library_version(char *buf, int *len) { return MPI_Get_library_version(buf, len); }

// The file of the shared library that MPI_Init was loaded from, or NULL.
const char *gc_library_file(void) {
	Dl_info info;
	if (dladdr((void *)&MPI_Init, &info) == 0) return NULL;
	return info.dli_fname;
}

void gc_cuda_aware(int *known, int *aware) {
	*known = 0;
	*aware = 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT)
	// Open MPI: the macro says the extension is there; the run-time answer
	// is the one that counts (a build may load CUDA support as a plugin).
	*known = 1;
	*aware = MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
	// MPICH 4 declares MPIX_GPU_query_support beside this macro.
	int s = 0;
	if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &s) == MPI_SUCCESS) {
		*known = 1;
		*aware = s != 0;
	}
#endif
}

int gc_error_string(int code, char *buf, int *len, int *cls) {
	*cls = -1;
	MPI_Error_class(code, cls);
	return MPI_Error_string(code, buf, len);
}

int gc_class_is_argument(int cls) {
	return cls == MPI_ERR_BUFFER || cls == MPI_ERR_COUNT || cls == MPI_ERR_TYPE ||
	       cls == MPI_ERR_TAG || cls == MPI_ERR_COMM || cls == MPI_ERR_RANK ||
	       cls == MPI_ERR_ROOT || cls == MPI_ERR_GROUP || cls == MPI_ERR_OP ||
	       cls == MPI_ERR_ARG || cls == MPI_ERR_TRUNCATE || cls == MPI_ERR_REQUEST;
}

int gc_class_is_truncate(int cls) { return cls == MPI_ERR_TRUNCATE; }

// ---- communicators ----

MPI_Comm gc_comm_world(void) { return MPI_COMM_WORLD; }

int gc_comm_rank_size(MPI_Comm c, int *rank, int *size) {
	int rc = MPI_Comm_rank(c, rank);
	if (rc != MPI_SUCCESS)
		return rc;
	return MPI_Comm_size(c, size);
}

static int gc_adopt(MPI_Comm *out, int *isnull) {
	if (*out == MPI_COMM_NULL) {
		*isnull = 1;
		return MPI_SUCCESS;
	}
	*isnull = 0;
	return MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
}

int gc_comm_dup(MPI_Comm c, MPI_Comm *out) {
	int isnull;
	int rc = MPI_Comm_dup(c, out);
	if (rc != MPI_SUCCESS)
		return rc;
	return gc_adopt(out, &isnull);
}

int gc_comm_split(MPI_Comm c, int color, int key, MPI_Comm *out, int *isnull) {
	int rc = MPI_Comm_split(c, color < 0 ? MPI_UNDEFINED : color, key, out);
	if (rc != MPI_SUCCESS)
		return rc;
	return gc_adopt(out, isnull);
}

int gc_comm_split_shared(MPI_Comm c, int key, MPI_Comm *out, int *isnull) {
	int rc = MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, out);
	if (rc != MPI_SUCCESS)
		return rc;
	return gc_adopt(out, isnull);
}

int gc_comm_free(MPI_Comm *c) { return MPI_Comm_free(c); }

int gc_abort(MPI_Comm c, int code) { return MPI_Abort(c, code); }

// ---- collectives ----

int gc_barrier(MPI_Comm c) { return MPI_Barrier(c); }

int gc_bcast(uintptr_t buf, int n, int dt, int root, MPI_Comm c) {
	return MPI_Bcast(PTR(buf), n, gc_type(dt), root, c);
}

int gc_reduce(uintptr_t s, uintptr_t r, int n, int dt, int op, int root, int inplace, MPI_Comm c) {
	return MPI_Reduce(inplace ? MPI_IN_PLACE : PTR(s), PTR(r), n, gc_type(dt), gc_op(op, dt), root, c);
}

int gc_allreduce(uintptr_t s, uintptr_t r, int n, int dt, int op, int inplace, MPI_Comm c) {
	return MPI_Allreduce(inplace ? MPI_IN_PLACE : PTR(s), PTR(r), n, gc_type(dt), gc_op(op, dt), c);
}

int gc_reduce_local(uintptr_t in, uintptr_t inout, int n, int dt, int op) {
	return MPI_Reduce_local(PTR(in), PTR(inout), n, gc_type(dt), gc_op(op, dt));
}

int gc_allgather(uintptr_t s, uintptr_t r, int n, int dt, int inplace, MPI_Comm c) {
	MPI_Datatype t = gc_type(dt);
	if (inplace)
		return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, PTR(r), n, t, c);
	return MPI_Allgather(PTR(s), n, t, PTR(r), n, t, c);
}

int gc_reduce_scatter_block(uintptr_t s, uintptr_t r, int n, int dt, int op, int inplace, MPI_Comm c) {
	return MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : PTR(s), PTR(r), n, gc_type(dt), gc_op(op, dt), c);
}

int gc_alltoall(uintptr_t s, uintptr_t r, int n, int dt, int inplace, MPI_Comm c) {
	MPI_Datatype t = gc_type(dt);
	if (inplace)
		return MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, PTR(r), n, t, c);
	return MPI_Alltoall(PTR(s), n, t, PTR(r), n, t, c);
}

int gc_gather(uintptr_t s, uintptr_t r, int n, int dt, int root, int inplace, MPI_Comm c) {
	MPI_Datatype t = gc_type(dt);
	if (inplace)
		return MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, PTR(r), n, t, root, c);
	return MPI_Gather(PTR(s), n, t, PTR(r), n, t, root, c);
}

int gc_scatter(uintptr_t s, uintptr_t r, int n, int dt, int root, int inplace, MPI_Comm c) {
	MPI_Datatype t = gc_type(dt);
	if (inplace)
		return MPI_Scatter(PTR(s), n, t, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root, c);
	return MPI_Scatter(PTR(s), n, t, PTR(r), n, t, root, c);
}

int gc_allreduce_go(void *buf, int n, int dt, int op, MPI_Comm c) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, gc_type(dt), gc_op(op, dt), c);
}

int gc_bcast_go(void *buf, int n, int dt, int root, MPI_Comm c) {
	return MPI_Bcast(buf, n, gc_type(dt), root, c);
}

int gc_allgather_go(void *s, void *r, int n, int dt, MPI_Comm c) {
	MPI_Datatype t = gc_type(dt);
	return MPI_Allgather(s, n, t, r, n, t, c);
}

int gc_allgatherv_go(void *s, int n, void *r, int *counts, int *displs, MPI_Comm c) {
	return MPI_Allgatherv(s, n, MPI_BYTE, r, counts, displs, MPI_BYTE, c);
}

// ---- point to point ----

int gc_send(uintptr_t buf, int n, int dt, int dest, int tag, MPI_Comm c) {
	return MPI_Send(PTR(buf), n, gc_type(dt), gc_peer(dest), tag, c);
}

gc_result gc_recv(uintptr_t buf, int n, int dt, int src, int tag, MPI_Comm c) {
	MPI_Status s;
	gc_result r = {0};
	r.rc = MPI_Recv(PTR(buf), n, gc_type(dt), gc_peer(src), gc_tag(tag), c, &s);
	if (r.rc == MPI_SUCCESS) {
		s.MPI_ERROR = MPI_SUCCESS;
		gc_fill_status(&s, dt, &r.st);
	}
	return r;
}

int gc_sendrecv(uintptr_t sb, int sn, int dest, int stag, uintptr_t rb, int rn, int src, int rtag, int dt,
		MPI_Comm c, gc_status *st) {
	MPI_Status s;
	MPI_Datatype t = gc_type(dt);
	int rc = MPI_Sendrecv(PTR(sb), sn, t, gc_peer(dest), stag, PTR(rb), rn, t, gc_peer(src), gc_tag(rtag), c, &s);
	if (rc == MPI_SUCCESS)
		gc_fill_status(&s, dt, st);
	return rc;
}

int gc_isend(uintptr_t buf, int n, int dt, int dest, int tag, MPI_Comm c, MPI_Request *req) {
	return MPI_Isend(PTR(buf), n, gc_type(dt), gc_peer(dest), tag, c, req);
}

int gc_irecv(uintptr_t buf, int n, int dt, int src, int tag, MPI_Comm c, MPI_Request *req) {
	return MPI_Irecv(PTR(buf), n, gc_type(dt), gc_peer(src), gc_tag(tag), c, req);
}

int gc_ibarrier(MPI_Comm c, MPI_Request *req) { return MPI_Ibarrier(c, req); }

int gc_ibcast(uintptr_t buf, int n, int dt, int root, MPI_Comm c, MPI_Request *req) {
	return MPI_Ibcast(PTR(buf), n, gc_type(dt), root, c, req);
}

int gc_iallreduce(uintptr_t s, uintptr_t r, int n, int dt, int op, int inplace, MPI_Comm c, MPI_Request *req) {
	return MPI_Iallreduce(inplace ? MPI_IN_PLACE : PTR(s), PTR(r), n, gc_type(dt), gc_op(op, dt), c, req);
}

int gc_waitall(int n, MPI_Request *reqs, const int *dts, gc_status *out) {
	if (n <= 0)
		return MPI_SUCCESS;
	MPI_Status *st = calloc((size_t)n, sizeof *st);
	if (!st)
		return MPI_ERR_NO_MEM;
	int rc = MPI_Waitall(n, reqs, st);
	if (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS)
		for (int i = 0; i < n; i++) {
			if (rc == MPI_SUCCESS)
				st[i].MPI_ERROR = MPI_SUCCESS; // only set by MPI for MPI_ERR_IN_STATUS
			gc_fill_status(&st[i], dts[i], &out[i]);
		}
	free(st);
	return rc;
}

int gc_testall(int n, MPI_Request *reqs, const int *dts, int *flag, gc_status *out) {
	*flag = 1;
	if (n <= 0)
		return MPI_SUCCESS;
	MPI_Status *st = calloc((size_t)n, sizeof *st);
	if (!st)
		return MPI_ERR_NO_MEM;
	*flag = 0;
	int rc = MPI_Testall(n, reqs, flag, st);
	if ((rc == MPI_SUCCESS && *flag) || rc == MPI_ERR_IN_STATUS)
		for (int i = 0; i < n; i++) {
			if (rc == MPI_SUCCESS)
				st[i].MPI_ERROR = MPI_SUCCESS;
			gc_fill_status(&st[i], dts[i], &out[i]);
		}
	free(st);
	return rc;
}

int gc_cancel(MPI_Request *req) { return MPI_Cancel(req); }

// One request, completed or tested without the arrays of gc_waitall.
gc_result gc_wait1(MPI_Request *req, int dt) {
	MPI_Status s;
	gc_result r = {0};
	r.rc = MPI_Wait(req, &s);
	r.flag = 1;
	if (r.rc == MPI_SUCCESS) {
		s.MPI_ERROR = MPI_SUCCESS;
		gc_fill_status(&s, dt, &r.st);
	}
	return r;
}

gc_result gc_iprobe(int src, int tag, int dt, MPI_Comm c) {
	MPI_Status s;
	gc_result r = {0};
	r.rc = MPI_Iprobe(gc_peer(src), gc_tag(tag), c, &r.flag, &s);
	if (r.rc == MPI_SUCCESS && r.flag) {
		s.MPI_ERROR = MPI_SUCCESS;
		gc_fill_status(&s, dt, &r.st);
	}
	return r;
}

gc_result gc_test1(MPI_Request *req, int dt) {
	MPI_Status s;
	gc_result r = {0};
	r.rc = MPI_Test(req, &r.flag, &s);
	if (r.rc == MPI_SUCCESS && r.flag) {
		s.MPI_ERROR = MPI_SUCCESS;
		gc_fill_status(&s, dt, &r.st);
	}
	return r;
}
