// fill: x[i] = v for i in [0, n). Grid-stride, so any grid covers any n.

extern "C" __global__ void fill_f32(float *x, long long n, float v)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        x[i] = v;
    }
}

extern "C" __global__ void fill_f64(double *x, long long n, double v)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        x[i] = v;
    }
}
