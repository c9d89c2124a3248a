package kernels

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// reduce.cu defines its kernels through macros, which
// TestLaunchArgumentsMatchTheKernelSignatures does not read: this test
// expands them. Every FoldTypes × FoldOps fold and every FoldTypes divide
// is instantiated once, each macro's parameters are what the launchers
// pass, and nothing else is instantiated.
func TestReduceLaunchesMatchTheMacros(t *testing.T) {
	src, err := sources.ReadFile("reduce.cu")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	defined := map[string]int{}
	inst := regexp.MustCompile(`(?m)^(INT_FOLDS|FLOAT_FOLDS|NARROW_FOLDS|DIVIDE|REDUCES)\((\w+)`)
	for _, m := range inst.FindAllStringSubmatch(text, -1) {
		if m[1] == "REDUCES" {
			for _, op := range FoldOps {
				defined["reduce_"+m[2]+"_"+op]++
			}
			continue
		}
		if strings.HasPrefix(m[1], "DIVIDE") {
			defined["divide_"+m[2]]++
			continue
		}
		for _, op := range FoldOps {
			defined["fold_"+m[2]+"_"+op]++
		}
	}
	for _, sig := range []string{
		`#define FOLD(NAME, T, F) \` + "\n" + `    extern "C" __global__ void fold_##NAME(T *acc, const T *src, long long n)`,
		`extern "C" __global__ void fold_##NAME(unsigned short *acc, const unsigned short *src, long long n)`,
		`extern "C" __global__ void divide_##NAME(T *acc, long long n, long long by)`,
		`extern "C" __global__ void reduce_##TYPE##_##OP(rank_ptrs p, int nsrc, int ndst, long long n, long long by)`,
		`struct rank_ptrs { const void *src[MAX_RANKS]; void *dst[MAX_RANKS]; };`,
		fmt.Sprintf("#define MAX_RANKS %d\n", MaxReduceRanks),
		`REDUCE(TYPE, sum, T, SUM, VEC) REDUCE(TYPE, prod, T, PROD, VEC) REDUCE(TYPE, min, T, MIN, VEC) REDUCE(TYPE, max, T, MAX, VEC)`,
	} {
		if !strings.Contains(text, sig) {
			t.Errorf("reduce.cu no longer has %q, whose parameters the launchers follow", sig)
		}
	}
	_, a, b := hostPair(t)
	seen := map[string]bool{}
	check := func(l launch, want string) {
		t.Helper()
		var got []string
		for _, x := range l.args {
			got = append(got, goType(x))
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s: Go passes (%s), C takes (%s)", l.kernel, strings.Join(got, ","), want)
		}
		if defined[l.kernel] != 1 {
			t.Errorf("%s is instantiated %d times in reduce.cu, want once", l.kernel, defined[l.kernel])
		}
		if cover := int(l.grid[0]) * int(l.block[0]); cover < 8 {
			t.Errorf("%s: grid covers %d threads", l.kernel, cover)
		}
		seen[l.kernel] = true
	}
	for _, typ := range FoldTypes {
		for _, op := range FoldOps {
			check(foldLaunch(typ, op, a, b, 8), "pointer,pointer,int64")
		}
		check(divideLaunch(typ, a, 8, 3), "pointer,int64,int64")
		for _, op := range FoldOps {
			l := reduceLaunch(typ, op, []devmem.Buffer{a}, []devmem.Buffer{b, a}, 8, 2)
			check(l, fmt.Sprintf("[%d]uint64,int32,int32,int64,int64", 2*MaxReduceRanks))
			// The table: sources from slot 0, destinations from slot
			// MAX_RANKS, the rest zero; then the counts.
			table := l.args[0].([2 * MaxReduceRanks]uint64)
			want := [2 * MaxReduceRanks]uint64{0: uint64(b.Addr()), 1: uint64(a.Addr()), MaxReduceRanks: uint64(a.Addr())}
			if table != want || l.args[1] != int32(2) || l.args[2] != int32(1) || l.args[3] != int64(8) || l.args[4] != int64(2) {
				t.Errorf("%s: arguments %v, want table %v, 2 sources, 1 destination, 8 elements, by 2", l.kernel, l.args, want)
			}
		}
	}
	// Which types have the 16-byte path: reduce.cu's VEC, Go's grid.
	vec := regexp.MustCompile(`(?m)^REDUCES\((\w+), [\w ]+, ([01]),`)
	vecs := vec.FindAllStringSubmatch(text, -1)
	if len(vecs) != len(FoldTypes) {
		t.Errorf("%d REDUCES lines with a VEC flag, want %d", len(vecs), len(FoldTypes))
	}
	for _, m := range vecs {
		if m[2] != "1" {
			t.Errorf("reduce.cu gives %s VEC %s; reduceLaunch's grid counts on the 16-byte path for every type", m[1], m[2])
		}
	}
	for k := range defined {
		if !seen[k] {
			t.Errorf("reduce.cu instantiates %s, which no launcher calls", k)
		}
	}
}

