// heat_step: one explicit FTCS step of u_t = a (u_xx + u_yy) on the rows
// [row_lo, row_hi) and columns [col_lo, col_hi) of a row-major slab nx wide:
//
//   dst = c + r * ((((up + down) + left) + right) - 4 * c)
//
// in float (the _f32 kernels) or double (_f64). Compiled with --fmad=false,
// each operation rounds on its own, in the order written, exactly as
// kernels.HeatPoint does in Go; the solver compares the two bit for bit.
//
// Threads walk four rows down their columns, keeping the rows above and at
// the point in registers, so a step loads one new row value per point
// instead of three, and src is read through the read-only data path
// (const __restrict__). Blocks stride in y so that any number of rows fits
// the 65535-block limit of gridDim.y.
//
// The solver's kernels are the _pair ones (heat_rows_pair below): a thread
// owns two neighbouring columns and loads them in one 8-byte (float) or
// 16-byte (double) load, four rows a thread, blocks of 128×1. Measured on an
// H200 against its device-to-device copy, 16384² and 20480² (kernels'
// BenchmarkHeatStepShapesAgainstDeviceCopy and
// BenchmarkHeatKernelsAgainstDeviceCopy, 2026-12-04): heat_step_%s_pair
// reaches 0.905-0.909 of the copy in float32 and 0.92 in float64, the best
// of every shape measured in both types, where the one-column step
// (heat_step_f32/_f64, heat_rows<4>, blocks of 64×2, the default before)
// reaches 0.83 in float32 and 0.90 in float64: a float32 thread of one
// column has too few bytes in flight. The fused residual step of one column
// a thread (heat_norm_f32/_f64) reached only 0.55 in float32 and 0.81 in
// float64, so that a residual every 10 steps left float32 at about 0.85 on
// average; heat_norm_%s_pair is the same residual on the pair kernel.
// Earlier, in float64 (BenchmarkHeatStepAgainstDeviceCopy): 0.84 without
// __restrict__ (heat_step_plain), 0.76 with two rows a thread, 0.82 with
// six or eight, 0.78 with eight rows unrolled.
//
// The plain step the solver takes between residuals is heat_step_f32_pair /
// heat_step_f64_pair (two columns a thread, below): on the H200 on
// 2026-12-04 0.905-0.909 of the copy in float32 and 0.92 in float64, where
// heat_step_f32/_f64 gave 0.83 and 0.90; those stay, measured beside it.
//
// heat_norm is heat_step that also sums, in double, (dst - src)^2 over the
// cells it writes, and writes one sum a block into
// partial[blockIdx.y * gridDim.x + blockIdx.x]: the residual comes out of
// the pass that updates the grid, with no second read of it. The order of
// the additions is fixed (below), so a run gives the same partials every
// time and kernels' Go reference (heatNormRef) gives the same bits.
// heat_step, for the steps that reduce no residual, does none of that work.

// block_sum writes the sum of every thread's s into partial[block]: each
// warp adds its lanes in a tree (lane l takes lane l + 16, then l + 8, ...,
// then l + 1), then thread 0 adds the warps' sums from the first to the
// last. Every thread of the block must call it: it synchronises them.
// Blocks are a whole number of warps.
__device__ __forceinline__ void block_sum(double s, double *partial)
{
    __shared__ double warp_sum[32];
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    for (int off = 16; off > 0; off /= 2) {
        s = s + __shfl_down_sync(0xffffffffu, s, off);
    }
    if ((t & 31) == 0) {
        warp_sum[t >> 5] = s;
    }
    __syncthreads();
    if (t == 0) {
        int warps = (blockDim.x * blockDim.y) >> 5;
        double b = warp_sum[0];
        for (int w = 1; w < warps; w++) {
            b = b + warp_sum[w];
        }
        partial[(long long)blockIdx.y * gridDim.x + blockIdx.x] = b;
    }
}

