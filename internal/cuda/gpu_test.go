package cuda_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/nvrtc"
)

// needGPU skips unless GPUCOMM_GPU_TESTS=1: these tests use the real driver
// and device 0, and CI has neither.
func needGPU(t testing.TB) {
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		t.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU")
	}
	if err := cuda.Load(); err != nil {
		t.Fatal(err)
	}
}

const saxpySrc = `
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}
`

func TestGPUDeviceQueries(t *testing.T) {
	needGPU(t)
	v, err := cuda.DriverVersion()
	must(t, err)
	n, err := cuda.DeviceCount()
	must(t, err)
	if n < 1 {
		t.Fatalf("DeviceCount = %d", n)
	}
	d, err := cuda.DeviceGet(0)
	must(t, err)
	name, err := cuda.DeviceName(d)
	must(t, err)
	uuid, err := cuda.DeviceUUID(d)
	must(t, err)
	bus, err := cuda.DevicePCIBusID(d)
	must(t, err)
	total, err := cuda.DeviceTotalMem(d)
	must(t, err)
	attr := func(a cuda.Attribute) int { v, err := cuda.DeviceAttribute(d, a); must(t, err); return v }
	t.Logf("driver %d, %d devices; 0: %s %s %s, %d GiB, sm_%d%d, %d SMs, UVA %d, map host %d, PCI %x:%x.%x",
		v, n, name, uuid, bus, total>>30, attr(cuda.AttrComputeCapabilityMajor), attr(cuda.AttrComputeCapabilityMinor),
		attr(cuda.AttrMultiprocessorCount), attr(cuda.AttrUnifiedAddressing), attr(cuda.AttrCanMapHostMemory),
		attr(cuda.AttrPCIDomainID), attr(cuda.AttrPCIBusID), attr(cuda.AttrPCIDeviceID))
	if name == "" || uuid == (cuda.UUID{}) || total == 0 || attr(cuda.AttrWarpSize) != 32 {
		t.Error("implausible device properties")
	}
	if n > 1 {
		ok, err := cuda.DeviceCanAccessPeer(0, 1)
		must(t, err)
		t.Logf("device 0 can access device 1: %v", ok)
	}
}

