package devmem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/dl/dltest"
)

// The cuda tests start copies of the test binary too (see ipc_test.go for
// the host driver's): cudaChildEnv names the role, which TestCUDAChild runs.
const (
	cudaChildEnv = "GPUCOMM_DEVMEM_CUDA_CHILD"
	// cudaFakeEnv is set where the library is fakeCUDA, for the checks only
	// the fake makes possible.
	cudaFakeEnv = "GPUCOMM_DEVMEM_FAKE_CUDA"
	// cudaResultPrefix starts the lines a child writes for its parent.
	cudaResultPrefix = "gpucomm-child: "
)

var cudaChildRoles = map[string]func() error{
	"no-library": cudaChildNoLibrary,
}

func TestCUDAChild(t *testing.T) {
	role := os.Getenv(cudaChildEnv)
	if role == "" {
		t.Skip("helper run by the cuda tests in a child process")
	}
	fn, ok := cudaChildRoles[role]
	if !ok {
		t.Fatalf("unknown cuda child role %q", role)
	}
	if err := fn(); err != nil {
		t.Fatalf("cuda child %s: %v", role, err)
	}
}

// cudaChild is a copy of the test binary running one role. It reads its
// stdin until the parent closes it, where the role waits for the parent.
type cudaChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // the child's result lines, without the prefix
	mu    sync.Mutex
	out   strings.Builder // all its output, for failure messages
	read  chan struct{}   // closed when its output has been read to the end
}

// cudaEnviron is this process's environment without the child markers.
func cudaEnviron(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, cudaChildEnv+"=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func startCUDAChild(tb testing.TB, role string, env ...string) *cudaChild {
	tb.Helper()
	c := &cudaChild{
		cmd:   exec.Command(os.Args[0], "-test.run=^TestCUDAChild$", "-test.count=1", "-test.v"),
		lines: make(chan string, 64),
		read:  make(chan struct{}),
	}
	c.cmd.Env = cudaEnviron(append(env, cudaChildEnv+"="+role)...)
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	c.cmd.Stderr = c.cmd.Stdout // a panic's trace belongs in the failure message too
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		tb.Fatalf("starting cuda child %s: %v", role, err)
	}
	go func() {
		defer close(c.read)
		defer close(c.lines)
		// Drained to the end whatever happens, so the child never blocks on a full pipe.
		defer io.Copy(io.Discard, stdout)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			c.mu.Lock()
			c.out.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			if v, ok := strings.CutPrefix(sc.Text(), cudaResultPrefix); ok {
				c.lines <- v
			}
		}
	}()
	tb.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	return c
}

func (c *cudaChild) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// next returns the child's next result line; it fails the test if the child
// ends without one.
func (c *cudaChild) next(tb testing.TB) string {
	tb.Helper()
	v, ok := <-c.lines
	if !ok {
		c.cmd.Wait()
		tb.Fatalf("cuda child ended without a result: %v\n%s", c.cmd.ProcessState, c.output())
	}
	return v
}

// wait closes the child's stdin, waits for it and fails the test unless it
// passed.
func (c *cudaChild) wait(tb testing.TB) {
	tb.Helper()
	c.stdin.Close()
	<-c.read
	if err := c.cmd.Wait(); err != nil {
		tb.Fatalf("cuda child %s: %v\n%s", c.cmd.Env[len(c.cmd.Env)-1], err, c.output())
	}
}

// cudaReport writes a result line for the parent.
func cudaReport(format string, args ...any) {
	fmt.Printf(cudaResultPrefix+format+"\n", args...)
}

