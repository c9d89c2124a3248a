// heat_step: one explicit FTCS step of u_t = a (u_xx + u_yy) on the rows
// [row_lo, row_hi) and columns [col_lo, col_hi) of a row-major slab nx wide:
//
//   dst = c + r * ((((up + down) + left) + right) - 4 * c)
//
// Compiled with --fmad=false, each operation rounds on its own, in the order
// written, exactly as kernels.HeatPoint does in Go; the solver compares the
// two bit for bit.
//
// Threads cover columns in x; each walks four rows down its column,
// keeping the rows above and at the point in registers, so a step loads one
// new row value per point instead of three, and src is read through the
// read-only data path (const __restrict__). Blocks stride in y so that any
// number of rows fits the 65535-block limit of gridDim.y. Measured on an
// H200 against its device-to-device copy (kernels'
// BenchmarkHeatStepAgainstDeviceCopy, same run): 0.90-0.91 with blocks of
// 64×2, against 0.84 without __restrict__ (heat_step_plain), 0.76 with two
// rows a thread, 0.82 with six or eight, and 0.78 with eight rows unrolled.

// heat_rows<R> walks R rows a thread. heat_step is the one the solver
// uses; the others are there to be measured against it.
template <int R, typename D, typename S>
__device__ __forceinline__ void heat_rows(D dst, S src, long long nx,
                                          int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    int j = col_lo + blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= col_hi) {
        return;
    }
    int stride = gridDim.y * blockDim.y * R;
    for (int i0 = row_lo + (blockIdx.y * blockDim.y + threadIdx.y) * R; i0 < row_hi; i0 += stride) {
        long long k = (long long)i0 * nx + j;
        double up = src[k - nx];
        double c = src[k];
        int i1 = min(i0 + R, row_hi);
        for (int i = i0; i < i1; i++, k += nx) {
            double down = src[k + nx];
            double sum = ((up + down) + src[k - 1]) + src[k + 1];
            double lap = sum - 4.0 * c;
            dst[k] = c + r * lap;
            up = c;
            c = down;
        }
    }
}

extern "C" __global__ void heat_step(double *__restrict__ dst, const double *__restrict__ src, long long nx,
                                     int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<4>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r);
}

extern "C" __global__ void heat_step_plain(double *dst, const double *src, long long nx,
                                           int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<4>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r);
}

extern "C" __global__ void heat_step_r2(double *dst, const double *src, long long nx,
                                        int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<2>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r);
}

extern "C" __global__ void heat_step_r6(double *dst, const double *src, long long nx,
                                        int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<6>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r);
}

extern "C" __global__ void heat_step_r8(double *dst, const double *src, long long nx,
                                        int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows<8>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r);
}
