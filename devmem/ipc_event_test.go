package devmem

import (
	"errors"
	"testing"
)

// The interprocess events' answers where there are none: a host device
// makes and opens none (ErrUnsupported), a nil device is an argument error,
// and no host event exports. (The cuda driver's are TestCUDAOnGPUIPCEvent...)
func TestIPCEventsOnAHostDeviceSayUnsupported(t *testing.T) {
	d := NewHostDevice()
	if e, err := d.NewIPCEvent(); !errors.Is(err, ErrUnsupported) || e != nil {
		t.Errorf("NewIPCEvent on a host device = %v, %v; want ErrUnsupported", e, err)
	}
	h := IPCEventHandle{1, 2, 3}
	if e, err := d.OpenIPCEvent(h); !errors.Is(err, ErrUnsupported) || e != nil {
		t.Errorf("OpenIPCEvent on a host device = %v, %v; want ErrUnsupported", e, err)
	}
	var nd *Device
	if _, err := nd.NewIPCEvent(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("NewIPCEvent on a nil device = %v, want ErrInvalidArgument", err)
	}
	if _, err := nd.OpenIPCEvent(h); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("OpenIPCEvent on a nil device = %v, want ErrInvalidArgument", err)
	}
	e, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.ExportIPC(); !errors.Is(err, ErrInvalidArgument) || got != (IPCEventHandle{}) {
		t.Errorf("ExportIPC of a host event = %x, %v; want ErrInvalidArgument", got, err)
	}
	if err := e.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ExportIPC(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ExportIPC of a destroyed event = %v, want ErrInvalidArgument", err)
	}
	if st := d.Stats(); st != (Stats{}) {
		t.Errorf("Stats after refused interprocess events: %+v", st)
	}
}

// A task on a host stream runs as a host function, in order, with no
// handles, its error and panic reported by Synchronize; a nil stream or
// function is refused. (internal/devhook's tests call it through Task; the
// cuda driver's are TestCUDAOnGPUTask....)
func TestTaskOnAHostStreamRunsAsAHostFunction(t *testing.T) {
	d := NewHostDevice()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	var order []string
	ctx, handle := uintptr(1), uintptr(1)
	release := make(chan struct{})
	if err := s.HostFunc(func() error { <-release; order = append(order, "before"); return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := s.task(func(c, h uintptr) error { ctx, handle = c, h; order = append(order, "task"); return boom }); err != nil {
		t.Fatal(err)
	}
	if err := s.HostFunc(func() error { order = append(order, "after"); return nil }); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := s.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("Synchronize = %v, want the task's error", err)
	}
	if len(order) != 3 || order[0] != "before" || order[1] != "task" || order[2] != "after" || ctx != 0 || handle != 0 {
		t.Errorf("ran %q with handles %#x, %#x; want before, task, after with 0, 0", order, ctx, handle)
	}
	if err := s.task(func(c, h uintptr) error { panic("task panic") }); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err == nil {
		t.Error("Synchronize after a task that panicked = nil, want the panic as an error")
	}
	var ns *Stream
	if err := ns.task(func(c, h uintptr) error { return nil }); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("task on a nil stream = %v, want ErrInvalidArgument", err)
	}
	if err := s.task(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("task of a nil function = %v, want ErrInvalidArgument", err)
	}
}