// cudaChildNoLibrary checks what a process without a usable libcuda sees;
// the parent points GPUCOMM_CUDA_LIB at nothing.
func cudaChildNoLibrary() error {
	var errs []error
	want := ErrLibraryNotFound
	if openCUDA == nil {
		want = ErrUnsupported // CGO_ENABLED=0: no cuda driver at all
	}
	if n, err := CUDADeviceCount(); !errors.Is(err, ErrLibraryNotFound) || n != 0 {
		errs = append(errs, fmt.Errorf("CUDADeviceCount = %d, %v; want 0 and ErrLibraryNotFound", n, err))
	}
	for _, spec := range []string{"cuda", "cuda:0", "CUDA:1"} {
		if d, err := Open(spec, 3); !errors.Is(err, want) || d != nil {
			errs = append(errs, fmt.Errorf("Open(%q) = %v, %v; want an error wrapping %v", spec, d, err, want))
		}
	}
	os.Unsetenv("GPUCOMM_DEVICE")
	for _, spec := range []string{"auto", ""} {
		d, err := Open(spec, 1)
		if err != nil || d.Kind() != Host {
			errs = append(errs, fmt.Errorf("Open(%q) = %v, %v; want the host device", spec, d, err))
		}
	}
	return errors.Join(errs...)
}

func TestOpenCUDAWithTheLibraryPointingNowhereFailsWithErrLibraryNotFound(t *testing.T) {
	c := startCUDAChild(t, "no-library", cuda.EnvLib+"="+filepath.Join(t.TempDir(), "libcuda.so.1"))
	c.wait(t)
}

func TestOpenCUDAWithoutADriverInstalledFailsWithErrLibraryNotFound(t *testing.T) {
	if lib, err := dl.Open("libcuda.so.1", "libcuda.so"); err == nil {
		lib.Close()
		t.Skip("a libcuda is installed here")
	}
	if os.Getenv(cudaFakeEnv) != "" {
		t.Skip("this process uses the fake libcuda")
	}
	t.Setenv(cuda.EnvLib, "")
	want := ErrLibraryNotFound
	if openCUDA == nil {
		want = ErrUnsupported
	}
	if d, err := Open("cuda", 0); !errors.Is(err, want) {
		t.Fatalf("Open(cuda) = %v, %v; want an error wrapping %v", d, err, want)
	}
	if _, err := CUDADeviceCount(); !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("CUDADeviceCount: %v, want ErrLibraryNotFound", err)
	}
	d, err := Open("auto", 0)
	if err != nil || d.Kind() != Host {
		t.Fatalf("Open(auto) = %v, %v; want the host device", d, err)
	}
}

// TestCUDADriverOnAFakeLibrary runs every GPU test, in a child process,
// against fakeCUDA, so the driver's logic is checked on machines with no
// GPU. A child, because the driver library is loaded once per process.
func TestCUDADriverOnAFakeLibrary(t *testing.T) {
	if openCUDA == nil {
		t.Skip("the cuda driver needs cgo")
	}
	if os.Getenv(cudaFakeEnv) != "" || os.Getenv(cudaChildEnv) != "" {
		t.Skip("already running against the fake")
	}
	if testing.Short() {
		t.Skip("builds a library with gcc and runs the GPU tests in a child")
	}
	lib := dltest.BuildLib(t, "libcuda.so.1", fakeCUDA)
	// The stream benchmark runs too, briefly: its calls must not fail or hang.
	cmd := exec.Command(os.Args[0], "-test.run=^TestCUDAOnGPU", "-test.v", "-test.count=1", "-test.timeout=8m",
		"-test.bench=^BenchmarkCUDAStreamHostCost$", "-test.benchtime=300x")
	cmd.Env = cudaEnviron(cuda.EnvLib+"="+lib, cudaFakeEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("GPU tests on the fake library: %v\n%s", err, out)
	}
	passed := regexp.MustCompile(`(?m)^--- PASS: (TestCUDAOnGPU\w*)`).FindAllSubmatch(out, -1)
	skipped := regexp.MustCompile(`(?m)^--- SKIP: (TestCUDAOnGPU\w*)`).FindAllSubmatch(out, -1)
	for _, s := range skipped {
		t.Errorf("%s skipped on the fake library", s[1])
	}
	if n := len(regexp.MustCompile(`(?m)^BenchmarkCUDAStreamHostCost/.*ns/op`).FindAll(out, -1)); n < 12 {
		t.Errorf("the stream benchmark reported %d of its 12 cases on the fake library", n)
	}
	if len(passed) < 9 || t.Failed() {
		t.Fatalf("%d GPU tests passed on the fake library, want every one:\n%s", len(passed), out)
	}
	t.Logf("%d GPU tests passed on the fake library", len(passed))
	if testing.Verbose() {
		for _, l := range regexp.MustCompile(`(?m)^BenchmarkCUDAStreamHostCost.*$`).FindAll(out, -1) {
			t.Logf("%s", l)
		}
	}
}

