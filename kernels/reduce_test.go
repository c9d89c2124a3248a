package kernels

import (
	"errors"
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
	inst := regexp.MustCompile(`(?m)^(INT_FOLDS|FLOAT_FOLDS|NARROW_FOLDS|DIVIDE_INT|DIVIDE_FLOAT|DIVIDE_NARROW)\((\w+)`)
	for _, m := range inst.FindAllStringSubmatch(text, -1) {
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
		`extern "C" __global__ void divide_##NAME(unsigned short *acc, long long n, long long by)`,
	} {
		if !strings.Contains(text, sig) {
			t.Errorf("reduce.cu no longer has %q, whose parameters the launchers follow", sig)
		}
	}
	d := devmem.NewHostDevice()
	a, _ := d.Alloc(64)
	b, _ := d.Alloc(64)
	defer a.Free()
	defer b.Free()
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
	d := devmem.NewHostDevice()
	a, _ := d.Alloc(64)
	b, _ := d.Alloc(64)
	defer a.Free()
	defer b.Free()
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
