package devhook

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/devhook/table"
)

// The GPU side of these functions (the cuda driver's polling, hand-over and
// deferral, the raw handles, VMM memory) is tested in devmem's
// TestCUDAOnGPU tests, on a GPU or on devmem's fake libcuda; these check
// the host device and that devhook reaches the right devmem method.

func TestDevmemFilledEveryHook(t *testing.T) {
	if _, ok := table.Get[*devmem.Stream, *devmem.Device, devmem.Buffer, *devmem.Event](); !ok {
		t.Fatal("devmem left internal/devhook/table incomplete")
	}
	if _, ok := table.Get[int, int, int, int](); ok {
		t.Fatal("table.Get answered for types devmem did not register")
	}
}

func newStream(t *testing.T) *devmem.Stream {
	t.Helper()
	s, err := devmem.NewHostDevice().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

// log records the order in which a stream's work ran.
type log struct {
	mu   sync.Mutex
	runs []string
}

func (l *log) add(name string) func() error {
	return func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.runs = append(l.runs, name)
		return nil
	}
}

func (l *log) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// slowly is work that runs late unless something waits for it, so that
// work queued behind it runs before it unless the stream keeps the order.
func slowly(fn func() error) func() error {
	return func() error { time.Sleep(5 * time.Millisecond); return fn() }
}

func TestHostWaitAndHostFuncDeferredKeepStreamOrderOnAHostDevice(t *testing.T) {
	s := newStream(t)
	var l log
	boom := errors.New("boom")
	never := func() (bool, error) { return false, nil }
	must(t, s.HostFunc(slowly(l.add("first"))))
	must(t, HostWait(s, slowly(l.add("wait")), never, true))
	must(t, HostFuncDeferred(s, slowly(l.add("deferred"))))
	must(t, HostWait(s, func() error { l.add("failing wait")(); return boom }, never, false))
	must(t, s.HostFunc(l.add("last")))
	if err := s.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("Synchronize = %v, want the failing wait's error", err)
	}
	want := []string{"first", "wait", "deferred", "failing wait", "last"}
	if got := l.got(); !slices.Equal(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
	if err := s.Synchronize(); err != nil {
		t.Errorf("second Synchronize = %v, want nil (the error was reported once)", err)
	}
}

func TestHostWaitAndHostFuncDeferredOnANilStreamRunNow(t *testing.T) {
	boom := errors.New("boom")
	if err := HostWait(nil, func() error { return boom }, nil, true); !errors.Is(err, boom) {
		t.Errorf("HostWait(nil stream) = %v, want its wait's error at once", err)
	}
	if err := HostFuncDeferred(nil, func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("HostFuncDeferred(nil stream) = %v, want its function's error at once", err)
	}
}

func TestBadArgumentsQueueNothing(t *testing.T) {
	s := newStream(t)
	ran := false
	mark := func() error { ran = true; return nil }
	if err := HostWait(s, mark, nil, false); !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("HostWait without a poll = %v, want ErrInvalidArgument", err)
	}
	must(t, s.Synchronize())
	gone := newStream(t)
	must(t, gone.Destroy())
	never := func() (bool, error) { return false, nil }
	for name, call := range map[string]func() error{
		"HostWait":         func() error { return HostWait(gone, mark, never, true) },
		"HostFuncDeferred": func() error { return HostFuncDeferred(gone, mark) },
		"Enqueue":          func() error { return Enqueue(gone, func(uintptr) error { return mark() }) },
		"Task":             func() error { return Task(gone, func(uintptr, uintptr) error { return mark() }) },
	} {
		if err := call(); !errors.Is(err, devmem.ErrInvalidArgument) {
			t.Errorf("%s on a destroyed stream = %v, want ErrInvalidArgument", name, err)
		}
	}
	if ran {
		t.Error("work given with a bad argument ran")
	}
}

func TestEnqueueOnAHostDeviceRunsNowWithNoHandle(t *testing.T) {
	boom := errors.New("boom")
	for name, s := range map[string]*devmem.Stream{"nil": nil, "host": newStream(t)} {
		handle := uintptr(1)
		err := Enqueue(s, func(h uintptr) error { handle = h; return boom })
		if !errors.Is(err, boom) || handle != 0 {
			t.Errorf("Enqueue on a %s stream = %v with handle %#x, want fn's error at once with handle 0", name, err, handle)
		}
	}
}