// contextFree are the internal/cuda functions that need no current context.
var contextFree = map[string]bool{
	"Load": true, "DriverVersion": true, "DeviceCount": true, "DeviceGet": true, "DeviceName": true,
	"DeviceUUID": true, "DeviceTotalMem": true, "DeviceAttribute": true, "DevicePCIBusID": true,
	"DeviceCanAccessPeer": true, "PrimaryCtxRetain": true, "PrimaryCtxRelease": true,
	"IsCode": true, "ErrorName": true, "ErrorString": true, "WithContext": true, "Arg": true,
	"HasVMM": true,
	// These make the context they are given current themselves, inside
	// their own C call, or use none.
	"EventRecordIn": true, "StreamQueryIn": true, "CtxFuncs": true, "ErrorOf": true,
	"StreamSynchronizeIn": true, "MemcpyHtoDAsyncIn": true, "MemcpyDtoHAsyncIn": true,
	"MemcpyDtoDAsyncIn": true, "MemsetD8AsyncIn": true, "StreamWaitEventIn": true,
	"EventSynchronizeIn": true, "EventQueryIn": true, "LaunchKernelIn": true,
}

// TestCUDACallsRunInsideTheContext enforces the threading rule on the
// driver's sources: every internal/cuda function that uses the current
// context is called (or passed) only directly inside a function literal
// given to do, enqueue or cuda.WithContext, which make the device's context
// current on a locked thread. A literal nested deeper could run later, on
// another thread, so it does not count.
func TestCUDACallsRunInsideTheContext(t *testing.T) {
	cudaFuncs := map[string]bool{}
	srcs, _ := filepath.Glob("../internal/cuda/*.go")
	fset := token.NewFileSet()
	for _, p := range srcs {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.IsExported() {
				cudaFuncs[fd.Name.Name] = true
			}
		}
	}
	mine, _ := filepath.Glob("cuda*.go")
	if len(cudaFuncs) == 0 || len(mine) == 0 {
		t.Skip("sources not here (a test binary run elsewhere)")
	}
	isRunner := func(call *ast.CallExpr) bool {
		switch f := call.Fun.(type) {
		case *ast.SelectorExpr:
			return f.Sel.Name == "do" || f.Sel.Name == "enqueue" || f.Sel.Name == "issue" || f.Sel.Name == "WithContext"
		}
		return false
	}
	checked := 0
	for _, p := range mine {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var stack []ast.Node
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			stack = append(stack, n)
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "cuda" || !cudaFuncs[sel.Sel.Name] || contextFree[sel.Sel.Name] {
				return true
			}
			checked++
			parent := stack[len(stack)-2]
			if call, ok := parent.(*ast.CallExpr); ok && call.Fun != sel && isRunner(call) {
				return true // passed as the function to run, as in c.do(cuda.CtxSynchronize)
			}
			for i := len(stack) - 2; i > 0; i-- {
				lit, ok := stack[i].(*ast.FuncLit)
				if !ok {
					continue
				}
				if call, ok := stack[i-1].(*ast.CallExpr); ok && isRunner(call) && call.Fun != lit {
					return true
				}
				break
			}
			t.Errorf("%s: cuda.%s outside the device's context (wrap it in c.do)", fset.Position(sel.Pos()), sel.Sel.Name)
			return true
		})
	}
	if checked < 20 {
		t.Errorf("only %d context-using calls found: is the test reading the right files?", checked)
	}
}

