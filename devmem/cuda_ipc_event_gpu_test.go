//go:build cgo

package devmem

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Interprocess events (NewIPCEvent, ExportIPC, OpenIPCEvent), on a GPU and
// on the fake library (TestCUDADriverOnAFakeLibrary), whose events keep
// their record numbers in memory the processes share.

func init() {
	cudaChildRoles["ipc-event-waiter"] = cudaChildIPCEventWaiter
}

// ipcEventSize sizes the exporter's work in
// TestCUDAOnGPUIPCEventOrdersAnotherProcessesStream: on a GPU, 6000 copies
// of 64 MiB (a few tenths of a second on an H100 or H200), so that the
// other process's wait reaches CUDA long before the work is done; the fake
// runs stream work only when something waits for it, so little does there.
func ipcEventSize() (n, rounds int) {
	if onFake() {
		return 1 << 20, 4
	}
	return 64 << 20, 3000
}

// TestCUDAOnGPUIPCEventOrdersAnotherProcessesStream: the exporter queues a
// long chain of copies that ends by writing a buffer another process has
// open, and records an interprocess event behind it; the other process,
// told so, makes a stream of its own wait for the event it opened and
// copies the buffer out on that stream. The copy must see the chain's
// final bytes, never the buffer's first ones: the wait held it back until
// the exporter's work was done (on the fake, until the exporter
// synchronized, which it does only once the other process's wait and copy
// are queued).
func TestCUDAOnGPUIPCEventOrdersAnotherProcessesStream(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	n, rounds := ipcEventSize()
	b := mustAlloc(t, d, n, false)
	x := mustAlloc(t, d, n, false)
	y := mustAlloc(t, d, n, false)
	must(t, Memset(b, 0x5a, nil))
	bh, err := b.Export()
	must(t, err)
	ev, err := d.NewIPCEvent()
	must(t, err)
	defer func() { must(t, ev.Destroy()) }()
	eh, err := ev.ExportIPC()
	must(t, err)
	c := startCUDAChild(t, "ipc-event-waiter", "GCT_HANDLE="+textOf(t, bh), "GCT_EVENT="+hex.EncodeToString(eh[:]))
	if got := c.next(t); got != "opened" {
		t.Fatalf("child: %s", got)
	}
	s := mustStream(t, d)
	must(t, Memset(x, 0xab, s))
	for range rounds {
		must(t, CopyN(y, x, n, s))
		must(t, CopyN(x, y, n, s))
	}
	must(t, CopyN(b, x, n, s))
	must(t, ev.Record(s))
	fmt.Fprintln(c.stdin, "recorded")
	waiting := c.next(t)
	if !strings.HasPrefix(waiting, "waiting") {
		t.Fatalf("child: %s", waiting)
	}
	if onFake() && waiting != "waiting done=false" {
		t.Errorf("child, before the exporter ran its work: %s; want the opened event not reached", waiting)
	}
	t.Logf("child: %s (the exporter's work not yet done when the wait was queued: done=false)", waiting)
	must(t, s.Synchronize())
	if got := c.next(t); got != "ok" {
		t.Errorf("child: %s", got)
	}
	c.wait(t)
}

// cudaChildIPCEventWaiter opens GCT_HANDLE and GCT_EVENT, checks what an
// opened event refuses, says "opened", waits for the parent's "recorded",
// then queues on a stream of its own a wait for the event and a copy of
// the buffer into pinned memory, says whether the event was reached then,
// synchronizes and says "ok" when every byte is the parent's 0xab.
func cudaChildIPCEventWaiter() error {
	h, d, err := cudaChildOpen()
	if err != nil {
		return err
	}
	v, err := d.OpenIPC(h)
	if err != nil {
		return err
	}
	var eh IPCEventHandle
	raw, err := hex.DecodeString(os.Getenv("GCT_EVENT"))
	if err != nil || len(raw) != len(eh) {
		return fmt.Errorf("GCT_EVENT: %d bytes, %v", len(raw), err)
	}
	copy(eh[:], raw)
	ev, err := d.OpenIPCEvent(eh)
	if err != nil {
		return err
	}
	s, err := d.NewStream()
	if err != nil {
		return err
	}
	pin, err := d.AllocPinned(v.Len())
	if err != nil {
		return err
	}
	var problems []string
	if err := ev.Record(s); !errors.Is(err, ErrUnsupported) {
		problems = append(problems, fmt.Sprintf("Record of an opened event = %v, want ErrUnsupported", err))
	}
	if _, err := ev.ExportIPC(); !errors.Is(err, ErrInvalidArgument) {
		problems = append(problems, fmt.Sprintf("ExportIPC of an opened event = %v, want ErrInvalidArgument", err))
	}
	if _, err := Elapsed(ev, ev); !errors.Is(err, ErrInvalidArgument) {
		problems = append(problems, fmt.Sprintf("Elapsed of an opened event = %v, want ErrInvalidArgument", err))
	}
	if len(problems) > 0 {
		cudaReport("%s", strings.Join(problems, "; "))
		return nil
	}
	cudaReport("opened")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "recorded\n" {
		return fmt.Errorf("waiting for the parent: %q, %v", line, err)
	}
	if err := s.WaitEvent(ev); err != nil {
		return err
	}
	if err := CopyN(pin, v, v.Len(), s); err != nil {
		return err
	}
	done, err := ev.Done()
	if err != nil {
		return err
	}
	cudaReport("waiting done=%v", done)
	if err := s.Synchronize(); err != nil {
		return err
	}
	got, _ := pin.Bytes()
	bad := -1
	for i, c := range got {
		if c != 0xab {
			bad = i
			break
		}
	}
	if err := errors.Join(ev.Destroy(), s.Destroy(), pin.Free(), v.CloseIPC()); err != nil {
		return err
	}
	switch {
	case bad >= 0:
		cudaReport("byte %d of %d is %#x after the wait, want the exporter's 0xab", bad, len(got), got[bad])
	case d.Stats() != (Stats{}):
		cudaReport("Stats at the end: %+v", d.Stats())
	default:
		cudaReport("ok")
	}
	return nil
}

