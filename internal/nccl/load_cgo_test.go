//go:build cgo

package nccl

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/dl/dltest"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// fakeNCCL checks that arguments arrive intact; its version is the macro
// FAKE_VERSION. Symbols Load needs that it does not define become stubs.
const fakeNCCL = `
#include <stddef.h>
#include <stdint.h>
typedef struct { unsigned char b[128]; } Id;
typedef struct { size_t size; unsigned magic; unsigned version; int blocking; } Config;
int ncclGetVersion(int* v) { *v = FAKE_VERSION; return 0; }
const char* ncclGetErrorString(int r) { return r == 4 ? "invalid argument (run with NCCL_DEBUG=WARN for details)" : "unhandled error"; }
const char* ncclGetLastError(void* comm) { return comm ? "fake: odd count" : "fake: no comm"; }
int ncclGetUniqueId(Id* id) { for (int i = 0; i < 128; i++) id->b[i] = (unsigned char)(255 - i); return 0; }
static int idOK(Id id) { for (int i = 0; i < 128; i++) if (id.b[i] != (unsigned char)(255 - i)) return 0; return 1; }
int ncclCommInitRank(void** c, int n, Id id, int rank) {
	if (!idOK(id)) return 4;
	*c = (void*)(uintptr_t)(0x1000 + 16 * rank + n);
	return 0;
}
int ncclCommInitRankConfig(void** c, int n, Id id, int rank, Config* cfg) {
	if (!idOK(id) || cfg->magic != 0xcafebeef || cfg->size != sizeof(Config) || cfg->version != 21400) return 4;
	*c = (void*)(uintptr_t)(0x2000 + cfg->blocking);
	return cfg->blocking ? 0 : 7; /* non-blocking: ncclInProgress */
}
int ncclCommCount(void* c, int* n) { *n = 4; return 0; }
int ncclCommCuDevice(void* c, int* d) { *d = 1; return 0; }
int ncclCommUserRank(void* c, int* r) { *r = 2; return 0; }
int ncclCommGetAsyncError(void* c, int* r) { *r = 7; return 0; }
int ncclAllReduce(const void* s, void* r, size_t n, int dt, int op, void* comm, void* stream) {
	if (n % 2) return 4;
	return (s == (void*)0x10 && r == (void*)0x20 && n == 6 && dt == 7 && op == 4 && comm == (void*)0x1042 && stream == (void*)0x5001) ? 0 : 5;
}
int ncclSend(const void* s, size_t n, int dt, int peer, void* comm, void* stream) {
	return (s == (void*)0x10 && n == 3 && dt == 9 && peer == 1 && comm == (void*)0x1042 && stream == (void*)0) ? 0 : 5;
}
`

var definedRE = regexp.MustCompile(`(?m)^(?:int|const char\*) (\w+)\(`)

var libnccl = dltest.Library{Env: EnvLib, File: "libnccl.so.2", Defaults: []string{"libnccl.so.2", "libnccl.so"}, Reset: reset, Load: Load}

// buildFake builds a libnccl of the given version; names in omit are neither
// defined nor stubbed.
func buildFake(t *testing.T, version int, omit ...string) string {
	t.Helper()
	src := fakeNCCL
	for _, n := range omit {
		src = regexp.MustCompile(`(?m)^(int|const char\*) `+n+`\(`).ReplaceAllString(src, "static $1 unused_"+n+"(")
	}
	names := make([]string, len(symbols))
	for i, s := range symbols {
		names[i] = s.name
	}
	return libnccl.Build(t, dltest.WithStubs(src, definedRE, "int %s(void) { return 0; }\n", names, omit...),
		fmt.Sprintf("-DFAKE_VERSION=%d", version), "-Wno-unused-function")
}

func TestSymbolTableCoversEverySlotOnce(t *testing.T) {
	slots := make([]int, len(symbols))
	for i, s := range symbols {
		slots[i] = int(s.slot)
	}
	dltest.EverySlotOnce(t, slots, int(kCount))
}

func TestLoadWithLibraryAbsentWrapsErrLibraryNotFound(t *testing.T) {
	libnccl.CheckMissingFile(t, func() error { _, err := GetUniqueID(); return err })
	libnccl.CheckDefaultsAbsent(t)
}

func TestLoadNamesMissingRequiredSymbols(t *testing.T) {
	libnccl.Use(t, buildFake(t, 21903, "ncclAllReduce"))
	err := Load()
	if !errors.Is(err, errs.ErrLibraryNotFound) || !strings.Contains(err.Error(), "ncclAllReduce") {
		t.Fatalf("Load = %v, want ErrLibraryNotFound naming ncclAllReduce", err)
	}
}

func TestLoadRefusesOldNCCL(t *testing.T) {
	for version, shown := range map[int]string{21104: "2.11.4", 2804: "2.8.4"} {
		libnccl.Use(t, buildFake(t, version))
		err := Load()
		if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), shown) {
			t.Errorf("Load of NCCL %s = %v, want ErrUnsupported naming the version", shown, err)
		}
	}
	libnccl.Use(t, buildFake(t, MinVersion))
	if major, minor, patch, err := Version(); err != nil || major != 2 || minor != 12 || patch != 0 {
		t.Errorf("Version of the oldest accepted NCCL = %d.%d.%d, %v", major, minor, patch, err)
	}
}

