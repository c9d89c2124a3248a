package kernels_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/kernels"
)

// cpuShim stands in for what reduce.cu takes from CUDA, so that a C++
// compiler builds it for the CPU: a grid of 3 blocks of 5 threads, each
// thread's call of a kernel made in turn (ON_GRID), so that the kernels'
// grid-stride loops must cover every element between them; the bit casts
// by memcpy.
const cpuShim = `#include <cstdio>
#include <cstdlib>
#include <cstring>
#define __global__
#define __device__
struct cpu_dim3 { unsigned x, y, z; };
static cpu_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0}, blockDim = {5, 1, 1}, gridDim = {3, 1, 1};
#define ON_GRID(CALL) \
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; blockIdx.x++) \
        for (threadIdx.x = 0; threadIdx.x < blockDim.x; threadIdx.x++) CALL
static float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
static int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
extern "C" const char *__asan_default_options() { return "detect_leaks=0"; }
struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
`

// cpuMain runs one kernel of reduce.cu on the CPU: NAME N BY NSRC NDST
// INPLACE SRCOFF DSTOFF IN OUT, with IN holding NSRC arrays of N elements
// (fold: acc then src; divide: acc), each copied to SRCOFF elements past a
// 16-byte boundary (a reduce's destinations DSTOFF past one), and OUT
// written with the results (fold, divide: acc; reduce: its NDST
// destinations, the last of them source 1 when INPLACE).
const cpuMain = `
static char *at16(size_t bytes, size_t off) {
    void *b = 0;
    if (posix_memalign(&b, 16, off + bytes + (off + bytes == 0))) { fprintf(stderr, "no memory\n"); exit(2); }
    memset(b, 0, off);
    return (char *)b + off; /* ending where the array does, so that an overrun is the sanitizer's */
}
int main(int argc, char **argv) {
    if (argc != 11) { fprintf(stderr, "usage\n"); return 2; }
    const char *name = argv[1];
    long long n = atoll(argv[2]), by = atoll(argv[3]);
    int nsrc = atoi(argv[4]), ndst = atoi(argv[5]), inplace = atoi(argv[6]);
    size_t srcoff = atoi(argv[7]), dstoff = atoi(argv[8]), es = 0;
    for (const struct kernel *k = kernels; k->name; k++) if (!strcmp(k->name, name)) es = k->es;
    if (!es) { fprintf(stderr, "no kernel %s\n", name); return 2; }
    FILE *f = fopen(argv[9], "rb");
    char *src[MAX_RANKS], *dst[MAX_RANKS];
    rank_ptrs p;
    memset(&p, 0, sizeof p);
    for (int q = 0; q < nsrc; q++) {
        src[q] = at16(n * es, srcoff * es);
        if (!f || fread(src[q], es, n, f) != (size_t)n) { fprintf(stderr, "read %s\n", argv[9]); return 2; }
        p.src[q] = src[q];
    }
    fclose(f);
    for (int d = 0; d < ndst; d++) p.dst[d] = dst[d] = (inplace && d == ndst - 1) ? src[1] : at16(n * es, dstoff * es);
    for (const struct kernel *k = kernels; k->name; k++) {
        if (strcmp(k->name, name)) continue;
        if (k->fold) { k->fold(src[0], src[1], n); ndst = 1; dst[0] = src[0]; }
        if (k->divide) { k->divide(src[0], n, by); ndst = 1; dst[0] = src[0]; }
        if (k->reduce) ON_GRID(k->reduce(p, nsrc, ndst, n, by));
    }
    f = fopen(argv[10], "wb");
    for (int d = 0; d < ndst; d++) fwrite(dst[d], es, n, f);
    return fclose(f) != 0;
}
`

// cTypes are the C element types of FoldTypes.
var cTypes = map[string]string{"i8": "signed char", "u8": "unsigned char", "i32": "int", "u32": "unsigned int",
	"i64": "long long", "u64": "unsigned long long", "f16": "unsigned short", "bf16": "unsigned short", "f32": "float", "f64": "double"}

