// scale: x[i] = x[i] * a for i in [0, n). Grid-stride, so any grid covers any n.

extern "C" __global__ void scale_f32(float *x, long long n, float a)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        x[i] = x[i] * a;
    }
}

extern "C" __global__ void scale_f64(double *x, long long n, double a)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        x[i] = x[i] * a;
    }
}