func TestOptionalSymbolsReportUnsupported(t *testing.T) {
	libnccl.Use(t, buildFake(t, 21903, "ncclCommSplit", "ncclCommFinalize", "ncclCommInitRankConfig", "ncclGetLastError"))
	if err := Load(); err != nil {
		t.Fatalf("Load without optional symbols: %v", err)
	}
	if _, err := CommSplit(1, 0, 0); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "ncclCommSplit") {
		t.Errorf("CommSplit = %v, want ErrUnsupported naming it", err)
	}
	if err := CommFinalize(1); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("CommFinalize = %v, want ErrUnsupported", err)
	}
	if _, err := CommInitRankConfig(2, UniqueID{}, 0, Config{}); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("CommInitRankConfig = %v, want ErrUnsupported", err)
	}
	// Without ncclGetLastError errors still name the call.
	err := AllReduce(0, 0x10, 0x20, 3, Float32, Avg, 0x1042, 0x5001)
	if !IsCode(err, InvalidArgument) || strings.Contains(err.Error(), "fake:") {
		t.Errorf("AllReduce = %v, want ncclInvalidArgument without detail", err)
	}
}

func TestCallsCarryArgumentsAndResults(t *testing.T) {
	libnccl.Use(t, buildFake(t, 22703))
	if major, minor, patch, err := Version(); err != nil || major != 2 || minor != 27 || patch != 3 {
		t.Fatalf("Version = %d.%d.%d, %v", major, minor, patch, err)
	}
	id, err := GetUniqueID()
	if err != nil || id[0] != 255 || id[127] != 128 {
		t.Fatalf("GetUniqueID = %x, %v", id[:4], err)
	}
	comm, err := CommInitRank(2, id, 4)
	if err != nil || comm != 0x1042 {
		t.Fatalf("CommInitRank = %#x, %v (the id travels by value)", comm, err)
	}
	bad := id
	bad[64]++
	if _, err := CommInitRank(2, bad, 4); !IsCode(err, InvalidArgument) {
		t.Errorf("CommInitRank with a corrupt id = %v", err)
	}
	if c, err := CommInitRankConfig(2, id, 0, Config{}); err != nil || c != 0x2001 {
		t.Errorf("CommInitRankConfig(blocking) = %#x, %v", c, err)
	}
	c, err := CommInitRankConfig(2, id, 0, Config{NonBlocking: true})
	if err != nil || c != 0x2000 {
		t.Errorf("CommInitRankConfig(non-blocking) = %#x, %v; ncclInProgress is not an error", c, err)
	}
	if r, err := CommGetAsyncError(c); err != nil || r != InProgress {
		t.Errorf("CommGetAsyncError = %v, %v", r, err)
	}
	for name, f := range map[string]func(Comm) (int, error){"CommCount": CommCount, "CommCuDevice": CommCuDevice, "CommUserRank": CommUserRank} {
		want := map[string]int{"CommCount": 4, "CommCuDevice": 1, "CommUserRank": 2}[name]
		if got, err := f(comm); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", name, got, err, want)
		}
	}

	if err := AllReduce(0, 0x10, 0x20, 6, Float32, Avg, comm, cuda.Stream(0x5001)); err != nil {
		t.Errorf("AllReduce: %v", err)
	}
	err = AllReduce(0, 0x10, 0x20, 3, Float32, Avg, comm, 0x5001)
	for _, want := range []string{"ncclAllReduce", "ncclInvalidArgument", "NCCL_DEBUG=WARN", "fake: odd count"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("AllReduce error %v lacks %q", err, want)
		}
	}
	if !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("AllReduce error does not wrap ErrInvalidArgument")
	}
	if err := AllReduce(0, 0x10, 0x20, -1, Float32, Sum, comm, 0); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("AllReduce(count -1) = %v", err)
	}
	// A context to make current needs CUDA's cuCtxGetCurrent/SetCurrent:
	// without a CUDA library the call says so and NCCL is not called.
	if cuda.Load() != nil {
		err := AllReduce(0x77, 0x10, 0x20, 6, Float32, Avg, comm, 0x5001)
		if err == nil || !strings.Contains(err.Error(), "making a CUDA context current") {
			t.Errorf("AllReduce(ctx, ...) without CUDA = %v, want an error about the context", err)
		}
	}
	if err := Send(0x10, 3, Bfloat16, 1, comm, 0); err != nil {
		t.Errorf("Send: %v", err)
	}
	for name, err := range map[string]error{
		"GroupStart": GroupStart(), "GroupEnd": GroupEnd(), "CommFinalize": CommFinalize(comm),
		"CommDestroy": CommDestroy(comm), "CommAbort": CommAbort(comm),
		"Reduce":        Reduce(0, 1, 2, 3, Int8, Max, 0, comm, 0),
		"Broadcast":     Broadcast(0, 1, 2, 3, Int64, 0, comm, 0),
		"AllGather":     AllGather(0, 1, 2, 3, Uint8, comm, 0),
		"ReduceScatter": ReduceScatter(0, 1, 2, 3, Float16, Min, comm, 0),
		"Recv":          Recv(2, 3, Int32, 0, comm, 0),
	} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := CommSplit(comm, SplitNoColor, 0); err != nil {
		t.Errorf("CommSplit: %v", err)
	}
}
