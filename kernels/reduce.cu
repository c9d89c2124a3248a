// fold: acc[i] = acc[i] op src[i] for i in [0, n), and divide: acc[i] /= by,
// for every element type and reduction gpucomm has; comm/driver/hostreduce.go
// is their Go reference (what the host device runs) and the definition they
// match bit for bit: integers wrap, 16-bit floats are widened to float32,
// combined there and rounded back (ties to even) after each step, Min and Max
// propagate NaN (as a + b) and order -0 below +0, Avg folds as Sum and is
// finished by divide (integers truncate, in 64 bits). Compiled with
// --fmad=false, so that no multiply and add fuse. No header is needed: on
// the GPU the 16-bit conversions are the hardware's (PTX cvt, rounding to
// nearest even, subnormals kept), elsewhere (the CPU build of this file that
// kernels' tests make) they are written out, as in comm/driver/types.go, with
// the same results but for a NaN's sign and payload.

typedef signed char i8;
typedef unsigned char u8;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// The written-out conversions (soft_*), which the CPU build runs and the
// GPU test TestHalfConversionsOnAGPUMatchTheWrittenOutOnes holds the GPU's
// own against, over every input.
__device__ static float soft_half_to_f32(unsigned short h)
{
    unsigned int sign = (unsigned int)(h >> 15) << 31;
    unsigned int exp = (h >> 10) & 0x1f;
    unsigned int man = h & 0x3ff;
    if (exp == 0x1f) return __uint_as_float(sign | (0xffu << 23) | (man << 13));
    if (exp != 0) return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0) return __uint_as_float(sign);
    // A subnormal: shifted until its leading 1 is bit 10 (a count of
    // leading zeros, not a loop, so that the kernels that inline it for
    // every element of every source stay small), the exponent down by as
    // much from 113.
    unsigned int shift = (unsigned int)__clz((int)man) - 21;
    return __uint_as_float(sign | ((113 - shift) << 23) | (((man << shift) & 0x3ff) << 13));
}

__device__ static unsigned short soft_f32_to_half(float f)
{
    unsigned int b = __float_as_uint(f);
    unsigned short sign = (unsigned short)((b >> 16) & 0x8000);
    int exp = (int)((b >> 23) & 0xff);
    unsigned int man = b & 0x7fffff;
    if (exp == 0xff) return man != 0 ? (sign | 0x7e00) : (sign | 0x7c00);
    int e = exp - 127 + 15;
    if (e >= 0x1f) return sign | 0x7c00;
    if (e <= 0) {
        if (e < -10) return sign;
        man |= 0x800000;
        unsigned int shift = (unsigned int)(14 - e);
        unsigned int h = man >> shift;
        unsigned int rem = man & ((1u << shift) - 1);
        unsigned int half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return sign | (unsigned short)h;
    }
    unsigned int h = ((unsigned int)e << 10) | (man >> 13);
    unsigned int rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | (unsigned short)h;
}

__device__ static float bf16_to_f32(unsigned short b) { return __uint_as_float((unsigned int)b << 16); }

__device__ static unsigned short soft_f32_to_bf16(float f)
{
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (unsigned short)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (unsigned short)(u >> 16);
}

// The conversions the kernels use: the GPU's own instructions (rounding to
// nearest even, subnormals kept, as the written-out ones), bfloat16's
// rounding from sm_80 (before it, written out); the written-out ones on the
// CPU.
__device__ static float half_to_f32(unsigned short h)
{
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    return soft_half_to_f32(h);
#endif
}

__device__ static unsigned short f32_to_half(float f)
{
#ifdef __CUDA_ARCH__
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    return soft_f32_to_half(f);
#endif
}

__device__ static unsigned short f32_to_bf16(float f)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    return soft_f32_to_bf16(f);
#endif
}

