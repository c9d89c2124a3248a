package kernels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// fakeNVRTC compiles by describing what it was asked, so tests see which
// source, options and version an image came from.
type fakeNVRTC struct {
	mu           sync.Mutex
	calls        int
	major, minor int
	fail         error
	log          string
	ptxOnly      bool
}

func (f *fakeNVRTC) Compile(src, name string, opts []string) ([]byte, []byte, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		return nil, nil, f.log, f.fail
	}
	desc := fmt.Sprintf("%s %s %d.%d %d", name, strings.Join(opts, " "), f.major, f.minor, len(src))
	if f.ptxOnly {
		return []byte("PTX:" + desc), nil, f.log, nil
	}
	return []byte("PTX:" + desc), []byte("CUBIN:" + desc), f.log, nil
}

func (f *fakeNVRTC) Version() (int, int, error) { return f.major, f.minor, nil }

func (f *fakeNVRTC) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

// fakeLoader is a device of a given compute capability that accepts images
// the fake compiler made and rejects anything else, as the driver rejects a
// corrupt cubin.
type fakeLoader struct {
	mu           sync.Mutex
	major, minor int
	images       [][]byte
	unloads      int
	launches     []fakeLaunch
}

type fakeLaunch struct {
	kernel      string
	grid, block [3]uint32
	args        []any
}

func (l *fakeLoader) ComputeCapability(*devmem.Device) (int, int, error) {
	return l.major, l.minor, nil
}

func (l *fakeLoader) LoadModule(_ *devmem.Device, image []byte) (module, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !strings.HasPrefix(string(image), "CUBIN:") && !strings.HasPrefix(string(image), "PTX:") {
		return nil, errors.New("CUDA_ERROR_INVALID_IMAGE")
	}
	l.images = append(l.images, image)
	return &fakeModule{l: l, image: string(image)}, nil
}

type fakeModule struct {
	l     *fakeLoader
	image string
}

func (m *fakeModule) Function(name string) (function, error) {
	if name == "missing" {
		return nil, errors.New("CUDA_ERROR_NOT_FOUND")
	}
	return &fakeFunction{l: m.l, name: name}, nil
}

func (m *fakeModule) Unload() error { m.l.mu.Lock(); m.l.unloads++; m.l.mu.Unlock(); return nil }

type fakeFunction struct {
	l    *fakeLoader
	name string
}

func (f *fakeFunction) Launch(grid, block [3]uint32, _ int, _ *devmem.Stream, args ...any) error {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	f.l.launches = append(f.l.launches, fakeLaunch{f.name, grid, block, args})
	return nil
}

func newRuntime(dir string, l *fakeLoader, c *fakeNVRTC) *runtime {
	return &runtime{loader: l, nvrtc: c, cacheDir: func() (string, error) { return dir, nil }}
}

func TestNVRTCOptionsNameTheDeviceArchitectureAndForbidFMA(t *testing.T) {
	got := strings.Join(nvrtcOptions(9, 0), " ")
	if got != "--gpu-architecture=sm_90 --fmad=false" {
		t.Fatalf("options for 9.0 = %q", got)
	}
	if got := nvrtcOptions(8, 6)[0]; got != "--gpu-architecture=sm_86" {
		t.Fatalf("arch option for 8.6 = %q", got)
	}
}

func TestCacheKeyChangesWithSourceArchitectureVersionAndOptions(t *testing.T) {
	base := cacheKey("src", "heat.cu", nvrtcOptions(9, 0), 13, 0)
	others := map[string]string{
		"source":  cacheKey("src2", "heat.cu", nvrtcOptions(9, 0), 13, 0),
		"file":    cacheKey("src", "halo.cu", nvrtcOptions(9, 0), 13, 0),
		"arch":    cacheKey("src", "heat.cu", nvrtcOptions(8, 0), 13, 0),
		"version": cacheKey("src", "heat.cu", nvrtcOptions(9, 0), 12, 8),
		"options": cacheKey("src", "heat.cu", []string{"--gpu-architecture=sm_90"}, 13, 0),
	}
	seen := map[string]string{base: "base"}
	for what, k := range others {
		if prev, dup := seen[k]; dup {
			t.Errorf("changing the %s gives the key of %s: %s", what, prev, k)
		}
		seen[k] = what
	}
	if base != cacheKey("src", "heat.cu", nvrtcOptions(9, 0), 13, 0) {
		t.Error("the same build gives two keys")
	}
	if !strings.HasPrefix(base, "heat-sm_90-nvrtc13.0-") || !regexp.MustCompile(`^[a-z0-9._-]+$`).MatchString(base) {
		t.Errorf("key %q is not a readable file name", base)
	}
}

