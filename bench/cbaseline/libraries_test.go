//go:build cgo

package cbaseline

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// fakeCUDA is a driver whose calls check what the NCCL loop hands them.
// Its cuEventElapsedTime_v2 says 1.5 ms and the unversioned one 9 ms: the
// loop must call the one internal/cuda chose.
const fakeCUDA = `
#include <stdint.h>
int cuInit(unsigned f) { return 0; }
int cuDriverGetVersion(int *v) { *v = 12345; return 0; }
int cuDeviceGet(int *d, int ordinal) { *d = 40 + ordinal; return 0; }
int cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)(uintptr_t)(0xC000 + d); return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { return d == 40 ? 0 : 101; }
int cuCtxSetCurrent(void *c) { return c == (void *)0xC028 ? 0 : 201; }
int cuStreamCreate(void **s, unsigned flags) { *s = (void *)0x5eed; return flags == 1 ? 0 : 1; }
int cuStreamSynchronize(void *s) { return s == (void *)0x5eed ? 0 : 400; }
int cuStreamDestroy_v2(void *s) { return s == (void *)0x5eed ? 0 : 400; }
static uintptr_t next_event = 0xE000;
int cuEventCreate(void **e, unsigned f) { *e = (void *)next_event++; return 0; }
int cuEventRecord(void *e, void *s) { return s == (void *)0x5eed ? 0 : 400; }
int cuEventElapsedTime_v2(float *ms, void *a, void *b) { *ms = 1.5f; return 0; }
int cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 9.0f; return 0; }
int cuEventDestroy_v2(void *e) { return 0; }
int cuGetErrorString(int r, const char **s) { *s = "fake CUDA error"; return 0; }
`

// fakeNCCL moves float32 data for a one-rank communicator on the fake
// driver's stream, and refuses anything else with ncclInvalidArgument (4).
const fakeNCCL = `
#include <stddef.h>
#include <stdint.h>
#include <string.h>
typedef struct { unsigned char b[128]; } Id;
#define COMM ((void *)0xCAFE)
#define STREAM ((void *)0x5eed)
int ncclGetVersion(int *v) { *v = 22803; return 0; }
const char *ncclGetErrorString(int r) { return "fake NCCL error"; }
int ncclGetUniqueId(Id *id) { for (int i = 0; i < 128; i++) id->b[i] = (unsigned char)(7 * i + 3); return 0; }
int ncclCommInitRank(void **c, int n, Id id, int rank) {
	for (int i = 0; i < 128; i++) if (id.b[i] != (unsigned char)(7 * i + 3)) return 4;
	*c = COMM;
	return n == 1 && rank == 0 ? 0 : 4;
}
int ncclCommDestroy(void *c) { return c == COMM ? 0 : 4; }
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, void *c, void *st) {
	if (c != COMM || st != STREAM) return 5;
	if (n == 1 && dt == 1 && op == 2) return 0; /* the loop's barrier: uint8 max */
	if (dt != 7 || op != 0) return 4;           /* float32 sum only */
	memmove(r, s, n * 4);
	return 0;
}
static int p2p(size_t n, int dt, int peer, void *c, void *st) {
	return c == COMM && st == STREAM && peer == 0 && (dt == 7 || (dt == 1 && n == 1)) ? 0 : 4;
}
int ncclSend(const void *s, size_t n, int dt, int peer, void *c, void *st) { return p2p(n, dt, peer, c, st); }
int ncclRecv(void *r, size_t n, int dt, int peer, void *c, void *st) { return p2p(n, dt, peer, c, st); }
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
`

// libChildEnv selects the case a child process of
// TestNCCLLoopCallsTheLoadersLibraries runs in TestLibraryChild.
const libChildEnv = "GPUCOMM_CBASELINE_LIB_CHILD"

// loaderNames are the symbol names a loader's table (the Go file at path)
// resolves: quoted C identifiers that start with prefix.
func loaderNames(t *testing.T, path, prefix string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("the loader's source is not here (a test binary run away from its tree): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`"(`+prefix+`[A-Z]\w*)"`).FindAllStringSubmatch(string(src), -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("%s: only %d %s... names found; has the loader's table moved?", path, len(names), prefix)
	}
	return names
}

