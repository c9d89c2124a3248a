// fold: acc[i] = acc[i] op src[i] for i in [0, n), and divide: acc[i] /= by,
// for every element type and reduction gpucomm has; comm/driver/hostreduce.go
// is their Go reference (what the host device runs) and the definition they
// match bit for bit: integers wrap, 16-bit floats are widened to float32,
// combined there and rounded back (ties to even) after each step, Min and Max
// propagate NaN (as a + b) and order -0 below +0, Avg folds as Sum and is
// finished by divide (integers truncate, in 64 bits). Compiled with
// --fmad=false, so that no multiply and add fuse. No header is needed: the
// 16-bit conversions are written out, as in comm/driver/types.go.

typedef signed char i8;
typedef unsigned char u8;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

__device__ static float half_to_f32(unsigned short h)
{
    unsigned int sign = (unsigned int)(h >> 15) << 31;
    unsigned int exp = (h >> 10) & 0x1f;
    unsigned int man = h & 0x3ff;
    if (exp == 0x1f) return __uint_as_float(sign | (0xffu << 23) | (man << 13));
    if (exp != 0) return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0) return __uint_as_float(sign);
    unsigned int e = 113;
    while ((man & 0x400) == 0) { man <<= 1; e--; }
    return __uint_as_float(sign | (e << 23) | ((man & 0x3ff) << 13));
}

__device__ static unsigned short f32_to_half(float f)
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

__device__ static unsigned short f32_to_bf16(float f)
{
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (unsigned short)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (unsigned short)(u >> 16);
}

template <typename T> __device__ static T op_sum(T a, T b) { return a + b; }
template <typename T> __device__ static T op_prod(T a, T b) { return a * b; }
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
// 16-bit floats in float32.
#define DIVIDE_INT(NAME, T, W) \
    extern "C" __global__ void divide_##NAME(T *acc, long long n, long long by) { GRID_STRIDE acc[i] = (T)((W)acc[i] / (W)by); }

DIVIDE_INT(i8, i8, i64)
DIVIDE_INT(u8, u8, u64)
DIVIDE_INT(i32, i32, i64)
DIVIDE_INT(u32, u32, u64)
DIVIDE_INT(i64, i64, i64)
DIVIDE_INT(u64, u64, u64)

#define DIVIDE_FLOAT(NAME, T) \
    extern "C" __global__ void divide_##NAME(T *acc, long long n, long long by) { GRID_STRIDE acc[i] = acc[i] / (T)by; }
#define DIVIDE_NARROW(NAME, WIDEN, NARROW) \
    extern "C" __global__ void divide_##NAME(unsigned short *acc, long long n, long long by) { GRID_STRIDE acc[i] = NARROW(WIDEN(acc[i]) / (float)by); }

DIVIDE_FLOAT(f32, float)
DIVIDE_FLOAT(f64, double)
DIVIDE_NARROW(f16, half_to_f32, f32_to_half)
DIVIDE_NARROW(bf16, bf16_to_f32, f32_to_bf16)
