// heat_step: one explicit FTCS step of u_t = a (u_xx + u_yy) on the rows
// [row_lo, row_hi) and columns [col_lo, col_hi) of a row-major slab nx wide:
//
//   dst = c + r * ((((up + down) + left) + right) - 4 * c)
//
// Compiled with --fmad=false, each operation rounds on its own, in the order
// written, exactly as kernels.HeatPoint does in Go; the solver compares the
// two bit for bit. Threads cover columns in x and rows in y, grid-stride in y
// so that any number of rows fits the 65535-block limit of gridDim.y.

extern "C" __global__ void heat_step(double *dst, const double *src, long long nx,
                                     int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    int j = col_lo + blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= col_hi) {
        return;
    }
    for (int i = row_lo + blockIdx.y * blockDim.y + threadIdx.y; i < row_hi; i += gridDim.y * blockDim.y) {
        long long k = (long long)i * nx + j;
        double c = src[k];
        double sum = ((src[k - nx] + src[k + nx]) + src[k - 1]) + src[k + 1];
        double lap = sum - 4.0 * c;
        dst[k] = c + r * lap;
    }
}
