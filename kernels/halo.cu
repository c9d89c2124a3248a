// Column halos of a row-major slab nx wide: a column is strided in memory, so
// it is packed into a contiguous buffer before it is sent and unpacked after
// it arrives. Pure copies: bit for bit whatever the compiler does. The _f64
// kernels move double, the _f32 ones float.

// pack: buf[k] = slab[(row_lo + k) * nx + col] for k in [0, rows).
template <typename T>
__device__ __forceinline__ void pack(T *buf, const T *slab, long long nx, int col, int row_lo, int rows)
{
    int stride = gridDim.x * blockDim.x;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < rows; k += stride) {
        buf[k] = slab[(long long)(row_lo + k) * nx + col];
    }
}

// unpack: slab[(row_lo + k) * nx + col] = buf[k] for k in [0, rows).
template <typename T>
__device__ __forceinline__ void unpack(T *slab, const T *buf, long long nx, int col, int row_lo, int rows)
{
    int stride = gridDim.x * blockDim.x;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < rows; k += stride) {
        slab[(long long)(row_lo + k) * nx + col] = buf[k];
    }
}

extern "C" __global__ void pack_column_f64(double *buf, const double *slab, long long nx, int col, int row_lo, int rows)
{
    pack(buf, slab, nx, col, row_lo, rows);
}

extern "C" __global__ void unpack_column_f64(double *slab, const double *buf, long long nx, int col, int row_lo, int rows)
{
    unpack(slab, buf, nx, col, row_lo, rows);
}

extern "C" __global__ void pack_column_f32(float *buf, const float *slab, long long nx, int col, int row_lo, int rows)
{
    pack(buf, slab, nx, col, row_lo, rows);
}

extern "C" __global__ void unpack_column_f32(float *slab, const float *buf, long long nx, int col, int row_lo, int rows)
{
    unpack(slab, buf, nx, col, row_lo, rows);
}