// TestCUDAOnGPUIPCEventInOneProcess: an interprocess event orders this
// process's streams as NewEvent's do and exports one handle; it has no
// timing; only it exports; the zero handle and garbage are refused with
// ErrInvalidArgument; and its handle opens here too (on the fake, and on a
// GPU whose driver allows it), as an event another stream waits for, which
// this process may not record.
func TestCUDAOnGPUIPCEventInOneProcess(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s1, s2 := mustStream(t, d), mustStream(t, d)
	ev, err := d.NewIPCEvent()
	must(t, err)
	defer func() { must(t, ev.Destroy()) }()
	timed := mustEvent(t, d)
	h, err := ev.ExportIPC()
	must(t, err)
	if again, err := ev.ExportIPC(); err != nil || again != h || h == (IPCEventHandle{}) {
		t.Errorf("ExportIPC again = %x, %v; want the same non-zero handle %x", again, err, h)
	}
	if _, err := timed.ExportIPC(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ExportIPC of NewEvent's event = %v, want ErrInvalidArgument", err)
	}
	var nilEvent *Event
	if _, err := nilEvent.ExportIPC(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ExportIPC of a nil event = %v, want ErrInvalidArgument", err)
	}

	// Locally it orders streams as any event does.
	const n = 16 << 20
	x := mustAlloc(t, d, n, false)
	y := mustAlloc(t, d, n, false)
	pin := mustAlloc(t, d, n, true)
	must(t, Memset(y, 0, nil))
	must(t, timed.Record(s1))
	must(t, Memset(x, 0xcd, s1))
	must(t, CopyN(y, x, n, s1))
	must(t, ev.Record(s1))
	must(t, s2.WaitEvent(ev))
	must(t, CopyN(pin, y, n, s2))
	must(t, s2.Synchronize())
	hp, _ := pin.Bytes()
	cudaSameBytes(t, "bytes s2 copied after waiting for s1's interprocess event", hp, []byte(strings.Repeat("\xcd", n)))
	must(t, ev.Synchronize())
	if done, err := ev.Done(); err != nil || !done {
		t.Errorf("Done after Synchronize = %v, %v", done, err)
	}
	for name, pair := range map[string][2]*Event{"from": {ev, timed}, "to": {timed, ev}} {
		if el, err := Elapsed(pair[0], pair[1]); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "no timing") {
			t.Errorf("Elapsed %s an interprocess event = %v, %v; want ErrInvalidArgument saying it has no timing", name, el, err)
		}
	}

	for name, bad := range map[string]IPCEventHandle{"zero": {}, "garbage": garbageHandle(h)} {
		e, err := d.OpenIPCEvent(bad)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("OpenIPCEvent of a %s handle = %v, want ErrInvalidArgument", name, err)
		}
		if e != nil {
			t.Errorf("OpenIPCEvent of a %s handle returned an event", name)
			e.Destroy()
		}
	}

	// CUDA documents opening an event's handle in another process; the
	// fake opens it here too, and where a GPU's driver refuses, the refusal
	// is logged (the two-process test covers opened events there).
	opened, err := d.OpenIPCEvent(h)
	if err != nil && !onFake() {
		t.Logf("this driver does not open an event's handle in the process that exported it: %v", err)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("OpenIPCEvent in the exporting process = %v, want success or ErrInvalidArgument", err)
		}
		return
	}
	must(t, err)
	if err := opened.Record(s2); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Record of an opened event = %v, want ErrUnsupported", err)
	}
	if err := opened.Record(nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Record on the nil stream of an opened event = %v, want ErrUnsupported", err)
	}
	if _, err := opened.ExportIPC(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ExportIPC of an opened event = %v, want ErrInvalidArgument", err)
	}
	must(t, Memset(x, 0xef, s1))
	must(t, CopyN(y, x, n, s1))
	must(t, ev.Record(s1))
	must(t, s2.WaitEvent(opened))
	must(t, CopyN(pin, y, n, s2))
	must(t, s2.Synchronize())
	cudaSameBytes(t, "bytes s2 copied after waiting for the opened event", hp, []byte(strings.Repeat("\xef", n)))
	must(t, opened.Synchronize())
	if done, err := opened.Done(); err != nil || !done {
		t.Errorf("Done of the opened event after Synchronize = %v, %v", done, err)
	}
	must(t, opened.Destroy())
	if err := opened.Destroy(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("second Destroy of an opened event = %v, want ErrInvalidArgument", err)
	}
	if err := s2.WaitEvent(opened); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("WaitEvent on a destroyed opened event = %v, want ErrInvalidArgument", err)
	}
	// The exporter's event lives on.
	must(t, ev.Record(s1))
	must(t, ev.Synchronize())
}

// garbageHandle is h with every byte changed.
func garbageHandle(h IPCEventHandle) IPCEventHandle {
	for i := range h {
		h[i] ^= 0xa5
	}
	return h
}