func TestHandlesOfAHostDeviceAreZero(t *testing.T) {
	d := devmem.NewHostDevice()
	s := newStream(t)
	if h := StreamHandle(s); h != 0 {
		t.Errorf("StreamHandle of a host stream = %#x, want 0", h)
	}
	if h := StreamHandle(nil); h != 0 {
		t.Errorf("StreamHandle(nil) = %#x, want 0", h)
	}
	if c := Context(d); c != 0 {
		t.Errorf("Context of a host device = %#x, want 0", c)
	}
	if c := Context(nil); c != 0 {
		t.Errorf("Context(nil) = %#x, want 0", c)
	}
	e, err := d.NewEvent()
	must(t, err)
	defer e.Destroy()
	if h := EventHandle(e); h != 0 {
		t.Errorf("EventHandle of a host event = %#x, want 0", h)
	}
	if h := EventHandle(nil); h != 0 {
		t.Errorf("EventHandle(nil) = %#x, want 0", h)
	}
}

// Task on a host stream: in line with the host work before and after it,
// never on the caller's goroutine (the caller returns while fn blocks), with
// no handles; its error and its panic come back from Synchronize; a nil
// stream is refused and fn does not run.
func TestTaskOnAHostDevice(t *testing.T) {
	s := newStream(t)
	var l log
	must(t, s.HostFunc(slowly(l.add("before"))))
	var ctx, handle uintptr = 1, 1
	boom := errors.New("boom")
	must(t, Task(s, func(c, h uintptr) error { ctx, handle = c, h; l.add("task")(); return boom }))
	must(t, s.HostFunc(l.add("after")))
	if err := s.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("Synchronize = %v, want the task's error", err)
	}
	if want := []string{"before", "task", "after"}; !slices.Equal(l.got(), want) || ctx != 0 || handle != 0 {
		t.Errorf("ran %q with handles %#x, %#x; want %q with 0, 0", l.got(), ctx, handle, want)
	}

	// On the idle stream: Task returns while fn waits for a channel that
	// is closed only after it has (a watchdog ends a Task that did not).
	release := make(chan struct{})
	started := make(chan struct{})
	watchdog := time.AfterFunc(10*time.Second, func() { close(release) })
	must(t, Task(s, func(uintptr, uintptr) error { close(started); <-release; return nil }))
	if !watchdog.Stop() {
		t.Fatal("Task returned only once the watchdog released its function")
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("a task on an idle stream never started without a Synchronize")
	}
	close(release)
	must(t, s.Synchronize())

	must(t, Task(s, func(uintptr, uintptr) error { panic("task panic") }))
	if err := s.Synchronize(); err == nil || !strings.Contains(err.Error(), "task panic") {
		t.Errorf("Synchronize after a task that panicked = %v, want the panic as an error", err)
	}
	ran := false
	if err := Task(nil, func(uintptr, uintptr) error { ran = true; return nil }); !errors.Is(err, devmem.ErrInvalidArgument) || ran {
		t.Errorf("Task on a nil stream = %v (fn ran: %v), want ErrInvalidArgument and nothing run", err, ran)
	}
}

func TestIsVMMIsFalseForHostMemory(t *testing.T) {
	d := devmem.NewHostDevice()
	plain, err := d.Alloc(64)
	must(t, err)
	defer plain.Free()
	shared, err := d.AllocShared(64)
	must(t, err)
	defer shared.Free()
	h, err := shared.Export()
	must(t, err)
	view, err := d.OpenIPC(h)
	must(t, err)
	defer view.CloseIPC()
	part, err := view.Slice(8, 8)
	must(t, err)
	for name, b := range map[string]devmem.Buffer{"zero": {}, "Alloc": plain, "AllocShared": shared, "an opened view": view, "a slice of it": part} {
		if IsVMM(b) {
			t.Errorf("IsVMM of %s host memory = true", name)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