// TestGPUOnlyCallsOnAHostDeviceSayUnsupported checks the GPU additions'
// answers on the simulated device: ErrUnsupported, never a panic.
func TestGPUOnlyCallsOnAHostDeviceSayUnsupported(t *testing.T) {
	d := NewHostDevice()
	if _, _, err := d.ComputeCapability(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ComputeCapability: %v", err)
	}
	if _, _, err := d.MemInfo(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("MemInfo: %v", err)
	}
	if m, err := d.LoadModule([]byte(".entry add_one")); !errors.Is(err, ErrUnsupported) || m != nil {
		t.Errorf("LoadModule = %v, %v", m, err)
	}
	if s := d.PCIBusID(); s != "" {
		t.Errorf("PCIBusID = %q", s)
	}
	var nd *Device
	if _, err := nd.LoadModule([]byte("x")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("LoadModule on nil device: %v", err)
	}
	if _, _, err := nd.ComputeCapability(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ComputeCapability on nil device: %v", err)
	}
	var m *Module
	if _, err := m.Function("f"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Function of nil module: %v", err)
	}
	if err := m.Unload(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Unload of nil module: %v", err)
	}
	var f *Function
	if err := f.Launch([3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Launch of nil function: %v", err)
	}
}

// mmapPages returns n pages of anonymous memory, unmapped at the end of the test.
func mmapPages(tb testing.TB, n int) []byte {
	tb.Helper()
	mem, err := unix.Mmap(-1, 0, n*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

func TestRegisterHostRefusesWhatItCannotLock(t *testing.T) {
	d := NewHostDevice()
	page := os.Getpagesize()
	mem := mmapPages(t, 3)
	for name, m := range map[string][]byte{
		"empty":        mem[:0],
		"misaligned":   mem[1 : 1+page],
		"partial page": mem[:page+1],
	} {
		if b, err := d.RegisterHost(m); !errors.Is(err, ErrInvalidArgument) || !b.IsZero() {
			t.Errorf("%s: RegisterHost = %v, %v; want ErrInvalidArgument", name, b, err)
		}
	}
	var nd *Device
	if _, err := nd.RegisterHost(mem); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil device: %v", err)
	}
	if st := d.Stats(); st != (Stats{}) {
		t.Errorf("refused registrations changed Stats: %+v", st)
	}
}

func TestRegisterHostOnAHostDeviceUsesTheMemory(t *testing.T) {
	d := NewHostDevice()
	page := os.Getpagesize()
	mem := mmapPages(t, 2)
	want := cudaRandom(7, len(mem))
	copy(mem, want)
	b, err := d.RegisterHost(mem)
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Pinned != 1 || st.Bytes != int64(2*page) {
		t.Errorf("Stats after RegisterHost = %+v", st)
	}
	if !b.Pinned() || b.Len() != len(mem) || b.Addr() != addrOf(mem) {
		t.Errorf("registered buffer: pinned %v, %d bytes at %#x; want %d at %#x", b.Pinned(), b.Len(), b.Addr(), len(mem), addrOf(mem))
	}
	dev, err := d.Alloc(len(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free()
	if err := Copy(dev, b, nil); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(mem))
	if err := CopyToHost(got, dev, nil); err != nil {
		t.Fatal(err)
	}
	cudaSameBytes(t, "device copy of registered memory", got, want)
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("second Free: %v", err)
	}
	if st := d.Stats(); st.Pinned != 0 || st.Bytes != int64(len(mem)) {
		t.Errorf("Stats after Free = %+v, want only the device buffer", st)
	}
	cudaSameBytes(t, "memory after Free (unregistering must leave it alone)", mem, want)
}

func TestCopyPeerBetweenHostDevices(t *testing.T) {
	a, b := NewHostDevice(), NewHostDevice()
	const n = 100003
	src, err := a.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	dst, err := b.Alloc(n + 16)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	want := cudaRandom(3, n)
	if err := CopyFromHost(src, want, nil); err != nil {
		t.Fatal(err)
	}
	if err := Memset(dst, 0xee, nil); err != nil {
		t.Fatal(err)
	}
	s, err := b.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	if err := CopyPeer(dst, src, n, s); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n+16)
	if err := CopyToHost(got, dst, s); err != nil {
		t.Fatal(err)
	}
	cudaSameBytes(t, "copied bytes", got[:n], want)
	cudaSameBytes(t, "bytes past the copy", got[n:], bytes.Repeat([]byte{0xee}, 16))

	pinned, err := a.AllocPinned(n)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Free()
	other := NewHostDevice()
	third, err := other.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer third.Destroy()
	for name, call := range map[string]func() error{
		"pinned source":            func() error { return CopyPeer(dst, pinned, n, nil) },
		"too long":                 func() error { return CopyPeer(dst, src, n+1, nil) },
		"negative":                 func() error { return CopyPeer(dst, src, -1, nil) },
		"stream of a third device": func() error { return CopyPeer(dst, src, n, third) },
		"zero buffer":              func() error { return CopyPeer(Buffer{}, src, n, nil) },
	} {
		if err := call(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := CopyToHost(got, dst, nil); err != nil {
		t.Fatal(err)
	}
	cudaSameBytes(t, "bytes after refused copies", got[:n], want)
}

type celsius float32

func TestLaunchArgumentsArePackedAtTheirCSizes(t *testing.T) {
	d := NewHostDevice()
	buf, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	view, _ := buf.Slice(8, 16)
	sl := SliceOf[float64](buf)
	params, err := packArgs(d, []any{int8(-2), uint8(200), int16(-3), uint16(60000), int32(-7), uint32(1 << 31),
		int64(-1 << 40), uint64(1<<64 - 1), float32(1.5), 2.25, uintptr(0xdead), buf, view, sl, celsius(-40),
		[3]uint64{7, 1 << 63, uint64(buf.Addr())}, [2]int16{-1, 2}, [2]celsius{1, -2}})
	if err != nil {
		t.Fatal(err)
	}
	le := func(v uint64, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		return b
	}
	want := [][]byte{{0xfe}, {200}, le(0xfffd, 2), le(60000, 2), le(0xfffffff9, 4), le(1<<31, 4),
		le(uint64(1<<64-1<<40), 8), le(1<<64-1, 8), le(uint64(math.Float32bits(1.5)), 4),
		le(math.Float64bits(2.25), 8), le(0xdead, 8), le(uint64(buf.Addr()), 8), le(uint64(buf.Addr()+8), 8),
		le(uint64(buf.Addr()), 8), le(uint64(math.Float32bits(-40)), 4),
		append(append(le(7, 8), le(1<<63, 8)...), le(uint64(buf.Addr()), 8)...), append(le(0xffff, 2), le(2, 2)...),
		append(le(uint64(math.Float32bits(1)), 4), le(uint64(math.Float32bits(-2)), 4)...)}
	if len(params) != len(want) {
		t.Fatalf("%d params, want %d", len(params), len(want))
	}
	for i := range want {
		if !bytes.Equal(params[i], want[i]) {
			t.Errorf("argument %d packed as % x, want % x", i, params[i], want[i])
		}
	}

	freed, err := d.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	freed.Free()
	onOther, err := NewHostDevice().Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	defer onOther.Free()
	for name, a := range map[string]any{
		"int": 1, "uint": uint(1), "bool": true, "nil": nil, "string": "x", "pointer": &buf,
		"zero buffer": Buffer{}, "freed buffer": freed, "other device's buffer": onOther,
		"empty array": [0]uint64{}, "array of int": [2]int{1, 2}, "array of bool": [1]bool{true},
		"array of arrays": [1][2]uint64{}, "array of buffers": [1]Buffer{buf},
	} {
		if _, err := packArgs(d, []any{int32(1), a}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		} else if !strings.Contains(err.Error(), "argument 1") {
			t.Errorf("%s: error %q does not name the argument", name, err)
		}
	}
}

// cudaRandom returns n bytes of the fixed-seed stream seed names, the same
// in every process.
func cudaRandom(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0xc0da))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// cudaSameBytes fails the test at the first byte that differs.
func cudaSameBytes(tb testing.TB, what string, got, want []byte) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			tb.Fatalf("%s: byte %d is %#x, want %#x", what, i, got[i], want[i])
		}
	}
}