func TestCacheDirFollowsTheEnvironment(t *testing.T) {
	t.Setenv(EnvCacheDir, "/some/where")
	if d, err := CacheDir(); err != nil || d != "/some/where" {
		t.Fatalf("CacheDir = %q, %v", d, err)
	}
	t.Setenv(EnvCacheDir, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if d, err := CacheDir(); err != nil || d != "/xdg/gpucomm/kernels" {
		t.Fatalf("CacheDir without %s = %q, %v", EnvCacheDir, d, err)
	}
}

func TestFirstUseCompilesThenMemoryThenDiskCacheServe(t *testing.T) {
	dir := t.TempDir()
	dev := devmem.NewHostDevice() // the fake loader does not look at the kind
	loader, nv := &fakeLoader{major: 9}, &fakeNVRTC{major: 13}
	rt := newRuntime(dir, loader, nv)
	if _, err := rt.function(dev, "heat.cu", "heat_step"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.function(dev, "heat.cu", "heat_step"); err != nil {
		t.Fatal(err)
	}
	if nv.count() != 1 || len(loader.images) != 1 {
		t.Fatalf("two uses on one device: %d compiles, %d loads; want 1 and 1", nv.count(), len(loader.images))
	}
	if !strings.Contains(string(loader.images[0]), "--gpu-architecture=sm_90 --fmad=false") {
		t.Fatalf("loaded image %q was not built for sm_90 without FMA", loader.images[0])
	}
	files, _ := filepath.Glob(filepath.Join(dir, "heat-sm_90-nvrtc13.0-*.bin"))
	if len(files) != 1 {
		t.Fatalf("cache holds %v, want one heat entry for sm_90", files)
	}

	// A new process (runtime) on the same cache: no compile.
	rt2 := newRuntime(dir, loader, nv)
	if _, err := rt2.function(devmem.NewHostDevice(), "heat.cu", "heat_step"); err != nil {
		t.Fatal(err)
	}
	if nv.count() != 1 {
		t.Fatalf("a warm disk cache still compiled (%d compiles)", nv.count())
	}
	if string(loader.images[1]) != string(loader.images[0]) {
		t.Fatal("the cached image differs from the compiled one")
	}

	// Another architecture, or another NVRTC, is another build.
	rt3 := newRuntime(dir, &fakeLoader{major: 8, minor: 0}, nv)
	if _, err := rt3.function(dev, "heat.cu", "heat_step"); err != nil {
		t.Fatal(err)
	}
	nv13_1 := &fakeNVRTC{major: 13, minor: 1}
	if _, err := newRuntime(dir, loader, nv13_1).function(dev, "heat.cu", "heat_step"); err != nil {
		t.Fatal(err)
	}
	if nv.count() != 2 || nv13_1.count() != 1 {
		t.Fatalf("sm_80 and NVRTC 13.1 must each compile once: %d, %d", nv.count()-1, nv13_1.count())
	}
}

func TestCorruptCacheEntryIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	loader, nv := &fakeLoader{major: 9}, &fakeNVRTC{major: 13}
	src, _ := sources.ReadFile("halo.cu")
	key := cacheKey(string(src), "halo.cu", nvrtcOptions(9, 0), 13, 0)
	if err := os.WriteFile(diskCache{dir}.path(key), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newRuntime(dir, loader, nv).function(devmem.NewHostDevice(), "halo.cu", "pack_column"); err != nil {
		t.Fatal(err)
	}
	if nv.count() != 1 {
		t.Fatalf("%d compiles after a corrupt entry, want 1", nv.count())
	}
	b, _ := os.ReadFile(diskCache{dir}.path(key))
	if !strings.HasPrefix(string(b), "CUBIN:halo.cu") {
		t.Fatalf("the corrupt entry was not replaced: %q", b)
	}
}

func TestUnwritableCacheStillBuilds(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	os.WriteFile(file, nil, 0o644)
	nv := &fakeNVRTC{major: 13}
	rt := newRuntime(filepath.Join(file, "kernels"), &fakeLoader{major: 9}, nv)
	if _, err := rt.function(devmem.NewHostDevice(), "fill.cu", "fill_f32"); err != nil {
		t.Fatalf("a cache that cannot be written must not fail the build: %v", err)
	}
	rt.cacheDir = func() (string, error) { return "", errors.New("no home") }
	if _, err := rt.function(devmem.NewHostDevice(), "fill.cu", "fill_f32"); err != nil {
		t.Fatalf("no cache directory must not fail the build: %v", err)
	}
}

func TestCompileErrorShowsTheNVRTCLog(t *testing.T) {
	cause := errors.New("NVRTC_ERROR_COMPILATION")
	nv := &fakeNVRTC{major: 13, fail: cause, log: "heat.cu(20): error: identifier \"lap\" is undefined"}
	_, err := newRuntime(t.TempDir(), &fakeLoader{major: 9}, nv).function(devmem.NewHostDevice(), "heat.cu", "heat_step")
	var ce *CompileError
	if !errors.As(err, &ce) || !errors.Is(err, cause) {
		t.Fatalf("err = %v, want a *CompileError wrapping the NVRTC error", err)
	}
	if !strings.Contains(err.Error(), `identifier "lap" is undefined`) || !strings.Contains(err.Error(), "sm_90") {
		t.Fatalf("error %q lacks the log or the architecture", err)
	}
}

func TestPTXIsLoadedNULTerminatedWhenThereIsNoCubin(t *testing.T) {
	image, err := build(&fakeNVRTC{major: 13, ptxOnly: true}, "x", "fill.cu", nvrtcOptions(9, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(image), "PTX:") || image[len(image)-1] != 0 {
		t.Fatalf("image %q: want the PTX ending in NUL", image)
	}
}

func TestNoLoaderMeansUnsupported(t *testing.T) {
	rt := &runtime{nvrtc: &fakeNVRTC{}}
	if _, err := rt.function(devmem.NewHostDevice(), "fill.cu", "fill_f64"); !errors.Is(err, devmem.ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
}

func TestMissingKernelAndUnload(t *testing.T) {
	loader := &fakeLoader{major: 9}
	rt := newRuntime(t.TempDir(), loader, &fakeNVRTC{major: 13})
	dev := devmem.NewHostDevice()
	if _, err := rt.function(dev, "fill.cu", "missing"); err == nil || !strings.Contains(err.Error(), "no kernel missing") {
		t.Fatalf("err = %v, want one naming the missing kernel", err)
	}
	rt.function(dev, "scale.cu", "scale_f64")
	if err := rt.unload(dev); err != nil {
		t.Fatal(err)
	}
	if loader.unloads != 2 || len(rt.loaded) != 0 {
		t.Fatalf("unload released %d modules, %d left; want 2 and 0", loader.unloads, len(rt.loaded))
	}
	rt.function(dev, "scale.cu", "scale_f64")
	if len(loader.images) != 3 {
		t.Fatalf("a use after Unload must load again: %d loads", len(loader.images))
	}
}

// kernelParams reads the C parameter types of every extern "C" kernel in
// the embedded sources.
func kernelParams(t *testing.T) map[string][]string {
	t.Helper()
	re := regexp.MustCompile(`extern "C" __global__ void (\w+)\(([^)]*)\)`)
	out := map[string][]string{}
	files, _ := sources.ReadDir(".")
	for _, f := range files {
		src, _ := sources.ReadFile(f.Name())
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			var types []string
			for _, p := range strings.Split(m[2], ",") {
				p = strings.Join(strings.Fields(p), " ")
				switch {
				case strings.Contains(p, "*"):
					types = append(types, "pointer")
				case strings.HasPrefix(p, "long long "):
					types = append(types, "int64")
				case strings.HasPrefix(p, "int "):
					types = append(types, "int32")
				case strings.HasPrefix(p, "double "):
					types = append(types, "float64")
				case strings.HasPrefix(p, "float "):
					types = append(types, "float32")
				default:
					t.Fatalf("%s: parameter %q of %s has a type this test does not know", f.Name(), p, m[1])
				}
			}
			out[m[1]] = types
		}
	}
	return out
}

func goType(a any) string {
	switch a.(type) {
	case devmem.Buffer:
		return "pointer"
	case int64:
		return "int64"
	case int32:
		return "int32"
	case float64:
		return "float64"
	case float32:
		return "float32"
	}
	return fmt.Sprintf("%T", a)
}

func TestLaunchArgumentsMatchTheKernelSignatures(t *testing.T) {
	params := kernelParams(t)
	d := devmem.NewHostDevice()
	const nx, ny = 300, 70
	a, b := alloc(t, d, nx*ny, nil), alloc(t, d, nx*ny, nil)
	p := alloc(t, d, ny, nil)
	f32, _ := devmem.AllocSlice[float32](d, 1000)
	defer f32.Free()
	type planned struct {
		p    plan
		err  error
		work [3]int // threads needed in x, y (before grid-stride loops)
	}
	mk := func(p plan, err error) planned { return planned{p: p, err: err} }
	cases := []planned{
		mk(fillPlan(nil, a, 1.0)), mk(fillPlan(nil, f32, float32(1))),
		mk(scalePlan(nil, a, 2.0)), mk(scalePlan(nil, f32, float32(2))),
		mk(heatPlan(nil, a, b, nx, 1, ny-1, 1, nx-1, 0.1)),
		mk(columnPlan("PackColumn", nil, p, a, nx, 3, 1, ny-1, true)),
		mk(columnPlan("UnpackColumn", nil, p, a, nx, 3, 1, ny-1, false)),
		mk(residualPlan(nil, p, a, b, nx, 1, ny-1, 1, nx-1)),
		mk(sumPlan(nil, alloc(t, d, 1, nil), p)),
	}
	cases[0].work = [3]int{nx * ny, 1}
	cases[1].work = [3]int{1000, 1}
	cases[2].work, cases[3].work = cases[0].work, cases[1].work
	cases[4].work = [3]int{(nx - 1 + 1) / 2, 1} // a thread a pair of columns, from 0 to nx-2; rows are grid-stride
	cases[5].work, cases[6].work = [3]int{ny - 2, 1}, [3]int{ny - 2, 1}
	cases[7].work = [3]int{(ny - 2) * residualThreads, 1}
	cases[8].work = [3]int{1, 1}
	a32, _ := devmem.AllocSlice[float32](d, nx*ny)
	b32, _ := devmem.AllocSlice[float32](d, nx*ny)
	defer a32.Free()
	defer b32.Free()
	parts := alloc(t, d, nx*ny, nil) // enough for any shape's blocks
	f32step := mk(heatPlan(nil, a32, b32, nx, 1, ny-1, 1, nx-1, float32(0.1)))
	f32step.work = [3]int{(nx - 1 + 1) / 2, 1}
	cases = append(cases, f32step)
	for _, c := range []planned{
		mk(heatPlanShape(heatDefault, nil, a, b, &parts, nx, 1, ny-1, 1, nx-1, 0.1)),
		mk(heatPlanShape(heatDefault, nil, a32, b32, &parts, nx, 1, ny-1, 1, nx-1, float32(0.1))),
	} {
		c.work = [3]int{(nx - 1 + 1) / 2, 1}
		cases = append(cases, c)
	}
	for _, pack := range []bool{true, false} {
		c := mk(columnPlan("PackColumn", nil, b32, a32, nx, 3, 1, ny-1, pack))
		c.work = [3]int{ny - 2, 1}
		cases = append(cases, c)
	}
	big := alloc(t, d, 3*sumChunk+5, nil)
	sums, err := sumBlocksPlans(nil, alloc(t, d, 1, nil), big, alloc(t, d, SumScratch(big.Len()), nil))
	if err != nil || len(sums) != 2 {
		t.Fatalf("SumBlocks over %d values: %d passes, %v", big.Len(), len(sums), err)
	}
	cases = append(cases, planned{p: sums[0], work: [3]int{4 * sumThreads, 1}}, planned{p: sums[1], work: [3]int{sumThreads, 1}})
	a32s, _ := devmem.AllocSlice[float32](d, nx*ny)
	b32s, _ := devmem.AllocSlice[float32](d, nx*ny)
	defer a32s.Free()
	defer b32s.Free()
	for _, sh := range heatShapes[1:] {
		work := nx - 2 // a thread a column, 1 to nx-2
		if strings.Contains(sh.kernel, "_pair") {
			work = (nx - 1 + 1) / 2 // a thread a pair of columns, from 0 to nx-2
		}
		pl := mk(heatPlanShape(sh, nil, a, b, nil, nx, 1, ny-1, 1, nx-1, 0.1))
		pl.work = [3]int{work, 1}
		cases = append(cases, pl)
		if sh.both() {
			pl := mk(heatPlanShape(sh, nil, a32s, b32s, nil, nx, 1, ny-1, 1, nx-1, float32(0.1)))
			pl.work = [3]int{work, 1}
			cases = append(cases, pl)
		}
		if sh.norm != "" {
			pl := mk(heatPlanShape(sh, nil, a, b, &parts, nx, 1, ny-1, 1, nx-1, 0.1))
			pl.work = [3]int{work, 1}
			cases = append(cases, pl)
			pl = mk(heatPlanShape(sh, nil, a32s, b32s, &parts, nx, 1, ny-1, 1, nx-1, float32(0.1)))
			pl.work = [3]int{work, 1}
			cases = append(cases, pl)
		}
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if c.err != nil {
			t.Fatal(c.err)
		}
		l := c.p.l
		want, ok := params[l.kernel]
		if !ok {
			t.Fatalf("launch of %s, which %s does not define", l.kernel, l.file)
		}
		src, _ := sources.ReadFile(l.file)
		if !strings.Contains(string(src), "void "+l.kernel+"(") {
			t.Fatalf("%s is not in %s", l.kernel, l.file)
		}
		var got []string
		for _, a := range l.args {
			got = append(got, goType(a))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: Go passes (%s), C takes (%s)", l.kernel, strings.Join(got, ","), strings.Join(want, ","))
		}
		if cover := int(l.grid[0]) * int(l.block[0]); cover < c.work[0] {
			t.Errorf("%s: grid %v × block %v covers %d threads in x, %d needed", l.kernel, l.grid, l.block, cover, c.work[0])
		}
		if l.block[0]*l.block[1]*l.block[2] > 1024 || l.grid[1] > 65535 || l.grid[2] > 65535 {
			t.Errorf("%s: grid %v block %v exceeds CUDA's limits", l.kernel, l.grid, l.block)
		}
		seen[l.kernel] = true
	}
	for k := range params {
		if !seen[k] {
			t.Errorf("kernel %s has no launcher checked here", k)
		}
	}
}

func TestLaunchGoesToTheLoadedFunctionWithItsArguments(t *testing.T) {
	loader := &fakeLoader{major: 9}
	rt := newRuntime(t.TempDir(), loader, &fakeNVRTC{major: 13})
	d := devmem.NewHostDevice()
	x := alloc(t, d, 10, nil)
	pl, err := scalePlan(nil, x, 4.0)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.launch(d, nil, pl.l); err != nil {
		t.Fatal(err)
	}
	if len(loader.launches) != 1 {
		t.Fatalf("%d launches", len(loader.launches))
	}
	got := loader.launches[0]
	if got.kernel != "scale_f64" || got.grid != [3]uint32{1, 1, 1} || got.block != [3]uint32{256, 1, 1} ||
		!got.args[0].(devmem.Buffer).Same(x.Buffer()) || got.args[1] != int64(10) || got.args[2] != 4.0 {
		t.Fatalf("launch = %+v", got)
	}
}

func TestGoConstantsMatchTheDefinesOfTheSources(t *testing.T) {
	walk := regexp.MustCompile(`heat_rows\w*<(\d+)(, (true|false))?>\(`)
	const file = "heat.cu"
	heat, _ := sources.ReadFile(file)
	for _, sh := range heatShapes {
		var names []string
		for _, k := range []string{sh.kernel, sh.norm} {
			switch {
			case k == "":
			case strings.Contains(k, "%s"):
				names = append(names, fmt.Sprintf(k, "f64"), fmt.Sprintf(k, "f32"))
			default:
				names = append(names, k)
			}
		}
		if sh.norm != "" && (sh.blockX*sh.blockY)%32 != 0 {
			t.Errorf("%s in blocks of %d×%d threads: block_sum wants whole warps", sh.norm, sh.blockX, sh.blockY)
		}
		if sh.norm != "" && sh.pair() != strings.Contains(sh.norm, "_pair") {
			t.Errorf("%s and %s own different columns a thread", sh.kernel, sh.norm)
		}
		for _, name := range names {
			i := strings.Index(string(heat), "void "+name+"(")
			if i < 0 {
				t.Errorf("%s has no %s", file, name)
				continue
			}
			m := walk.FindStringSubmatch(string(heat[i:]))
			if m != nil && strings.Contains(m[0], "_pair") != strings.Contains(name, "_pair") {
				t.Errorf("%s calls %s, which its launch does not assume", name, m[0])
			}
			if m == nil || m[1] != fmt.Sprint(sh.rows) {
				t.Errorf("%s does not walk %d rows a thread, which its launch assumes: %q", name, sh.rows, m)
				continue
			}
			if norm := strings.HasPrefix(name, "heat_norm"); m[3] != "" && m[3] != fmt.Sprint(norm) || m[3] == "" && norm {
				t.Errorf("%s: partial sums %q, which its launch does not assume", name, m[3])
			}
		}
	}
	if heatShapes[0] != heatDefault || heatDefault.rows != heatRows || heatDefault.blockX != heatBlockX || heatDefault.blockY != heatBlockY {
		t.Errorf("heatShapes[0] = %+v, heatDefault %+v: the benchmarks and tests take the first as the default", heatShapes[0], heatDefault)
	}
	for file, want := range map[string]string{
		"residual.cu":  fmt.Sprintf("#define RESIDUAL_THREADS %d\n", residualThreads),
		"residual.cu ": fmt.Sprintf("#define SUM_THREADS %d\n#define SUM_CHUNK %d\n", sumThreads, sumChunk),
	} {
		file = strings.TrimSpace(file)
		src, _ := sources.ReadFile(file)
		if !strings.Contains(string(src), want) {
			t.Errorf("%s lacks %q, which the launcher assumes", file, want)
		}
	}
	d := devmem.NewHostDevice()
	for _, rows := range []int{1, 15, 16, 17, 1000} {
		a, b := alloc(t, d, (rows+2)*5, nil), alloc(t, d, (rows+2)*5, nil)
		p, err := heatPlan(nil, a, b, 5, 1, rows+1, 1, 4, 0.1)
		if err != nil {
			t.Fatal(err)
		}
		if cover := int(p.l.grid[1]) * int(p.l.block[1]) * heatRows; cover < rows {
			t.Errorf("%d rows: grid %v block %v covers %d rows", rows, p.l.grid, p.l.block, cover)
		}
	}
}

func TestCompileErrorShowsTheLogOnce(t *testing.T) {
	log := "heat.cu(3): error: expected a \";\""
	e := &CompileError{File: "heat.cu", Log: log, Err: fmt.Errorf("nvrtcCompileProgram: NVRTC_ERROR_COMPILATION\n%s", log)}
	if n := strings.Count(e.Error(), log); n != 1 {
		t.Fatalf("the log appears %d times in %q", n, e.Error())
	}
}
