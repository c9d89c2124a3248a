// Column halos of a row-major slab nx wide: a column is strided in memory, so
// it is packed into a contiguous buffer before it is sent and unpacked after
// it arrives. Pure copies: bit for bit whatever the compiler does.

// pack_column: buf[k] = slab[(row_lo + k) * nx + col] for k in [0, rows).
extern "C" __global__ void pack_column(double *buf, const double *slab, long long nx, int col, int row_lo, int rows)
{
    int stride = gridDim.x * blockDim.x;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < rows; k += stride) {
        buf[k] = slab[(long long)(row_lo + k) * nx + col];
    }
}

// unpack_column: slab[(row_lo + k) * nx + col] = buf[k] for k in [0, rows).
extern "C" __global__ void unpack_column(double *slab, const double *buf, long long nx, int col, int row_lo, int rows)
{
    int stride = gridDim.x * blockDim.x;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < rows; k += stride) {
        slab[(long long)(row_lo + k) * nx + col] = buf[k];
    }
}
