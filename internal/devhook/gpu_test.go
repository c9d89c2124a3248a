package devhook

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/devmem"
)

// needGPU opens cuda:0: a GPU, or devmem's fake libcuda where
// GPUCOMM_CUDA_LIB points at it; it skips where none opens.
func needGPU(t *testing.T) *devmem.Device {
	t.Helper()
	d, err := devmem.Open("cuda:0", 0)
	if err != nil {
		t.Skipf("no usable CUDA device: %v", err)
	}
	return d
}

// TestOnGPUHooksReachTheCUDAStream: on a GPU the handles are the stream's
// and the device's, Enqueue hands fn the stream's handle once the host work
// queued before it is done, and HostWait's wait is finished once.
func TestOnGPUHooksReachTheCUDAStream(t *testing.T) {
	d := needGPU(t)
	s, err := d.NewStream()
	must(t, err)
	defer func() { must(t, s.Destroy()) }()
	h := StreamHandle(s)
	if h == 0 || Context(d) == 0 {
		t.Fatalf("StreamHandle = %#x, Context = %#x on %v, want both set", h, Context(d), d)
	}
	var hostDone atomic.Bool
	must(t, s.HostFunc(func() error { time.Sleep(5 * time.Millisecond); hostDone.Store(true); return nil }))
	var got uintptr
	var afterHost bool
	must(t, Enqueue(s, func(handle uintptr) error { got, afterHost = handle, hostDone.Load(); return nil }))
	// The wait is finished once, by the stream's poll or by the
	// Synchronize that takes it over, never both.
	var polled, waited atomic.Int32
	must(t, HostWait(s, func() error { waited.Add(1); return nil }, func() (bool, error) { polled.Add(1); return true, nil }, false))
	must(t, s.Synchronize())
	if got != h || !afterHost {
		t.Errorf("Enqueue gave handle %#x (after the host work: %v), want %#x after it", got, afterHost, h)
	}
	if polled.Load()+waited.Load() != 1 {
		t.Errorf("the wait was finished %d times by its poll and %d by its wait, want once in all", polled.Load(), waited.Load())
	}
}

// TestOnGPUIsVMMOfSharedMemory: AllocShared's VMM memory and its slices
// are VMM, Alloc's is not.
func TestOnGPUIsVMMOfSharedMemory(t *testing.T) {
	d := needGPU(t)
	plain, err := d.Alloc(64)
	must(t, err)
	defer func() { must(t, plain.Free()) }()
	if IsVMM(plain) {
		t.Error("IsVMM of Alloc memory = true")
	}
	t.Setenv(devmem.IPCModeEnv, "vmm")
	shared, err := d.AllocShared(64)
	if errors.Is(err, devmem.ErrUnsupported) {
		t.Skipf("no VMM here: %v", err)
	}
	must(t, err)
	defer func() { must(t, shared.Free()) }()
	part, err := shared.Slice(8, 8)
	must(t, err)
	if !IsVMM(shared) || !IsVMM(part) {
		t.Errorf("IsVMM of VMM memory = %v, of a slice of it %v; want true", IsVMM(shared), IsVMM(part))
	}
}

// TestOnGPUTaskAndEventHandle: a task gets the device's context and the
// stream's handle, after the host work before it, and the work it issues
// there is the stream's (a Synchronize waits for it); EventHandle is each
// event's own CUevent, an interprocess one's too.
func TestOnGPUTaskAndEventHandle(t *testing.T) {
	d := needGPU(t)
	s, err := d.NewStream()
	must(t, err)
	defer func() { must(t, s.Destroy()) }()
	var hostDone atomic.Bool
	must(t, s.HostFunc(func() error { time.Sleep(5 * time.Millisecond); hostDone.Store(true); return nil }))
	var gotCtx, gotH uintptr
	var afterHost bool
	must(t, Task(s, func(ctx, h uintptr) error { gotCtx, gotH, afterHost = ctx, h, hostDone.Load(); return nil }))
	must(t, s.Synchronize())
	if gotCtx != Context(d) || gotH != StreamHandle(s) || !afterHost {
		t.Errorf("Task got context %#x and stream %#x (after the host work: %v), want %#x and %#x after it", gotCtx, gotH, afterHost, Context(d), StreamHandle(s))
	}
	e1, err := d.NewEvent()
	must(t, err)
	defer func() { must(t, e1.Destroy()) }()
	e2, err := d.NewIPCEvent()
	must(t, err)
	defer func() { must(t, e2.Destroy()) }()
	h1, h2 := EventHandle(e1), EventHandle(e2)
	if h1 == 0 || h2 == 0 || h1 == h2 {
		t.Errorf("EventHandle of two events = %#x and %#x, want two CUevents", h1, h2)
	}
}
