package kernels

import (
	"encoding/binary"
	"testing"

	"github.com/gpucomm/gpucomm/internal/cuda"
)

// convertCheck is appended to reduce.cu for this test alone. Thread i takes
// the 32-bit pattern base+i as a float32 and rounds it to float16 and to
// bfloat16 with the conversions the kernels use and with the written-out
// ones; the first 65536 threads of base 0 also widen the pattern as a
// float16. A NaN matches any NaN. bad[0..2] count the mismatches of each
// conversion, bad[3..5] keep an input that mismatched.
const convertCheck = `
__device__ static bool nan_f16(unsigned short h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
__device__ static bool nan_bf16(unsigned short h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }
extern "C" __global__ void convert_check(unsigned long long *bad, unsigned int base, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int u = base + i;
    float f = __uint_as_float(u);
    unsigned short a = f32_to_half(f), b = soft_f32_to_half(f);
    if (a != b && !(nan_f16(a) && nan_f16(b))) { atomicAdd(&bad[0], 1ull); bad[3] = u; }
    a = f32_to_bf16(f);
    b = soft_f32_to_bf16(f);
    if (a != b && !(nan_bf16(a) && nan_bf16(b))) { atomicAdd(&bad[1], 1ull); bad[4] = u; }
    if (u < 65536) {
        float x = half_to_f32((unsigned short)u), y = soft_half_to_f32((unsigned short)u);
        if (__float_as_uint(x) != __float_as_uint(y) && !(x != x && y != y)) { atomicAdd(&bad[2], 1ull); bad[5] = u; }
    }
}
`

// TestHalfConversionsOnAGPUMatchTheWrittenOutOnes holds the 16-bit
// conversions that reduce.cu's kernels run on a GPU (the hardware's cvt)
// to the written-out ones, which the CPU build of reduce.cu runs and
// TestReduceCUMatchesTheHostReferenceOnTheCPU checks against comm/driver:
// every one of the 2^32 float32 inputs rounded to float16 and to bfloat16,
// and every float16 widened, bit for bit but for a NaN's sign and payload.
// It compiles wherever NVRTC is (so that the check itself builds on the CPU
// machine) and runs on a GPU.
func TestHalfConversionsOnAGPUMatchTheWrittenOutOnes(t *testing.T) {
	if _, _, err := (nvrtcCompiler{}).Version(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	src, err := sources.ReadFile("reduce.cu")
	if err != nil {
		t.Fatal(err)
	}
	compile := func(major, minor int) []byte {
		t.Helper()
		image, err := build(nvrtcCompiler{}, string(src)+convertCheck, "reduce.cu", nvrtcOptions(major, minor))
		if err != nil {
			t.Fatalf("reduce.cu with the conversion check for sm_%d%d: %v", major, minor, err)
		}
		return image
	}
	if err := cuda.Load(); err != nil {
		compile(9, 0)
		t.Skipf("built for sm_90; no CUDA driver to run it: %v", err)
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		compile(9, 0)
		t.Skipf("built for sm_90; no GPU (%d, %v)", n, err)
	}
	ctx, major, minor := firstGPU(t)
	image := compile(major, minor)
	out := make([]byte, 6*8)
	err = cuda.WithContext(ctx, func() error {
		mod, err := cuda.ModuleLoadData(image)
		if err != nil {
			return err
		}
		defer cuda.ModuleUnload(mod)
		fn, err := cuda.ModuleGetFunction(mod, "convert_check")
		if err != nil {
			return err
		}
		bad, err := cuda.MemAlloc(len(out))
		if err != nil {
			return err
		}
		defer cuda.MemFree(bad)
		if err := cuda.MemcpyHtoDBytes(bad, make([]byte, len(out))); err != nil {
			return err
		}
		const per, threads = 1 << 26, 256
		for base := uint64(0); base < 1<<32; base += per {
			err := cuda.LaunchKernel(fn, cuda.Dim3{X: per / threads, Y: 1, Z: 1}, cuda.Dim3{X: threads, Y: 1, Z: 1}, 0, 0,
				cuda.Arg(bad), cuda.Arg(uint32(base)), cuda.Arg(uint32(per)))
			if err != nil {
				return err
			}
		}
		if err := cuda.CtxSynchronize(); err != nil {
			return err
		}
		return cuda.MemcpyDtoHBytes(out, bad)
	})
	if err != nil {
		t.Fatal(err)
	}
	var v [6]uint64
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(out[8*i:])
	}
	for i, what := range []string{"float32 to float16", "float32 to bfloat16", "float16 to float32"} {
		if v[i] != 0 {
			t.Errorf("sm_%d%d, %s: %d inputs convert otherwise on the GPU than written out (one: %#x)", major, minor, what, v[i], v[3+i])
		}
	}
	t.Logf("sm_%d%d: 2^32 float32 rounded to float16 and bfloat16, 65536 float16 widened: %d, %d and %d mismatches", major, minor, v[0], v[1], v[2])
}
