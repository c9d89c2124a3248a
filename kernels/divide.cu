// divide: x[i] = x[i] / d for i in [0, n). Grid-stride, so any grid covers any n.
// A division, not a multiplication by 1/d: it is correctly rounded, and exact
// where the quotient is representable (d = 1, or a sum of d equal terms).

extern "C" __global__ void divide_f32(float *x, long long n, float d)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        x[i] = x[i] / d;
    }
}

extern "C" __global__ void divide_f64(double *x, long long n, double d)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        x[i] = x[i] / d;
    }
}
