package devmem

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// asRemote re-encodes h, a handle of host memory of this process, as if
// another process had exported it: its header and its driver bytes name,
// as the exporter, a thread of this process other than the main one, whose
// /proc entry opens the same descriptors (/proc/TID/fd). OpenIPC then maps
// the memfd as it maps another process's, which lets one process test the
// rules of remote mappings. (A handle whose header names one process and
// its driver bytes another is refused.)
func asRemote(t *testing.T, h IPCHandle) IPCHandle {
	t.Helper()
	tid := uint32(otherThread())
	return reseal(t, h, func(f *handleFields) {
		x, err := parseHostIPC(f.drv)
		if err != nil {
			t.Fatal(err)
		}
		x.pid = tid
		f.pid, f.drv = tid, x.bytes()
	})
}

// otherThread is the id of a thread of this process that is not its main
// thread and lives as long as the process: a goroutine keeps it locked.
var otherThread = sync.OnceValue(func() int {
	for {
		tid := make(chan int)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread stays, and stays this goroutine's
			tid <- unix.Gettid()
			select {}
		}()
		if id := <-tid; id != os.Getpid() {
			return id
		}
	}
})

// hostFD is the memfd descriptor number of host memory b.
func hostFD(t *testing.T, b Buffer) int {
	t.Helper()
	if b.a.shared == nil {
		t.Fatal("not host-driver memory")
	}
	return b.a.shared.fd
}

// The GPU's rule, on the host: this process keeps a view of memory the
// exporter then frees; the exporter allocates again under the same
// descriptor (a GPU: at the same address) and exports. Opening the new
// handle is refused with ErrAlreadyMapped, changing nothing; once the stale
// view is closed it opens, and reads the new memory.
func TestIPCOpenBesideAStaleViewIsAlreadyMapped(t *testing.T) {
	d := NewHostDevice()
	const n = 4096
	a := exportFilled(t, d, 11, n)
	ha, err := a.Export()
	if err != nil {
		t.Fatal(err)
	}
	stale, err := d.OpenIPC(asRemote(t, ha))
	if err != nil {
		t.Fatal(err)
	}
	fd := hostFD(t, a)
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	// The kernel hands out the lowest free descriptor: the freed one, unless
	// something took it meanwhile; keep what takes another and try again.
	var b Buffer
	var held []Buffer
	for range 20 {
		b = exportFilled(t, d, 12, n)
		if hostFD(t, b) == fd {
			break
		}
		held = append(held, b)
	}
	for _, h := range held {
		h.Free()
	}
	defer b.Free()
	if hostFD(t, b) != fd {
		t.Fatalf("no allocation took descriptor %d again: the case is not set up", fd)
	}
	hb, err := b.Export()
	if err != nil {
		t.Fatal(err)
	}
	remoteB := asRemote(t, hb)
	v, err := d.OpenIPC(remoteB)
	if !errors.Is(err, ErrAlreadyMapped) || !errors.Is(err, ErrBadHandle) || !v.IsZero() {
		t.Fatalf("OpenIPC beside a stale view = %v, %v; want ErrAlreadyMapped and ErrBadHandle", v, err)
	}
	if st := d.Stats(); st.Opened != 1 || len(mappings) != 1 || len(hostSlots) != 1 {
		t.Fatalf("after the refused open: Opened %d, %d mappings, %d places; want 1, 1, 1", st.Opened, len(mappings), len(hostSlots))
	}
	// The stale view still reads the freed memory's bytes.
	if got, _ := stale.Bytes(); !bytes.Equal(got, fill(11, n)) {
		t.Error("the stale view changed")
	}
	if err := stale.CloseIPC(); err != nil {
		t.Fatal(err)
	}
	v, err = d.OpenIPC(remoteB)
	if err != nil {
		t.Fatalf("OpenIPC after the stale view closed: %v", err)
	}
	got := bytes.Repeat([]byte{0xA5}, n)
	if err := CopyToHost(got, v, nil); err != nil {
		t.Fatal(err)
	}
	want := fill(12, n)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("the new memory: byte %d is %#x, want %#x", i, got[i], want[i])
		}
	}
	if err := v.CloseIPC(); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Opened != 0 || len(mappings) != 0 || len(hostSlots) != 0 {
		t.Errorf("after the last close: Opened %d, %d mappings, %d places", st.Opened, len(mappings), len(hostSlots))
	}
}

// onceDriver is the host driver with the GPU's rule on its own mappings: an
// allocation maps once; a second ipcOpen while the first mapping is not
// unmapped yet fails, and unmapping takes a while (as cuIpcCloseMemHandle
// does), so that an open racing a close shows.
type onceDriver struct {
	*hostDriver
	mu      sync.Mutex
	live    map[[64]byte]bool
	byAddr  map[uintptr][64]byte
	refused int
}

var errTwice = errors.New("test driver: the allocation is mapped already")

func (o *onceDriver) ipcOpen(h [64]byte, fd int, need int) (*allocation, error) {
	o.mu.Lock()
	if o.live[h] {
		o.refused++
		o.mu.Unlock()
		return nil, errTwice
	}
	o.live[h] = true
	o.mu.Unlock()
	a, err := o.hostDriver.ipcOpen(h, fd, need)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		delete(o.live, h)
		return nil, err
	}
	o.byAddr[a.addr] = h
	return a, nil
}

func (o *onceDriver) ipcClose(a *allocation) error {
	time.Sleep(200 * time.Microsecond)
	err := o.hostDriver.ipcClose(a)
	o.mu.Lock()
	delete(o.live, o.byAddr[a.addr])
	delete(o.byAddr, a.addr)
	o.mu.Unlock()
	return err
}

// Goroutines open and close one allocation over and over: the last close
// unmaps before any open can map it again, so the driver never sees a
// second mapping (before the fix, CloseIPC unmapped after releasing its
// lock and an open in between mapped the allocation twice).
func TestIPCCloseRacingAnOpenNeverMapsTwice(t *testing.T) {
	d := NewHostDevice()
	od := &onceDriver{hostDriver: &hostDriver{dev: d}, live: map[[64]byte]bool{}, byAddr: map[uintptr][64]byte{}}
	d.drv = od
	const n = 8192
	src := NewHostDevice()
	buf := exportFilled(t, src, 13, n)
	defer buf.Free()
	h, err := buf.Export()
	if err != nil {
		t.Fatal(err)
	}
	h = asRemote(t, h)
	want := fill(13, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				v, err := d.OpenIPC(h)
				if err != nil {
					errs <- err
					return
				}
				if got, _ := v.Bytes(); !bytes.Equal(got, want) {
					errs <- errors.New("a view reads other bytes")
				}
				if err := v.CloseIPC(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if od.refused != 0 {
		t.Errorf("the driver was asked to map the allocation while it was mapped %d times", od.refused)
	}
	if st := d.Stats(); st.Opened != 0 || len(mappings) != 0 {
		t.Errorf("left: Opened %d, %d mappings", st.Opened, len(mappings))
	}
}