// heat_rows<R, NORM> walks R rows a thread. With NORM it accumulates each
// thread's (dst - src)^2 in the order the thread writes its cells, then
// block_sum adds the threads'. heat_step_f64/_f32 and heat_norm_f64/_f32
// were the solver's kernels before the _pair ones; they and the other
// heat_step kernels are there to be measured against those.
template <int R, bool NORM, typename T, typename D, typename S>
__device__ __forceinline__ void heat_rows(D dst, S src, long long nx,
                                          int row_lo, int row_hi, int col_lo, int col_hi, T r, double *partial)
{
    int j = col_lo + blockIdx.x * blockDim.x + threadIdx.x;
    double s = 0.0;
    if (j < col_hi) {
        int stride = gridDim.y * blockDim.y * R;
        for (int i0 = row_lo + (blockIdx.y * blockDim.y + threadIdx.y) * R; i0 < row_hi; i0 += stride) {
            long long k = (long long)i0 * nx + j;
            T up = src[k - nx];
            T c = src[k];
            int i1 = min(i0 + R, row_hi);
            for (int i = i0; i < i1; i++, k += nx) {
                T down = src[k + nx];
                T sum = ((up + down) + src[k - 1]) + src[k + 1];
                T lap = sum - (T)4 * c;
                T v = c + r * lap;
                dst[k] = v;
                if (NORM) {
                    double d = (double)v - (double)c;
                    s = s + d * d;
                }
                up = c;
                c = down;
            }
        }
    }
    if (NORM) {
        block_sum(s, partial);
    }
}

extern "C" __global__ void heat_step_f64(double *__restrict__ dst, const double *__restrict__ src, long long nx,
                                         int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<4, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_f32(float *__restrict__ dst, const float *__restrict__ src, long long nx,
                                         int row_lo, int row_hi, int col_lo, int col_hi, float r)
{
    heat_rows<4, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_norm_f64(double *__restrict__ dst, const double *__restrict__ src, long long nx,
                                         int row_lo, int row_hi, int col_lo, int col_hi, double r,
                                         double *__restrict__ partial)
{
    heat_rows<4, true>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, partial);
}

extern "C" __global__ void heat_norm_f32(float *__restrict__ dst, const float *__restrict__ src, long long nx,
                                         int row_lo, int row_hi, int col_lo, int col_hi, float r,
                                         double *__restrict__ partial)
{
    heat_rows<4, true>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, partial);
}