func TestGPUMemoryStreamsEventsAndKernels(t *testing.T) {
	needGPU(t)
	ctx, err := cuda.PrimaryCtxRetain(0)
	must(t, err)
	defer cuda.PrimaryCtxRelease(0)
	must(t, cuda.WithContext(ctx, func() error {
		const n = 1 << 20
		free, total, err := cuda.MemGetInfo()
		must(t, err)
		t.Logf("free %d MiB of %d MiB", free>>20, total>>20)
		x, err := cuda.MemAlloc(4 * n)
		must(t, err)
		defer cuda.MemFree(x)
		y, err := cuda.MemAlloc(4 * n)
		must(t, err)
		defer cuda.MemFree(y)
		base, size, err := cuda.MemGetAddressRange(x + 100)
		must(t, err)
		if base != x || size < 4*n {
			t.Errorf("MemGetAddressRange = %#x+%d, want %#x", base, size, x)
		}

		// Blocking copies of Go memory, memset, device-to-device.
		src := make([]byte, 4*n)
		for i := range src {
			src[i] = byte(i * 7)
		}
		must(t, cuda.MemcpyHtoDBytes(x, src))
		must(t, cuda.MemcpyDtoD(y, x, 4*n))
		must(t, cuda.MemsetD8(y, 0xab, 16))
		got := make([]byte, 4*n)
		must(t, cuda.MemcpyDtoHBytes(got, y))
		if !bytes.Equal(got[16:], src[16:]) || got[0] != 0xab || got[15] != 0xab {
			t.Fatal("blocking copies or memset lost data")
		}

		// Asynchronous copies through pinned memory, ordered and timed on a stream.
		s, err := cuda.StreamCreate(cuda.StreamNonBlocking)
		must(t, err)
		defer cuda.StreamDestroy(s)
		start, err := cuda.EventCreate(cuda.EventDefault)
		must(t, err)
		defer cuda.EventDestroy(start)
		end, err := cuda.EventCreate(cuda.EventDefault)
		must(t, err)
		defer cuda.EventDestroy(end)
		pinned, err := cuda.MemAllocHost(4 * n)
		must(t, err)
		defer cuda.MemFreeHost(pinned)
		host := unsafe.Slice((*float32)(pinned), n)
		for i := range host {
			host[i] = float32(i)
		}
		must(t, cuda.EventRecord(start, s))
		must(t, cuda.MemcpyHtoDAsync(x, uintptr(pinned), 4*n, s))
		must(t, cuda.MemsetD8Async(y, 0, 4*n, s))
		must(t, cuda.MemcpyDtoDAsync(y, x, 4*n, s))

		// A kernel compiled for this device: y = 2x + y.
		major, err := cuda.DeviceAttribute(0, cuda.AttrComputeCapabilityMajor)
		must(t, err)
		minor, err := cuda.DeviceAttribute(0, cuda.AttrComputeCapabilityMinor)
		must(t, err)
		ptx, cubin, log, err := nvrtc.Compile(saxpySrc, "saxpy.cu", []string{fmt.Sprintf("--gpu-architecture=sm_%d%d", major, minor), "--fmad=false"})
		must(t, err)
		t.Logf("nvrtc: %d bytes of PTX, %d of cubin, log %q", len(ptx), len(cubin), log)
		for _, image := range [][]byte{cubin, ptx} {
			m, err := cuda.ModuleLoadData(image)
			must(t, err)
			defer cuda.ModuleUnload(m)
		}
		m, err := cuda.ModuleLoadData(cubin)
		must(t, err)
		defer cuda.ModuleUnload(m)
		f, err := cuda.ModuleGetFunction(m, "saxpy")
		must(t, err)
		must(t, cuda.LaunchKernel(f, cuda.Dim3{X: n / 256, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, s,
			cuda.Arg(y), cuda.Arg(x), cuda.Arg(float32(2)), cuda.Arg(int32(n))))
		must(t, cuda.MemcpyDtoHAsync(uintptr(pinned), y, 4*n, s))
		must(t, cuda.EventRecord(end, s))
		must(t, cuda.StreamSynchronize(s))
		for i, v := range host {
			if v != 3*float32(i) {
				t.Fatalf("y[%d] = %v, want %v", i, v, 3*float32(i))
			}
		}
		if done, err := cuda.StreamQuery(s); err != nil || !done {
			t.Errorf("StreamQuery after sync = %v, %v", done, err)
		}
		if done, err := cuda.EventQuery(end); err != nil || !done {
			t.Errorf("EventQuery after sync = %v, %v", done, err)
		}
		el, err := cuda.EventElapsedTime(start, end)
		must(t, err)
		t.Logf("copies and kernel on the stream: %v", el)
		if el <= 0 {
			t.Errorf("elapsed %v", el)
		}

		// A second stream waits for an event of the first.
		s2, err := cuda.StreamCreate(cuda.StreamDefault)
		must(t, err)
		defer cuda.StreamDestroy(s2)
		ev, err := cuda.EventCreate(cuda.EventDisableTiming)
		must(t, err)
		defer cuda.EventDestroy(ev)
		must(t, cuda.MemsetD8Async(x, 1, 4*n, s))
		must(t, cuda.EventRecord(ev, s))
		must(t, cuda.StreamWaitEvent(s2, ev))
		must(t, cuda.MemcpyDtoDAsync(y, x, 4*n, s2))
		must(t, cuda.StreamSynchronize(s2))
		must(t, cuda.MemcpyDtoHBytes(got[:8], y))
		if !bytes.Equal(got[:8], []byte{1, 1, 1, 1, 1, 1, 1, 1}) {
			t.Errorf("StreamWaitEvent did not order the streams: %v", got[:8])
		}

		// Registered mmap memory, as devmem uses for node-shared buffers.
		mm, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_SHARED)
		must(t, err)
		defer syscall.Munmap(mm)
		addr := uintptr(unsafe.Pointer(&mm[0]))
		must(t, cuda.MemHostRegister(addr, len(mm), cuda.MemHostRegisterPortable))
		must(t, cuda.MemcpyDtoHAsync(addr, x, len(mm), s))
		must(t, cuda.StreamSynchronize(s))
		must(t, cuda.MemHostUnregister(addr))
		if mm[0] != 1 || mm[len(mm)-1] != 1 {
			t.Error("copy into registered memory")
		}
		if err := cuda.MemHostUnregister(addr); !cuda.IsCode(err, cuda.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED) {
			t.Errorf("second unregister = %v, want CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", err)
		}

		// IPC: a handle is made here; opening it needs another process.
		h, err := cuda.IpcGetMemHandle(x)
		must(t, err)
		if h == (cuda.IpcMemHandle{}) {
			t.Error("empty IPC handle")
		}

		// Errors from the real driver name the call and CUDA's name.
		_, err = cuda.MemAlloc(1 << 62)
		t.Logf("huge MemAlloc: %v", err)
		if !cuda.IsCode(err, cuda.CUDA_ERROR_OUT_OF_MEMORY) {
			t.Errorf("MemAlloc(4 EiB) = %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
		}
		_, err = cuda.ModuleGetFunction(m, "nosuch")
		t.Logf("missing kernel: %v", err)
		if !cuda.IsCode(err, cuda.CUDA_ERROR_NOT_FOUND) {
			t.Errorf("ModuleGetFunction(nosuch) = %v", err)
		}
		return cuda.CtxSynchronize()
	}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkGPUHostCallCost says what one driver call costs the host from
// Go against the same call made in a loop in C (issue 23.2: a loop of
// event records and NCCL calls from Go ran 0.5 µs an iteration slower
// than the same loop in C on an H100 host): the cgo crossing alone
// (cgo-noop), cuCtxGetCurrent, cuEventRecord with the context current, and
// EventRecordIn (the context checked inside the same C call). Records go
// 64 at a time on one stream, drained outside the timing. Each case
// reports ns a call from Go (go-ns) and from C (c-ns). Run it as
// GPUCOMM_GPU_TESTS=1 cuda.test -test.run XXX -test.bench GPUHostCallCost -test.benchtime 2000x
func BenchmarkGPUHostCallCost(b *testing.B) {
	ctx := benchContext(b)
	defer runtime.UnlockOSThread()
	s, err := cuda.StreamCreate(0)
	if err != nil {
		b.Fatal(err)
	}
	defer cuda.StreamDestroy(s)
	e, err := cuda.EventCreate(0)
	if err != nil {
		b.Fatal(err)
	}
	defer cuda.EventDestroy(e)
	const batch = 64
	fromGo := map[cuda.CallKind]func() error{
		cuda.CallNothing:          func() error { cuda.NoopCall(); return nil },
		cuda.CallCtxGetCurrent:    func() error { _, err := cuda.CtxGetCurrent(); return err },
		cuda.CallEventRecord:      func() error { return cuda.EventRecord(e, s) },
		cuda.CallEventRecordInCtx: func() error { return cuda.EventRecordIn(ctx, e, s) },
	}
	for _, c := range []struct {
		name string
		kind cuda.CallKind
	}{
		{"cgo-noop", cuda.CallNothing},
		{"ctx-get-current", cuda.CallCtxGetCurrent},
		{"event-record", cuda.CallEventRecord},
		{"event-record-in", cuda.CallEventRecordInCtx},
	} {
		b.Run(c.name, func(b *testing.B) {
			// Each sub-benchmark runs on a goroutine of its own: its
			// thread gets the context here, as the calls need.
			onThread(b, ctx)
			defer runtime.UnlockOSThread()
			call := fromGo[c.kind]
			var goT, cT time.Duration
			calls := 0
			for b.Loop() {
				t0 := time.Now()
				for range batch {
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
				goT += time.Since(t0)
				if err := cuda.StreamSynchronize(s); err != nil {
					b.Fatal(err)
				}
				d, err := cuda.TimeCalls(c.kind, batch, ctx, e, s)
				if err != nil {
					b.Fatal(err)
				}
				cT += d
				if err := cuda.StreamSynchronize(s); err != nil {
					b.Fatal(err)
				}
				calls += batch
			}
			b.ReportMetric(float64(goT.Nanoseconds())/float64(calls), "go-ns")
			b.ReportMetric(float64(cT.Nanoseconds())/float64(calls), "c-ns")
		})
	}
}

// BenchmarkGPUWaitLatency says what each way of waiting for a stream costs
// from the copy's queueing to the wait's end (issue 23.2: gpucomm's waits
// on no stream, which poll, took 1.06-1.19x C's cuStreamSynchronize at 16
// and 128 MiB): in C, cuStreamSynchronize (c-sync) and a loop of
// cuStreamQuery (c-poll); from Go, StreamSynchronize (go-sync), a loop of
// StreamQuery (go-poll) and the same yielding between queries
// (go-poll-yield, the nccl backend's first 200 µs of a wait). Each case
// alternates with c-sync, so each reports its median (us) and c-sync's in
// the same rounds (c-sync-us), and the queries a wait made. Run it as
// GPUCOMM_GPU_TESTS=1 cuda.test -test.run XXX -test.bench GPUWaitLatency -test.benchtime 200x
func BenchmarkGPUWaitLatency(b *testing.B) {
	ctx := benchContext(b)
	defer runtime.UnlockOSThread()
	const most = 128 << 20
	src, err := cuda.MemAlloc(most)
	if err != nil {
		b.Fatal(err)
	}
	defer cuda.MemFree(src)
	dst, err := cuda.MemAlloc(most)
	if err != nil {
		b.Fatal(err)
	}
	defer cuda.MemFree(dst)
	s, err := cuda.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		b.Fatal(err)
	}
	defer cuda.StreamDestroy(s)
	goWait := func(n int, wait func() (int64, error)) (time.Duration, int64, error) {
		t0 := time.Now()
		if err := cuda.MemcpyDtoDAsync(dst, src, n, s); err != nil {
			return 0, 0, err
		}
		polls, err := wait()
		return time.Since(t0), polls, err
	}
	poll := func(yield bool) func() (int64, error) {
		return func() (int64, error) {
			var n int64
			for {
				n++
				done, err := cuda.StreamQuery(s)
				if done || err != nil {
					return n, err
				}
				if yield {
					runtime.Gosched()
				}
			}
		}
	}
	cases := []struct {
		name string
		wait func(n int) (time.Duration, int64, error)
	}{
		{"c-poll", func(n int) (time.Duration, int64, error) { return cuda.TimeWait(true, dst, src, n, s) }},
		{"go-sync", func(n int) (time.Duration, int64, error) {
			return goWait(n, func() (int64, error) { return 0, cuda.StreamSynchronize(s) })
		}},
		{"go-poll", func(n int) (time.Duration, int64, error) { return goWait(n, poll(false)) }},
		{"go-poll-yield", func(n int) (time.Duration, int64, error) { return goWait(n, poll(true)) }},
	}
	for _, size := range []int{8, 2 << 20, 16 << 20, most} {
		for _, c := range cases {
			b.Run(fmt.Sprintf("%dB/%s", size, c.name), func(b *testing.B) {
				onThread(b, ctx)
				defer runtime.UnlockOSThread()
				var mine, base []float64
				var polls int64
				for b.Loop() {
					d, p, err := c.wait(size)
					if err != nil {
						b.Fatal(err)
					}
					mine, polls = append(mine, float64(d.Nanoseconds())/1e3), polls+p
					d, _, err = cuda.TimeWait(false, dst, src, size, s)
					if err != nil {
						b.Fatal(err)
					}
					base = append(base, float64(d.Nanoseconds())/1e3)
				}
				b.ReportMetric(medianOf(mine), "us")
				b.ReportMetric(medianOf(base), "c-sync-us")
				b.ReportMetric(float64(polls)/float64(len(mine)), "polls")
			})
		}
	}
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// benchContext skips unless GPUCOMM_GPU_TESTS=1, and makes device 0's
// primary context current on the benchmark's thread, which it locks: the
// caller unlocks it when done (defer runtime.UnlockOSThread()).
func benchContext(b *testing.B) cuda.Context {
	b.Helper()
	needGPU(b)
	runtime.LockOSThread()
	ctx, err := cuda.PrimaryCtxRetain(0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cuda.PrimaryCtxRelease(0) })
	if err := cuda.CtxSetCurrent(ctx); err != nil {
		b.Fatal(err)
	}
	return ctx
}

// onThread locks a sub-benchmark's goroutine to its thread and makes ctx
// current there (b.Run runs each on a goroutine of its own); the caller
// unlocks it when done.
func onThread(b *testing.B, ctx cuda.Context) {
	b.Helper()
	runtime.LockOSThread()
	if err := cuda.CtxSetCurrent(ctx); err != nil {
		b.Fatal(err)
	}
	if cur, err := cuda.CtxGetCurrent(); err != nil || cur != ctx {
		b.Fatalf("context current on the benchmark's thread: %v, %v; want %v", cur, err, ctx)
	}
}
