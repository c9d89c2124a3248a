// heat_step_cs: heat.cu's heat_step (four rows a thread, src through the
// read-only path) with streaming stores: each dst value is written with
// st.global.cs, evict-first, so that the written grid, which no one reads
// this step, leaves L2 to the rows of src the next blocks still read. Kept
// in a file of its own, outside the solver's module, to be measured against
// heat_step (kernels' BenchmarkHeatStepAgainstDeviceCopy) before it could
// replace it. Same arithmetic, same bits.

__device__ __forceinline__ void store_cs(double *p, double v)
{
    asm volatile("st.global.cs.f64 [%0], %1;" : : "l"(p), "d"(v) : "memory");
}

__device__ __forceinline__ void store_cs(float *p, float v)
{
    asm volatile("st.global.cs.f32 [%0], %1;" : : "l"(p), "f"(v) : "memory");
}

template <int R, typename T>
__device__ __forceinline__ void heat_rows_cs(T *__restrict__ dst, const T *__restrict__ src, long long nx,
                                             int row_lo, int row_hi, int col_lo, int col_hi, T r)
{
    int j = col_lo + blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= col_hi) {
        return;
    }
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
            store_cs(dst + k, c + r * lap);
            up = c;
            c = down;
        }
    }
}

extern "C" __global__ void heat_step_cs_f64(double *__restrict__ dst, const double *__restrict__ src, long long nx,
                                            int row_lo, int row_hi, int col_lo, int col_hi, double r)
{
    heat_rows_cs<4>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r);
}

extern "C" __global__ void heat_step_cs_f32(float *__restrict__ dst, const float *__restrict__ src, long long nx,
                                            int row_lo, int row_hi, int col_lo, int col_hi, float r)
{
    heat_rows_cs<4>(dst, src, nx, row_lo, row_hi, col_lo, col_hi, r);
}