// Shapes for float32, measured against heat_step_f32 (kernels'
// BenchmarkHeatStepShapesAgainstDeviceCopy): a float32 thread moves half
// the bytes of a float64 one, so more rows a thread (more loads in flight)
// or wider blocks may be what reaches the copy's bandwidth.
extern "C" __global__ void heat_step_f64_r8x(double *__restrict__ dst, const double *__restrict__ src, long long nx,
                                             int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<8, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_f32_r8x(float *__restrict__ dst, const float *__restrict__ src, long long nx,
                                             int row_lo, int row_hi, int col_lo, int col_hi, float r)
{
    heat_rows<8, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_f64_r16x(double *__restrict__ dst, const double *__restrict__ src, long long nx,
                                              int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<16, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_f32_r16x(float *__restrict__ dst, const float *__restrict__ src, long long nx,
                                              int row_lo, int row_hi, int col_lo, int col_hi, float r)
{
    heat_rows<16, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

// Two columns a thread (the _pair kernels, the solver's): thread t of the
// grid along a row owns columns j = (col_lo & ~1) + 2t and j + 1 and loads
// both in one 8-byte (float2; 16-byte double2 for double) load where the
// address is aligned, which for an odd slab width is every other row, and
// with two loads elsewhere. Each cell is computed as heat_rows computes it,
// in the same order (left is column j - 1 for j and j for j + 1), so the
// result is the same bits. A thread writes only the columns in
// [col_lo, col_hi): column j when j >= col_lo (w0), j + 1 when
// j + 1 < col_hi (w1).
//
// With NORM it adds, in double, (v - c)^2 for each cell it writes, in the
// order it writes them: row by row down its runs of R rows (the runs in
// order of their first row, so row by row overall), and within a row column
// j, then j + 1. Then block_sum. Every thread of the block reaches
// block_sum, a thread with no columns (j >= col_hi: the launch covers an
// upper bound of the threads a row needs, see kernels.HeatBlocks) with 0,
// so a block with none writes +0.
template <typename T> struct pair_of;
template <> struct pair_of<float> { typedef float2 type; };
template <> struct pair_of<double> { typedef double2 type; };

template <typename T>
__device__ __forceinline__ typename pair_of<T>::type load_pair(const T *__restrict__ p)
{
    typedef typename pair_of<T>::type V;
    if (((unsigned long long)p & (sizeof(V) - 1)) == 0) {
        return *(const V *)p;
    }
    V v;
    v.x = p[0];
    v.y = p[1];
    return v;
}

template <int R, bool NORM, typename T>
__device__ __forceinline__ void heat_rows_pair(T *__restrict__ dst, const T *__restrict__ src, long long nx,
                                               int row_lo, int row_hi, int col_lo, int col_hi, T r,
                                               double *partial)
{
    typedef typename pair_of<T>::type V;
    int j = (col_lo & ~1) + 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    double s = 0.0;
    if (j < col_hi) {
        bool w0 = j >= col_lo, w1 = j + 1 < col_hi; // the columns this thread writes
        int stride = gridDim.y * blockDim.y * R;
        for (int i0 = row_lo + (blockIdx.y * blockDim.y + threadIdx.y) * R; i0 < row_hi; i0 += stride) {
            long long k = (long long)i0 * nx + j;
            V up = load_pair(src + k - nx);
            V c = load_pair(src + k);
            int i1 = min(i0 + R, row_hi);
            for (int i = i0; i < i1; i++, k += nx) {
                V down = load_pair(src + k + nx);
                T left = src[k - 1];
                T right = w1 ? src[k + 2] : (T)0;
                V v;
                v.x = c.x + r * ((((up.x + down.x) + left) + c.y) - (T)4 * c.x);
                v.y = c.y + r * ((((up.y + down.y) + c.x) + right) - (T)4 * c.y);
                T *d = dst + k;
                if (w0 && w1 && ((unsigned long long)d & (sizeof(V) - 1)) == 0) {
                    *(V *)d = v;
                } else {
                    if (w0) {
                        d[0] = v.x;
                    }
                    if (w1) {
                        d[1] = v.y;
                    }
                }
                if (NORM) {
                    if (w0) {
                        double e = (double)v.x - (double)c.x;
                        s = s + e * e;
                    }
                    if (w1) {
                        double e = (double)v.y - (double)c.y;
                        s = s + e * e;
                    }
                }
                up = c;
                c = down;
            }
        }
    }
    if (NORM) {
        block_sum(s, partial);
    }
}

extern "C" __global__ void heat_step_f32_pair(float *__restrict__ dst, const float *__restrict__ src, long long nx,
                                              int row_lo, int row_hi, int col_lo, int col_hi, float r)
{
    heat_rows_pair<4, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_f64_pair(double *__restrict__ dst, const double *__restrict__ src, long long nx,
                                              int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows_pair<4, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_norm_f32_pair(float *__restrict__ dst, const float *__restrict__ src, long long nx,
                                              int row_lo, int row_hi, int col_lo, int col_hi, float r,
                                              double *__restrict__ partial)
{
    heat_rows_pair<4, true>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, partial);
}

extern "C" __global__ void heat_norm_f64_pair(double *__restrict__ dst, const double *__restrict__ src, long long nx,
                                              int row_lo, int row_hi, int col_lo, int col_hi, double r,
                                              double *__restrict__ partial)
{
    heat_rows_pair<4, true>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, partial);
}

extern "C" __global__ void heat_step_f32_pair8(float *__restrict__ dst, const float *__restrict__ src, long long nx,
                                               int row_lo, int row_hi, int col_lo, int col_hi, float r)
{
    heat_rows_pair<8, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_f64_pair8(double *__restrict__ dst, const double *__restrict__ src, long long nx,
                                               int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows_pair<8, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_plain(double *dst, const double *src, long long nx,
                                           int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<4, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_r2(double *dst, const double *src, long long nx,
                                        int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<2, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_r6(double *dst, const double *src, long long nx,
                                        int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<6, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}

extern "C" __global__ void heat_step_r8(double *dst, const double *src, long long nx,
                                        int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<8, false>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r, (double *)0);
}
