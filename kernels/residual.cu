// The residual: the sum of squares of (a - b) over a rectangle of a slab,
// in two fixed-order stages so that the result never depends on scheduling.

#define RESIDUAL_THREADS 256

// residual_rows: partial[i] = sum over j in [col_lo, col_hi) of
// (a - b)^2 at row row_lo + i; one block of RESIDUAL_THREADS threads per
// row. Thread t sums columns col_lo + t, col_lo + t + RESIDUAL_THREADS, ...
// in order, then the threads' sums are added pairwise, halving each round.
// kernels' Go reference follows the same order.
extern "C" __global__ void residual_rows(double *partial, const double *a, const double *b, long long nx,
                                         int row_lo, int col_lo, int col_hi)
{
    __shared__ double acc[RESIDUAL_THREADS];
    long long row = (long long)(row_lo + blockIdx.x) * nx;
    double s = 0.0;
    for (int j = col_lo + threadIdx.x; j < col_hi; j += RESIDUAL_THREADS) {
        double d = a[row + j] - b[row + j];
        s = s + d * d;
    }
    acc[threadIdx.x] = s;
    __syncthreads();
    for (int half = RESIDUAL_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            acc[threadIdx.x] = acc[threadIdx.x] + acc[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = acc[0];
    }
}

// sum_in_order: out[0] = ((x[0] + x[1]) + x[2]) + ... in one thread, so the
// order is fixed; n is a row count, small next to the grid.
extern "C" __global__ void sum_in_order(double *out, const double *x, int n)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        s = s + x[i];
    }
    out[0] = s;
}

// sum_chunks: out[b] = the sum of x[b * SUM_CHUNK : (b + 1) * SUM_CHUNK]
// (cut at n), one block of SUM_THREADS threads a chunk: thread t adds
// elements t, t + SUM_THREADS, ... of its chunk in order, then the threads'
// sums are added pairwise, halving each round. Launched again on its own
// output until one value is left, it sums heat_norm's per-block partials
// in a fixed order over the whole GPU instead of in one thread.
#define SUM_THREADS 256
#define SUM_CHUNK 4096

extern "C" __global__ void sum_chunks(double *out, const double *x, long long n)
{
    __shared__ double acc[SUM_THREADS];
    long long lo = (long long)blockIdx.x * SUM_CHUNK;
    long long hi = lo + SUM_CHUNK < n ? lo + SUM_CHUNK : n;
    double s = 0.0;
    for (long long i = lo + threadIdx.x; i < hi; i += SUM_THREADS) {
        s = s + x[i];
    }
    acc[threadIdx.x] = s;
    __syncthreads();
    for (int half = SUM_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            acc[threadIdx.x] = acc[threadIdx.x] + acc[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = acc[0];
    }
}