// buildFakeLib builds src as name, with a stub for every other symbol its
// loader resolves, so that the loader accepts it.
func buildFakeLib(t *testing.T, name, src string, loaderNames []string) string {
	t.Helper()
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(?:int|const char \*) ?(\w+)\(`).FindAllStringSubmatch(src, -1) {
		defined[m[1]] = true
	}
	var b strings.Builder
	b.WriteString(src)
	for _, n := range loaderNames {
		if !defined[n] {
			defined[n] = true
			fmt.Fprintf(&b, "int %s(void) { return 0; }\n", n)
		}
	}
	return dltest.BuildLib(t, name, b.String())
}

// TestNCCLLoopCallsTheLoadersLibraries runs each case in a process of its
// own (the loaders keep what they loaded): with GPUCOMM_CUDA_LIB or
// GPUCOMM_NCCL_LIB naming a file that is not there, the loop fails with
// ErrLibraryNotFound naming that file; with both naming fakes, the loop
// reports the files gpucomm's loaders loaded and runs on their functions.
func TestNCCLLoopCallsTheLoadersLibraries(t *testing.T) {
	if os.Getenv(libChildEnv) != "" {
		t.Skip("in a child")
	}
	fakeC := buildFakeLib(t, "libcuda.so.1", fakeCUDA, loaderNames(t, "../../internal/cuda/cuda_cgo.go", "cu"))
	fakeN := buildFakeLib(t, "libnccl.so.2", fakeNCCL, loaderNames(t, "../../internal/nccl/nccl_cgo.go", "nccl"))
	missing := filepath.Join(t.TempDir(), "nowhere")
	for _, c := range []struct{ name, cudaLib, ncclLib string }{
		{"cuda-missing", filepath.Join(missing, "libcuda.so.1"), fakeN},
		{"nccl-missing", fakeC, filepath.Join(missing, "libnccl.so.2")},
		{"fakes", fakeC, fakeN},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestLibraryChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), libChildEnv+"="+c.name, cuda.EnvLib+"="+c.cudaLib, nccl.EnvLib+"="+c.ncclLib)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestLibraryChild") {
				t.Errorf("child %s: %v\n%s", c.name, err, out)
			}
		})
	}
}

func TestLibraryChild(t *testing.T) {
	switch os.Getenv(libChildEnv) {
	case "":
		t.Skip("runs in a child of TestNCCLLoopCallsTheLoadersLibraries")
	case "cuda-missing":
		failsNaming(t, os.Getenv(cuda.EnvLib))
	case "nccl-missing":
		failsNaming(t, os.Getenv(nccl.EnvLib))
	case "fakes":
		runsOnFakes(t)
	default:
		t.Fatalf("unknown case %q", os.Getenv(libChildEnv))
	}
}

// failsNaming checks that every way into the NCCL loop fails with
// ErrLibraryNotFound naming the missing file.
func failsNaming(t *testing.T, file string) {
	_, err := NCCLUniqueID()
	_, err2 := NewNCCL(0, 1, 0, [NCCLIDSize]byte{})
	_, _, err3 := Libraries()
	for i, err := range []error{err, err2, err3} {
		if !errors.Is(err, comm.ErrLibraryNotFound) || !strings.Contains(fmt.Sprint(err), file) {
			t.Errorf("call %d: %v; want ErrLibraryNotFound naming %s", i, err, file)
		}
	}
}

func runsOnFakes(t *testing.T) {
	nFile, cFile, err := Libraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ got, env string }{{nFile, nccl.EnvLib}, {cFile, cuda.EnvLib}} {
		a, errA := os.Stat(f.got)
		b, errB := os.Stat(os.Getenv(f.env))
		if errA != nil || errB != nil || !os.SameFile(a, b) {
			t.Errorf("the loop's library %q is not %s=%q (%v, %v)", f.got, f.env, os.Getenv(f.env), errA, errB)
		}
	}
	// The backend's loaders loaded the same fakes.
	if major, minor, patch, err := nccl.Version(); err != nil || major != 2 || minor != 28 || patch != 3 {
		t.Errorf("internal/nccl loaded NCCL %d.%d.%d (%v), want the fake's 2.28.3", major, minor, patch, err)
	}
	if v, err := cuda.DriverVersion(); err != nil || v != 12345 {
		t.Errorf("internal/cuda loaded driver %d (%v), want the fake's 12345", v, err)
	}
	// The loaders give out only what their tables resolve.
	if _, _, err := nccl.Symbols("ncclGetUniqueId", "ncclNoSuchCall"); !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "ncclNoSuchCall") {
		t.Errorf("nccl.Symbols of a name its loader does not resolve: %v, want ErrInvalidArgument naming it", err)
	}
	if _, _, err := cuda.Symbols("cuNoSuchCall"); !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "cuNoSuchCall") {
		t.Errorf("cuda.Symbols of a call its loader does not resolve: %v, want ErrInvalidArgument naming it", err)
	}
	id, err := NCCLUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range id {
		if b != byte(7*i+3) {
			t.Fatalf("id byte %d is %d: not the fake's ncclGetUniqueId", i, b)
		}
	}
	n, err := NewNCCL(0, 1, 0, id)
	if err != nil {
		t.Fatal(err)
	}
	const c = 1000
	dev := devmem.NewHostDevice()
	send, err := devmem.AllocSlice[float32](dev, c)
	if err != nil {
		t.Fatal(err)
	}
	defer send.Free()
	recv, err := devmem.AllocSlice[float32](dev, c)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Free()
	rng := rand.New(rand.NewPCG(6, 18))
	in := make([]float32, c)
	for i := range in {
		in[i] = rng.Float32()
	}
	if err := send.CopyFrom(in, nil); err != nil {
		t.Fatal(err)
	}
	if err := devmem.Memset(recv.Buffer(), 0xFF, nil); err != nil { // NaNs
		t.Fatal(err)
	}
	a := Args{Send: send.Buffer().Addr(), Recv: recv.Buffer().Addr(), Count: c, DType: comm.Float32, Op: comm.Sum,
		Peer: 0, Initiator: true, Window: 4, Warmup: 2}
	for _, tc := range []struct {
		coll Coll
		want float64 // seconds per iteration: the fake's 1.5 ms per pair of events, shared as the loop shares it
	}{{AllReduce, 1.5e-3}, {PingPong, 0.75e-3}, {Bandwidth, 1.5e-3 / 4}} {
		times := make([]float64, 3)
		if err := n.Run(tc.coll, a, times); err != nil {
			t.Fatalf("%v: %v", tc.coll, err)
		}
		for i, v := range times {
			if d := v - tc.want; d > 1e-9 || d < -1e-9 {
				t.Errorf("%v: time %d is %g s, want %g (cuEventElapsedTime_v2's)", tc.coll, i, v, tc.want)
			}
		}
	}
	got, err := recv.ToHost(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != in[i] {
			t.Fatalf("allreduce: element %d is %v, want %v", i, got[i], in[i])
		}
	}
	a.DType = comm.Int32
	if err := n.Run(AllReduce, a, make([]float64, 1)); err == nil || !strings.Contains(err.Error(), "fake NCCL error (NCCL error 4)") {
		t.Errorf("an allreduce the fake refuses: %v, want its error text", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}