// Bad arguments are refused before anything runs, and the host device is
// told to fold on the host.
func TestFoldRefusesBadArgumentsAndTheHostDevice(t *testing.T) {
	_, a, b := hostPair(t)
	for _, err := range []error{
		Fold(nil, "f128", "sum", a, b, 2), Fold(nil, "f32", "avg", a, b, 2), Fold(nil, "f32", "sum", a, b, -1),
		Fold(nil, "f64", "sum", a, b, 9), Divide(nil, "i32", a, 4, 0), Divide(nil, "x", a, 4, 2),
	} {
		if !errors.Is(err, devmem.ErrInvalidArgument) {
			t.Errorf("bad arguments: %v, want ErrInvalidArgument", err)
		}
	}
	if err := Fold(nil, "f32", "sum", a, b, 16); !errors.Is(err, devmem.ErrUnsupported) {
		t.Errorf("Fold on the host device: %v, want ErrUnsupported", err)
	}
	if err := Divide(nil, "bf16", a, 32, 2); !errors.Is(err, devmem.ErrUnsupported) {
		t.Errorf("Divide on the host device: %v, want ErrUnsupported", err)
	}
}

// Reduce refuses bad arguments before anything runs (among them a buffer
// too small, freed or of another device, and more ranks than its table
// holds), and the host device.
func TestReduceRefusesBadArgumentsAndTheHostDevice(t *testing.T) {
	d, a, b := hostPair(t)
	freed, _ := d.Alloc(64)
	freed.Free()
	other, _ := devmem.NewHostDevice().Alloc(64)
	defer other.Free()
	one := []devmem.Buffer{a}
	many := make([]devmem.Buffer, MaxReduceRanks+1)
	for i := range many {
		many[i] = b
	}
	for name, err := range map[string]error{
		"type":                  Reduce(nil, "f128", "sum", one, one, 2, 0),
		"op":                    Reduce(nil, "f32", "avg", one, one, 2, 0),
		"negative count":        Reduce(nil, "f32", "sum", one, one, -1, 0),
		"negative divisor":      Reduce(nil, "f32", "sum", one, one, 2, -1),
		"no source":             Reduce(nil, "f32", "sum", one, nil, 2, 0),
		"no destination":        Reduce(nil, "f32", "sum", nil, one, 2, 0),
		"too many sources":      Reduce(nil, "f32", "sum", one, many, 2, 0),
		"too many destinations": Reduce(nil, "f32", "sum", many, one, 2, 0),
		"small source":          Reduce(nil, "f64", "sum", one, []devmem.Buffer{a, b}, 9, 0),
		"small destination":     Reduce(nil, "i32", "max", []devmem.Buffer{b, a}, one, 17, 0),
		"freed source":          Reduce(nil, "u8", "min", one, []devmem.Buffer{b, freed}, 4, 0),
		"other device":          Reduce(nil, "u8", "min", []devmem.Buffer{other}, one, 4, 0),
		"ready type":            ReduceReady(d, "x", "sum"),
	} {
		if !errors.Is(err, devmem.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := Reduce(nil, "bf16", "prod", []devmem.Buffer{a, b}, []devmem.Buffer{b}, 32, 3); !errors.Is(err, devmem.ErrUnsupported) {
		t.Errorf("Reduce on the host device: %v, want ErrUnsupported", err)
	}
	if err := ReduceReady(d, "f32", "sum"); !errors.Is(err, devmem.ErrUnsupported) {
		t.Errorf("ReduceReady on the host device: %v, want ErrUnsupported", err)
	}
}

// hostPair is two 64-byte buffers of a new host device, freed when t ends.
func hostPair(t *testing.T) (d *devmem.Device, a, b devmem.Buffer) {
	t.Helper()
	d = devmem.NewHostDevice()
	a, _ = d.Alloc(64)
	b, _ = d.Alloc(64)
	t.Cleanup(func() {
		a.Free()
		b.Free()
	})
	return d, a, b
}

// Reduce's grid has a thread for each 16 bytes where every buffer starts on
// 16 bytes and the type has the kernel's 16-byte path, else a thread an
// element.
func TestReduceGridFollowsTheAlignment(t *testing.T) {
	d := devmem.NewHostDevice()
	whole, err := d.Alloc(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Free()
	if whole.Addr()%16 != 0 {
		t.Fatalf("a host allocation at %#x", whole.Addr())
	}
	at := func(off int) devmem.Buffer {
		b, err := whole.Slice(off, 1<<14)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const n = 4096 // float32s: 1024 threads of 16 bytes, 4096 of one element
	for _, tc := range []struct {
		name   string
		srcs   []devmem.Buffer
		dsts   []devmem.Buffer
		blocks uint32
	}{
		{"aligned", []devmem.Buffer{at(0), at(1 << 14)}, []devmem.Buffer{at(2 << 14)}, 1024 / flatThreads},
		{"a source off", []devmem.Buffer{at(0), at(4)}, []devmem.Buffer{at(2 << 14)}, 4096 / flatThreads},
		{"the destination off", []devmem.Buffer{at(0), at(1 << 14)}, []devmem.Buffer{at(8)}, 4096 / flatThreads},
	} {
		if got := reduceLaunch("f32", "sum", tc.dsts, tc.srcs, n, 0).grid[0]; got != tc.blocks {
			t.Errorf("%s: %d blocks, want %d", tc.name, got, tc.blocks)
		}
	}
	// float16, 8 elements in 16 bytes: a thread for 8 aligned, for one
	// off by a byte pair.
	for _, tc := range []struct {
		name   string
		src    devmem.Buffer
		blocks uint32
	}{{"aligned", at(0), 512 / flatThreads}, {"off", at(2), 4096 / flatThreads}} {
		if got := reduceLaunch("f16", "sum", []devmem.Buffer{tc.src}, []devmem.Buffer{at(1 << 14)}, n, 0).grid[0]; got != tc.blocks {
			t.Errorf("float16, %s: %d blocks, want %d", tc.name, got, tc.blocks)
		}
	}
}

// A destination that overlaps a source in part, two destinations that
// overlap, and a Fold whose acc overlaps src in part are refused with
// ErrInvalidArgument before anything runs (they passed every check and a
// kernel would have raced on them); the same elements (in place) and
// buffers whose first n elements lie apart pass to the device (here the host
// device's ErrUnsupported).
func TestReduceAndFoldRefuseBuffersThatOverlapInPart(t *testing.T) {
	d := devmem.NewHostDevice()
	whole, err := d.Alloc(256)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { whole.Free() })
	at := func(off, n int) devmem.Buffer {
		b, err := whole.Slice(off, n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	src, shifted, later, wide := at(0, 64), at(8, 64), at(64, 64), at(0, 128)
	bufs := func(b ...devmem.Buffer) []devmem.Buffer { return b }
	refused := map[string]error{
		"destination 8 bytes into the source": Reduce(nil, "f32", "sum", bufs(shifted), bufs(src), 16, 0),
		"destination over the second source":  Reduce(nil, "f32", "sum", bufs(at(128, 64), shifted), bufs(later, src), 16, 0),
		"destinations over each other":        Reduce(nil, "f32", "sum", bufs(later, at(72, 64)), bufs(src), 16, 0),
		"the same destination twice":          Reduce(nil, "f32", "sum", bufs(later, later), bufs(src), 16, 0),
		"fold acc 8 bytes into src":           Fold(nil, "f32", "sum", shifted, src, 16),
	}
	for name, err := range refused {
		if !errors.Is(err, devmem.ErrInvalidArgument) || !strings.Contains(err.Error(), "overlap") {
			t.Errorf("%s: %v, want ErrInvalidArgument saying they overlap", name, err)
		}
	}
	passed := map[string]error{
		"in place":                            Reduce(nil, "f32", "sum", bufs(src), bufs(src, later), 16, 0),
		"apart in their first 64 bytes":       Reduce(nil, "f32", "sum", bufs(later), bufs(wide), 16, 0),
		"sources over each other":             Reduce(nil, "f32", "sum", bufs(at(128, 64)), bufs(src, shifted), 16, 0),
		"fold in place":                       Fold(nil, "f32", "sum", src, src, 16),
		"fold acc after src's first 64 bytes": Fold(nil, "f32", "sum", later, wide, 16),
	}
	for name, err := range passed {
		if !errors.Is(err, devmem.ErrUnsupported) {
			t.Errorf("%s: %v, want the host device's ErrUnsupported (the arguments pass)", name, err)
		}
	}
}