// cpuKernels builds reduce.cu with the shim and a table of its kernels into
// a program for the CPU, with the address and undefined-behaviour
// sanitizers where the compiler has them (a signed overflow or a read past
// an array ends the program), or skips t
// where no C++ compiler is installed ($CXX, g++ or clang++).
func cpuKernels(t *testing.T) string {
	t.Helper()
	var cxx string
	for _, name := range []string{os.Getenv("CXX"), "g++", "clang++"} {
		if p, err := exec.LookPath(name); name != "" && err == nil {
			cxx = p
			break
		}
	}
	if cxx == "" {
		t.Skip("no C++ compiler ($CXX, g++, clang++) to build reduce.cu for the CPU")
	}
	src, err := kernels.Sources.ReadFile("reduce.cu") // embedded: the test binary may run far from its sources (the GPU machine)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(cpuShim)
	b.Write(src)
	b.WriteString("\nstruct kernel { const char *name; size_t es; void (*fold)(void *, const void *, long long);" +
		" void (*divide)(void *, long long, long long); void (*reduce)(rank_ptrs, int, int, long long, long long); };\n")
	var table []string
	for _, typ := range kernels.FoldTypes {
		ct := cTypes[typ]
		fmt.Fprintf(&b, "static void w_divide_%s(void *a, long long n, long long by) { ON_GRID(divide_%s((%s *)a, n, by)); }\n", typ, typ, ct)
		table = append(table, fmt.Sprintf(`{"divide_%s", sizeof(%s), 0, w_divide_%s, 0}`, typ, ct, typ))
		for _, op := range kernels.FoldOps {
			k := typ + "_" + op
			fmt.Fprintf(&b, "static void w_fold_%s(void *a, const void *s, long long n) { ON_GRID(fold_%s((%s *)a, (const %s *)s, n)); }\n", k, k, ct, ct)
			table = append(table, fmt.Sprintf(`{"fold_%s", sizeof(%s), w_fold_%s, 0, 0}`, k, ct, k),
				fmt.Sprintf(`{"reduce_%s", sizeof(%s), 0, 0, reduce_%s}`, k, ct, k))
		}
	}
	fmt.Fprintf(&b, "static const struct kernel kernels[] = {\n%s,\n{0, 0, 0, 0, 0}};\n", strings.Join(table, ",\n"))
	b.WriteString(cpuMain)
	dir := t.TempDir()
	cpp, exe := filepath.Join(dir, "reduce.cpp"), filepath.Join(dir, "reduce")
	if err := os.WriteFile(cpp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// -ffp-contract=off: no fused multiply-add, as NVRTC's --fmad=false.
	args := []string{"-std=c++17", "-O1", "-ffp-contract=off", "-Wno-unknown-pragmas", "-o", exe, cpp}
	sanitize := []string{"-fsanitize=address,undefined", "-fno-sanitize-recover=all"}
	out, err := exec.Command(cxx, append(sanitize, args...)...).CombinedOutput()
	if err != nil {
		t.Logf("%s with the address and undefined-behaviour sanitizers: %v; without them", cxx, err)
		out, err = exec.Command(cxx, args...).CombinedOutput()
	}
	if err != nil {
		t.Fatalf("%s on reduce.cu with the CPU shim: %v\n%s", cxx, err, out)
	}
	return exe
}

// The kernels of reduce.cu, built for the CPU (where a C++ compiler is):
// every fold, divide and reduce kernel gives, byte for byte, what
// comm/driver's ReduceInto and DivideInto give, as on a GPU in
// TestFoldKernelsMatchTheHostReferenceOnAGPU and
// TestReduceKernelsMatchTheHostReferenceOnAGPU (NaNs matching any NaN, as
// there). What it cannot show is
// that NVRTC builds them and the GPU rounds as IEEE says: those two can.
func TestReduceCUMatchesTheHostReferenceOnTheCPU(t *testing.T) {
	exe := cpuKernels(t)
	dir := t.TempDir()
	const n = 10_007
	rng := rand.New(rand.NewPCG(22, 6))
	// run runs kernel name on the CPU over srcs, placed srcOff elements past
	// a 16-byte boundary (destinations dstOff), and returns its outputs.
	run := func(name string, es, by, ndst int, inPlace bool, srcOff, dstOff int, srcs ...[]byte) [][]byte {
		t.Helper()
		n := len(srcs[0]) / es
		in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
		if err := os.WriteFile(in, bytes.Join(srcs, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(out)
		msg, err := exec.Command(exe, name, fmt.Sprint(n), fmt.Sprint(by), fmt.Sprint(len(srcs)), fmt.Sprint(ndst),
			fmt.Sprint(b2i(inPlace)), fmt.Sprint(srcOff), fmt.Sprint(dstOff), in, out).CombinedOutput()
		if err != nil {
			t.Fatalf("%s on the CPU: %v\n%s", name, err, msg)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var outs [][]byte
		for d := 0; d < ndst; d++ {
			if (d+1)*n*es > len(got) {
				break
			}
			outs = append(outs, got[d*n*es:(d+1)*n*es])
		}
		return outs
	}
	for _, typ := range kernels.FoldTypes {
		es := dtypeOf[typ].Size()
		for _, opName := range kernels.FoldOps {
			acc, src := randomInput(rng, typ, n), randomInput(rng, typ, n)
			compare(t, "fold_"+typ+"_"+opName, run("fold_"+typ+"_"+opName, es, 0, 1, false, 0, 0, acc, src)[0], hostReduce(t, typ, opName, 0, acc, src), es)
			srcs := [][]byte{randomInput(rng, typ, n), randomInput(rng, typ, n), randomInput(rng, typ, n)}
			want := hostReduce(t, typ, opName, 0, srcs...)
			// Aligned (16 bytes at a time, then the tail), one element
			// off (element by element), and the sources aligned but the
			// destination not (element by element).
			for _, off := range [][2]int{{0, 0}, {1, 1}, {0, 1}} {
				outs := run("reduce_"+typ+"_"+opName, es, 0, 2, true, off[0], off[1], srcs...)
				if len(outs) != 2 {
					t.Fatalf("reduce_%s_%s: %d outputs, want 2", typ, opName, len(outs))
				}
				for d, got := range outs {
					compare(t, fmt.Sprintf("reduce_%s_%s, 3 sources at %d, destination %d of 2 at %d (the last in place)", typ, opName, off[0], d, off[1]), got, want, es)
				}
			}
		}
		acc := randomInput(rng, typ, n)
		compare(t, "divide_"+typ, run("divide_"+typ, es, 3, 1, false, 0, 0, acc)[0], hostReduce(t, typ, "sum", 3, acc), es)
		srcs := make([][]byte, kernels.MaxReduceRanks)
		for q := range srcs {
			srcs[q] = randomInput(rng, typ, n)
		}
		want := hostReduce(t, typ, "sum", kernels.MaxReduceRanks, srcs...)
		outs := run("reduce_"+typ+"_sum", es, kernels.MaxReduceRanks, kernels.MaxReduceRanks, false, 0, 0, srcs...)
		if len(outs) != kernels.MaxReduceRanks {
			t.Fatalf("reduce_%s_sum: %d outputs, want %d", typ, len(outs), kernels.MaxReduceRanks)
		}
		for d, got := range outs {
			compare(t, fmt.Sprintf("reduce_%s_sum, %d sources averaged, destination %d", typ, kernels.MaxReduceRanks, d), got, want, es)
		}
		// Fewer elements than 16 bytes hold (no 16-byte step), and a
		// whole number of 16 bytes (no tail), aligned and not.
		for _, m := range []int{3, 64} {
			srcs := [][]byte{randomInput(rng, typ, m), randomInput(rng, typ, m)}
			want := hostReduce(t, typ, "max", 0, srcs...)
			for _, off := range []int{0, 1} {
				outs := run("reduce_"+typ+"_max", es, 0, 2, false, off, off, srcs...)
				if len(outs) != 2 {
					t.Fatalf("reduce_%s_max of %d: %d outputs, want 2", typ, m, len(outs))
				}
				for d, got := range outs {
					compare(t, fmt.Sprintf("reduce_%s_max of %d elements at %d, destination %d", typ, m, off, d), got, want, es)
				}
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