template <typename T> __device__ static T op_sum(T a, T b) { return a + b; }
template <typename T> __device__ static T op_prod(T a, T b) { return a * b; }
// Signed 32- and 64-bit integers wrap as Go's do: added and multiplied as
// unsigned, since a signed overflow is undefined in C++ (8-bit ones are
// combined in int, where they cannot overflow).
template <> __device__ i32 op_sum<i32>(i32 a, i32 b) { return (i32)((u32)a + (u32)b); }
template <> __device__ i32 op_prod<i32>(i32 a, i32 b) { return (i32)((u32)a * (u32)b); }
template <> __device__ i64 op_sum<i64>(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
template <> __device__ i64 op_prod<i64>(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
template <typename T> __device__ static T op_min(T a, T b) { return b < a ? b : a; }
template <typename T> __device__ static T op_max(T a, T b) { return b > a ? b : a; }

__device__ static bool negative(float a) { return (__float_as_uint(a) >> 31) != 0; }
__device__ static bool negative(double a) { return __double_as_longlong(a) < 0; }

template <typename T> __device__ static T fop_min(T a, T b)
{
    if (a != a || b != b) return a + b;
    if (a == b) return negative(a) ? a : b;
    return b < a ? b : a;
}
template <typename T> __device__ static T fop_max(T a, T b)
{
    if (a != a || b != b) return a + b;
    if (a == b) return negative(a) ? b : a;
    return b > a ? b : a;
}

#define GRID_STRIDE for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)

#define FOLD(NAME, T, F) \
    extern "C" __global__ void fold_##NAME(T *acc, const T *src, long long n) { GRID_STRIDE acc[i] = F(acc[i], src[i]); }

#define FOLD_NARROW(NAME, F, WIDEN, NARROW) \
    extern "C" __global__ void fold_##NAME(unsigned short *acc, const unsigned short *src, long long n) \
    { GRID_STRIDE acc[i] = NARROW(F(WIDEN(acc[i]), WIDEN(src[i]))); }

#define INT_FOLDS(T) \
    FOLD(T##_sum, T, op_sum<T>) FOLD(T##_prod, T, op_prod<T>) FOLD(T##_min, T, op_min<T>) FOLD(T##_max, T, op_max<T>)

INT_FOLDS(i8)
INT_FOLDS(u8)
INT_FOLDS(i32)
INT_FOLDS(u32)
INT_FOLDS(i64)
INT_FOLDS(u64)

#define FLOAT_FOLDS(NAME, T) \
    FOLD(NAME##_sum, T, op_sum<T>) FOLD(NAME##_prod, T, op_prod<T>) FOLD(NAME##_min, T, fop_min<T>) FOLD(NAME##_max, T, fop_max<T>)

FLOAT_FOLDS(f32, float)
FLOAT_FOLDS(f64, double)

#define NARROW_FOLDS(NAME, WIDEN, NARROW) \
    FOLD_NARROW(NAME##_sum, op_sum<float>, WIDEN, NARROW) FOLD_NARROW(NAME##_prod, op_prod<float>, WIDEN, NARROW) \
    FOLD_NARROW(NAME##_min, fop_min<float>, WIDEN, NARROW) FOLD_NARROW(NAME##_max, fop_max<float>, WIDEN, NARROW)

NARROW_FOLDS(f16, half_to_f32, f32_to_half)
NARROW_FOLDS(bf16, bf16_to_f32, f32_to_bf16)

// divide: integers in 64 bits (signed or not), floats in their own type,
// 16-bit floats in float32; div_<type> is one element's division, which
// reduce uses too.
#define DIV_INT(TYPE, T, W) __device__ static T div_##TYPE(T a, long long by) { return (T)((W)a / (W)by); }
#define DIV_FLOAT(TYPE, T) __device__ static T div_##TYPE(T a, long long by) { return a / (T)by; }
#define DIV_NARROW(TYPE, WIDEN, NARROW) \
    __device__ static unsigned short div_##TYPE(unsigned short a, long long by) { return NARROW(WIDEN(a) / (float)by); }

DIV_INT(i8, i8, i64)
DIV_INT(u8, u8, u64)
DIV_INT(i32, i32, i64)
DIV_INT(u32, u32, u64)
DIV_INT(i64, i64, i64)
DIV_INT(u64, u64, u64)
DIV_FLOAT(f32, float)
DIV_FLOAT(f64, double)
DIV_NARROW(f16, half_to_f32, f32_to_half)
DIV_NARROW(bf16, bf16_to_f32, f32_to_bf16)

#define DIVIDE(NAME, T) \
    extern "C" __global__ void divide_##NAME(T *acc, long long n, long long by) { GRID_STRIDE acc[i] = div_##NAME(acc[i], by); }

DIVIDE(i8, i8)
DIVIDE(u8, u8)
DIVIDE(i32, i32)
DIVIDE(u32, u32)
DIVIDE(i64, i64)
DIVIDE(u64, u64)
DIVIDE(f32, float)
DIVIDE(f64, double)
DIVIDE(f16, unsigned short)
DIVIDE(bf16, unsigned short)

// reduce: a node's reduction in one pass, for the mpi backend's IPC path.
// Element i of every source, in order, is combined as fold combines them
// (acc = src[0][i], then acc = acc op src[q][i], rounded to the element type
// after each step), divided by `by` as divide does when by > 0 (finishing an
// Avg), and written to element i of every destination: each source read
// once and each destination written once, where fold into a scratch, divide
// and a copy to each destination moved the part three times and more. A
// thread reads element i of every source before it writes element i of any
// destination, so a destination may be a source (a reduction in place); the
// pointers are not restrict. The table is passed by value (kernel parameter
// space); its loops are unrolled, so that every index into it is constant.
//
// Where every pointer is 16-byte aligned and the type has it (VEC), a
// thread moves 16 bytes at a time (one uint4 load a source, one store a
// destination, the elements combined one by one in between, as the scalar
// loop does), and the last n % (16 / sizeof(T)) elements go the scalar
// way; otherwise every element does. On an H100 (2026-12-05, kernels'
// BenchmarkReduceAgainstDeviceCopy) the 16-byte path ran at 0.97-0.98 of a
// device copy of as many bytes for float32 and float64 and 2 or 4 sources,
// the element loop at 0.33-0.94 (float32 of 2 sources the slowest).
#define MAX_RANKS 16
struct rank_ptrs { const void *src[MAX_RANKS]; void *dst[MAX_RANKS]; };

template <typename T> union vec16 { uint4 v; T e[16 / sizeof(T)]; };

#define REDUCE(TYPE, OP, T, F, VEC) \
    extern "C" __global__ void reduce_##TYPE##_##OP(rank_ptrs p, int nsrc, int ndst, long long n, long long by) \
    { \
        const int V = 16 / sizeof(T); \
        unsigned long long bits = 0; \
        _Pragma("unroll") for (int q = 0; q < MAX_RANKS; q++) { \
            if (q < nsrc) bits |= (unsigned long long)p.src[q]; \
            if (q < ndst) bits |= (unsigned long long)p.dst[q]; \
        } \
        const long long nv = VEC && (bits & 15) == 0 ? n / V : 0; \
        const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x; \
        if (VEC) for (long long j = first; j < nv; j += stride) { \
            vec16<T> acc, x; \
            acc.v = ((const uint4 *)p.src[0])[j]; \
            _Pragma("unroll") for (int q = 1; q < MAX_RANKS; q++) { \
                if (q < nsrc) { \
                    x.v = ((const uint4 *)p.src[q])[j]; \
                    _Pragma("unroll") for (int k = 0; k < V; k++) acc.e[k] = F(acc.e[k], x.e[k]); \
                } \
            } \
            if (by > 0) { \
                _Pragma("unroll") for (int k = 0; k < V; k++) acc.e[k] = div_##TYPE(acc.e[k], by); \
            } \
            _Pragma("unroll") for (int d = 0; d < MAX_RANKS; d++) if (d < ndst) ((uint4 *)p.dst[d])[j] = acc.v; \
        } \
        for (long long i = nv * V + first; i < n; i += stride) { \
            T acc = ((const T *)p.src[0])[i]; \
            _Pragma("unroll") for (int q = 1; q < MAX_RANKS; q++) if (q < nsrc) acc = F(acc, ((const T *)p.src[q])[i]); \
            if (by > 0) acc = div_##TYPE(acc, by); \
            _Pragma("unroll") for (int d = 0; d < MAX_RANKS; d++) if (d < ndst) ((T *)p.dst[d])[i] = acc; \
        } \
    }

// VEC 0 would leave out the 16-byte path. Every type takes it: the 16-bit
// floats did not while their conversions were written out in software
// (inlined for 8 elements of up to 16 sources, they made each kernel ten
// times the size), and their element loop ran at 0.36-0.42 of a device
// copy on an H100, where float32's 16-byte path ran at 0.97.
#define REDUCES(TYPE, T, VEC, SUM, PROD, MIN, MAX) \
    REDUCE(TYPE, sum, T, SUM, VEC) REDUCE(TYPE, prod, T, PROD, VEC) REDUCE(TYPE, min, T, MIN, VEC) REDUCE(TYPE, max, T, MAX, VEC)

// The 16-bit floats' steps: widened, combined in float32, rounded back.
#define NARROW_OP(NAME, F, WIDEN, NARROW) \
    __device__ static unsigned short NAME(unsigned short a, unsigned short b) { return NARROW(F(WIDEN(a), WIDEN(b))); }

NARROW_OP(f16_sum, op_sum<float>, half_to_f32, f32_to_half)
NARROW_OP(f16_prod, op_prod<float>, half_to_f32, f32_to_half)
NARROW_OP(f16_min, fop_min<float>, half_to_f32, f32_to_half)
NARROW_OP(f16_max, fop_max<float>, half_to_f32, f32_to_half)
NARROW_OP(bf16_sum, op_sum<float>, bf16_to_f32, f32_to_bf16)
NARROW_OP(bf16_prod, op_prod<float>, bf16_to_f32, f32_to_bf16)
NARROW_OP(bf16_min, fop_min<float>, bf16_to_f32, f32_to_bf16)
NARROW_OP(bf16_max, fop_max<float>, bf16_to_f32, f32_to_bf16)

REDUCES(i8, i8, 1, op_sum<i8>, op_prod<i8>, op_min<i8>, op_max<i8>)
REDUCES(u8, u8, 1, op_sum<u8>, op_prod<u8>, op_min<u8>, op_max<u8>)
REDUCES(i32, i32, 1, op_sum<i32>, op_prod<i32>, op_min<i32>, op_max<i32>)
REDUCES(u32, u32, 1, op_sum<u32>, op_prod<u32>, op_min<u32>, op_max<u32>)
REDUCES(i64, i64, 1, op_sum<i64>, op_prod<i64>, op_min<i64>, op_max<i64>)
REDUCES(u64, u64, 1, op_sum<u64>, op_prod<u64>, op_min<u64>, op_max<u64>)
REDUCES(f32, float, 1, op_sum<float>, op_prod<float>, fop_min<float>, fop_max<float>)
REDUCES(f64, double, 1, op_sum<double>, op_prod<double>, fop_min<double>, fop_max<double>)
REDUCES(f16, unsigned short, 1, f16_sum, f16_prod, f16_min, f16_max)
REDUCES(bf16, unsigned short, 1, bf16_sum, bf16_prod, bf16_min, bf16_max)
