package ipccache

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// hostFD is the exporter's descriptor number a host-device handle names
// (the host driver's bytes: pid, then descriptor, at the handle's driver
// bytes, offset 128): on the host device, the place that
// devmem.ErrAlreadyMapped keys on.
func hostFD(t *testing.T, h devmem.IPCHandle) uint32 {
	t.Helper()
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[132:])
}

// serveChild allocates, slices, frees and reallocates buffers on the
// parent's word, one command a line on stdin, one answer a line on stdout:
//
//	alloc ID BYTES SEED    -> HANDLE ADDR   (a buffer filled with pattern bytes)
//	slice ID OFF BYTES     -> HANDLE        (a range of it)
//	free ID                -> ok
//	realloc ID BYTES SEED  -> HANDLE ADDR   (free ID, then allocate in its place: placeOf)
func serveChild() error {
	dev, err := testDevice()
	if err != nil {
		return err
	}
	bufs := map[string]devmem.Buffer{}
	alloc := func(n int, seed uint64) (devmem.Buffer, error) {
		b, err := dev.Alloc(n)
		if err != nil {
			return b, err
		}
		return b, devmem.CopyFromHost(b, patternN(seed, n), nil)
	}
	say := func(b devmem.Buffer, addr bool) error {
		h, err := b.Export()
		if err != nil {
			return err
		}
		txt, _ := h.MarshalText()
		if addr {
			fmt.Printf("%s %d\n", txt, b.Addr())
		} else {
			fmt.Printf("%s\n", txt)
		}
		return nil
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		num := func(i int) int {
			v, _ := strconv.Atoi(f[i])
			return v
		}
		switch {
		case len(f) == 4 && f[0] == "alloc":
			b, err := alloc(num(2), uint64(num(3)))
			if err != nil {
				return err
			}
			bufs[f[1]] = b
			if err := say(b, true); err != nil {
				return err
			}
		case len(f) == 4 && f[0] == "slice":
			v, err := bufs[f[1]].Slice(num(2), num(3))
			if err != nil {
				return err
			}
			if err := say(v, false); err != nil {
				return err
			}
		case len(f) == 2 && f[0] == "free":
			if err := bufs[f[1]].Free(); err != nil {
				return err
			}
			delete(bufs, f[1])
			fmt.Println("ok")
		case len(f) == 4 && f[0] == "realloc":
			old := bufs[f[1]]
			place, err := placeOf(old)
			if err != nil {
				return err
			}
			if err := old.Free(); err != nil {
				return err
			}
			var held []devmem.Buffer
			var b devmem.Buffer
			for i := range 20 {
				if b, err = alloc(num(2), uint64(num(3))); err != nil {
					return err
				}
				if p, err := placeOf(b); err != nil || p == place || i == 19 {
					break // in its place, or the last try: kept anyway
				}
				held = append(held, b)
			}
			for _, h := range held {
				h.Free()
			}
			bufs[f[1]] = b
			if err := say(b, true); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown command %q", in.Text())
		}
	}
	for _, b := range bufs {
		b.Free()
	}
	return in.Err()
}

// placeOf is where b's memory is in this process, as devmem's
// ErrAlreadyMapped sees it: its descriptor number on the host device, its
// address on a GPU.
func placeOf(b devmem.Buffer) (uint64, error) {
	if b.Device().Kind() != devmem.Host {
		return uint64(b.Addr()), nil
	}
	h, err := b.Export()
	if err != nil {
		return 0, err
	}
	raw, _ := h.MarshalBinary()
	return uint64(binary.LittleEndian.Uint32(raw[132:])), nil
}

// patternN is n pattern bytes of seed.
func patternN(seed uint64, n int) []byte {
	p := pattern(seed)
	for len(p) < n {
		p = append(p, pattern(seed+uint64(len(p)))...)
	}
	return p[:n]
}

// server is a started serveChild.
type server struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
}

func startServer(t *testing.T, spec string) *server {
	t.Helper()
	in, out, wait := startChild(t, spec, "serve")
	t.Cleanup(func() {
		in.Close()
		if err := wait(); err != nil {
			t.Errorf("serving child: %v", err)
		}
	})
	return &server{t: t, in: in, out: out}
}

// do sends one command and returns the answer's fields.
func (s *server) do(format string, args ...any) []string {
	s.t.Helper()
	fmt.Fprintf(s.in, format+"\n", args...)
	if !s.out.Scan() {
		s.t.Fatalf("the child said nothing to %q: %v", fmt.Sprintf(format, args...), s.out.Err())
	}
	return strings.Fields(s.out.Text())
}

func (s *server) handle(format string, args ...any) devmem.IPCHandle {
	s.t.Helper()
	f := s.do(format, args...)
	var h devmem.IPCHandle
	if len(f) == 0 {
		s.t.Fatal("the child answered nothing")
	}
	if err := h.UnmarshalText([]byte(f[0])); err != nil {
		s.t.Fatal(err)
	}
	return h
}

func sharedHandle(t *testing.T, dev *devmem.Device) *Handle {
	t.Helper()
	hd, err := Shared(dev, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return hd
}

func open(t *testing.T, hd *Handle, h devmem.IPCHandle) *Ref {
	t.Helper()
	r, err := hd.Open(h)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Two communicators of one process (two Handles on the process's cache of
// one device) open one peer allocation, whole and in two ranges: one entry,
// one mapping, every view reading the peer's bytes; the first Handle's
// Close leaves the second's open, the last closes everything.
func TestSharedHandlesOpenAnAllocationOnce(t *testing.T) { sharedHandles(t, "") }

// The same on a GPU (GPUCOMM_GPU_TESTS=1): legacy CUDA IPC handles, where
// a second cuIpcOpenMemHandle of the allocation would be refused.
func TestSharedHandlesOpenAnAllocationOnceOnAGPU(t *testing.T) {
	needGPU(t)
	sharedHandles(t, "cuda:0")
}

func needGPU(t *testing.T) {
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		t.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU")
	}
}

func testDev(t *testing.T, spec string) *devmem.Device {
	t.Helper()
	if spec == "" {
		return devmem.NewHostDevice()
	}
	dev, err := devmem.Open(spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

func sharedHandles(t *testing.T, spec string) {
	s := startServer(t, spec)
	dev := testDev(t, spec)
	const n = 64 << 10
	whole := s.handle("alloc x %d 5", n)
	lo := s.handle("slice x 0 1000")
	hi := s.handle("slice x 40000 3000")
	want := patternN(5, n)
	a, b := sharedHandle(t, dev), sharedHandle(t, dev)
	r1 := open(t, a, lo)
	readBack(t, "first range, first Handle", r1.Buf, want[:1000])
	r2 := open(t, b, hi) // another range of the same allocation: a second view, the same mapping
	readBack(t, "second range, second Handle", r2.Buf, want[40000:43000])
	if r2.Buf.Addr()-r1.Buf.Addr() != 40000 {
		t.Errorf("two ranges of one allocation at %#x and %#x: not one mapping", r1.Buf.Addr(), r2.Buf.Addr())
	}
	r3 := open(t, b, whole)
	readBack(t, "whole, second Handle", r3.Buf, want)
	r4 := open(t, a, hi) // served by the second Handle's view
	if !r4.Hit || r4.Buf.Addr() != r2.Buf.Addr() {
		t.Errorf("the second range through the first Handle: hit %v at %#x, want a hit at %#x", r4.Hit, r4.Buf.Addr(), r2.Buf.Addr())
	}
	if st := a.Stats(); st.Misses != 1 || st.Hits != 1 || st.InUse != 2 || st.Entries != 1 || st.Views != 3 {
		t.Errorf("first Handle: %+v, want 1 miss, 1 hit, 2 in use, 1 entry, 3 views", st)
	}
	if st := a.Total(); st.Misses != 3 || st.Hits != 1 || st.InUse != 1 {
		t.Errorf("the shared cache: %+v, want 3 misses, 1 hit, 1 entry in use", st)
	}
	for _, r := range []*Ref{r1, r4} {
		if err := r.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Open(whole); !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("Open through a closed Handle: %v, want ErrInvalidArgument", err)
	}
	if got := dev.Stats().Opened; got != 3 {
		t.Errorf("%d views open after the first Handle's Close, want 3: the second still uses them", got)
	}
	readBack(t, "whole, after the first Handle closed", r3.Buf, want)
	if err := b.Close(); err == nil || !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("Close with two Refs out: %v, want ErrInvalidArgument", err)
	}
	if got := dev.Stats().Opened; got != 3 {
		t.Errorf("%d views open while Refs are out, want 3", got)
	}
	for _, r := range []*Ref{r2, r3} {
		if err := r.Release(); err != nil {
			t.Fatal(err)
		}
	}
	noViewsOpen(t, dev, "after the last Release of the last Handle")
	// A new Handle gets a new cache.
	c := sharedHandle(t, dev)
	if st := c.Total(); st != (Stats{}) {
		t.Errorf("a Handle after the last closed: %+v, want a fresh cache", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("second Close: %v, want ErrInvalidArgument", err)
	}
}

// The H200's CUDA_ERROR_ALREADY_MAPPED: one communicator's idle entry maps
// memory its exporter then freed; the exporter allocates in its place (on
// the host device: under the same descriptor) and another communicator
// opens that. The stale entry is closed and the new memory opened, read and
// counted; an entry in use is never closed, and the open then fails with
// devmem.ErrAlreadyMapped, changing nothing.
func TestStaleEntryGivesWayToMemoryInItsPlace(t *testing.T) {
	s := startServer(t, "")
	dev := devmem.NewHostDevice()
	const n = 32 << 10
	a, b := sharedHandle(t, dev), sharedHandle(t, dev)
	defer a.Close()
	defer b.Close()
	// Another allocation of the same exporter, in use throughout: only
	// entries of freed memory's place may go.
	other := s.handle("alloc o %d 6", n)
	ro := open(t, b, other)
	ha := s.handle("alloc x %d 7", n)
	r := open(t, a, ha)
	readBack(t, "the first buffer", r.Buf, patternN(7, n))
	if err := r.Release(); err != nil { // idle, still open
		t.Fatal(err)
	}
	hb := s.handle("realloc x %d 8", n/2) // another size: a GPU refuses it beside the old mapping
	if hostFD(t, ha) != hostFD(t, hb) {
		t.Fatalf("the child's new buffer has descriptor %d, the freed one had %d: the case is not set up", hostFD(t, hb), hostFD(t, ha))
	}
	rb, err := b.Open(hb)
	if err != nil {
		t.Fatalf("open of the memory in the freed one's place: %v", err)
	}
	if rb.Hit {
		t.Error("served from the stale entry")
	}
	readBack(t, "the new buffer", rb.Buf, patternN(8, n/2))
	if st := b.Total(); st.Stale != 1 || st.Entries != 2 || st.Misses != 3 {
		t.Errorf("after the stale entry gave way: %+v, want 1 stale, 2 entries, 3 misses", st)
	}
	// Now the new memory is in use and freed in turn: an open of what takes
	// its place fails, and nothing changes.
	hc := s.handle("realloc x %d 9", n)
	if hostFD(t, hc) != hostFD(t, hb) {
		t.Fatalf("the child's third buffer has descriptor %d, want %d: the case is not set up", hostFD(t, hc), hostFD(t, hb))
	}
	before := b.Total()
	if rc, err := a.Open(hc); !errors.Is(err, devmem.ErrAlreadyMapped) {
		t.Fatalf("open beside an entry in use: %v, %v; want devmem.ErrAlreadyMapped", rc, err)
	}
	if st := b.Total(); st != before {
		t.Errorf("a refused open changed the cache: %+v, then %+v", before, st)
	}
	if err := rb.Release(); err != nil {
		t.Fatal(err)
	}
	rc := open(t, a, hc)
	readBack(t, "the third buffer", rc.Buf, patternN(9, n))
	readBack(t, "the other buffer, in use throughout", ro.Buf, patternN(6, n))
	for _, r := range []*Ref{rc, ro} {
		if err := r.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Total(); st.Stale != 2 || st.Entries != 2 || st.InUse != 0 {
		t.Errorf("at the end: %+v, want 2 stale, 2 entries, none in use", st)
	}
}

// A user's own devmem.OpenIPC of an allocation (NodeShared opens so) beside
// the cache's: one mapping; either closes without taking the other's.
func TestUserOpenBesideTheCache(t *testing.T) {
	s := startServer(t, "")
	dev := devmem.NewHostDevice()
	const n = 16 << 10
	h := s.handle("alloc x %d 10", n)
	mine, err := dev.OpenIPC(h)
	if err != nil {
		t.Fatal(err)
	}
	hd := sharedHandle(t, dev)
	r := open(t, hd, h)
	if r.Buf.Addr() != mine.Addr() {
		t.Errorf("the cache's view at %#x, the user's at %#x: two mappings", r.Buf.Addr(), mine.Addr())
	}
	if err := mine.CloseIPC(); err != nil {
		t.Fatal(err)
	}
	readBack(t, "the cache's view after the user's closed", r.Buf, patternN(10, n))
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
	mine, err = dev.OpenIPC(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := hd.Close(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := devmem.CopyToHost(got, mine, nil); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(patternN(10, n)) {
		t.Error("the user's view after the cache closed reads other bytes")
	}
	if err := mine.CloseIPC(); err != nil {
		t.Fatal(err)
	}
	if got := dev.Stats().Opened; got != 0 {
		t.Errorf("%d views left", got)
	}
}

// NodeShared's case: a user's own devmem.OpenIPC of memory its exporter
// allocated in the place of memory the cache keeps an idle entry of: devmem
// asks the cache (devhook.OnStaleViews) to close the stale entry, and opens.
func TestUserOpenBesideAStaleEntry(t *testing.T) {
	s := startServer(t, "")
	dev := devmem.NewHostDevice()
	const n = 16 << 10
	hd := sharedHandle(t, dev)
	defer hd.Close()
	ha := s.handle("alloc x %d 11", n)
	r := open(t, hd, ha)
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
	hb := s.handle("realloc x %d 12", 3*n)
	if hostFD(t, ha) != hostFD(t, hb) {
		t.Fatalf("the child's new buffer has descriptor %d, the freed one had %d: the case is not set up", hostFD(t, hb), hostFD(t, ha))
	}
	v, err := dev.OpenIPC(hb)
	if err != nil {
		t.Fatalf("the user's open beside the cache's stale entry: %v", err)
	}
	readBack(t, "the user's view", v, patternN(12, 3*n))
	if err := v.CloseIPC(); err != nil {
		t.Fatal(err)
	}
	if st := hd.Total(); st.Stale != 1 || st.Entries != 0 {
		t.Errorf("the cache after the user's open: %+v, want 1 stale entry closed, none left", st)
	}
}

// The H200's failure on a GPU (GPUCOMM_GPU_TESTS=1): idle entries of legacy
// CUDA memory the exporter frees, then allocations of other sizes there,
// opened through another Handle and by the user's own OpenIPC: every open
// succeeds and reads the new memory, and nothing is left open at the end.
// Whether the driver refused a new allocation beside a stale mapping (and
// the stale entry gave way) is logged.
func TestStaleEntriesOnAGPU(t *testing.T) {
	needGPU(t)
	s := startServer(t, "cuda:0")
	dev := testDev(t, "cuda:0")
	a, b := sharedHandle(t, dev), sharedHandle(t, dev)
	sizes := []int{1 << 20, 2 << 20, 512 << 10, 4 << 20, 1 << 20, 3 << 20}
	h := s.handle("alloc x %d 20", sizes[0])
	for i, n := range sizes {
		hd := a
		if i%2 == 1 {
			hd = b
		}
		if i == len(sizes)-1 {
			// The user's own open (NodeShared's), beside the cache's entries.
			v, err := dev.OpenIPC(h)
			if err != nil {
				t.Fatalf("size %d: the user's open: %v", n, err)
			}
			readBack(t, fmt.Sprintf("the user's view of buffer %d", i), v, patternN(uint64(20+i), n))
			if err := v.CloseIPC(); err != nil {
				t.Fatal(err)
			}
		} else {
			r, err := hd.Open(h)
			if err != nil {
				t.Fatalf("buffer %d (%d bytes): %v", i, n, err)
			}
			readBack(t, fmt.Sprintf("buffer %d", i), r.Buf, patternN(uint64(20+i), n))
			if err := r.Release(); err != nil {
				t.Fatal(err)
			}
		}
		if i+1 < len(sizes) {
			h = s.handle("realloc x %d %d", sizes[i+1], 20+i+1)
		}
	}
	t.Logf("after %d buffers in one place: %+v", len(sizes), a.Total())
	for _, hd := range []*Handle{a, b} {
		if err := hd.Close(); err != nil {
			t.Fatal(err)
		}
	}
	noViewsOpen(t, dev, "after the last Handle closed")
}

// A communicator's Close gives back the mappings that only it opened, while
// another communicator of the process keeps the cache (and what it opened)
// alive: gpucomm check's per-case communicators beside its world
// communicator left every peer buffer of a case mapped on the H200 (the
// case's leak check counted them) until this.
func TestHandleCloseClosesWhatOnlyItOpened(t *testing.T) { handleCloseCloses(t, "") }

// The same on a GPU (GPUCOMM_GPU_TESTS=1).
func TestHandleCloseClosesWhatOnlyItOpenedOnAGPU(t *testing.T) {
	needGPU(t)
	handleCloseCloses(t, "cuda:0")
}

func handleCloseCloses(t *testing.T, spec string) {
	s := startServer(t, spec)
	dev := testDev(t, spec)
	const n = 32 << 10
	x, y, z := s.handle("alloc x %d 11", n), s.handle("alloc y %d 12", n), s.handle("alloc z %d 13", n)
	opened := func(want int64, when string) {
		t.Helper()
		if got := dev.Stats().Opened; got != want {
			t.Errorf("%s: %d views open, want %d", when, got, want)
		}
	}
	release := func(rs ...*Ref) {
		t.Helper()
		for _, r := range rs {
			if err := r.Release(); err != nil {
				t.Fatal(err)
			}
		}
	}
	keep := sharedHandle(t, dev) // the long-lived communicator
	ry := open(t, keep, y)
	a := sharedHandle(t, dev) // a case's communicator
	rx, ray := open(t, a, x), open(t, a, y)
	if !ray.Hit {
		t.Errorf("y through the second Handle: not served by the first's view")
	}
	readBack(t, "x", rx.Buf, patternN(11, n))
	release(rx, ray)
	opened(2, "x and y opened, released")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	opened(1, "after the case's Handle closed: y only, which the other Handle opened")
	if st := keep.Total(); st.Entries != 1 || st.Views != 1 {
		t.Errorf("the shared cache after the case's Close: %+v, want y's entry alone", st)
	}
	readBack(t, "y after the case's Handle closed", ry.Buf, patternN(12, n))
	// A Ref still out when its Handle closes: the entry closes at its Release.
	b := sharedHandle(t, dev)
	rz := open(t, b, z)
	if err := b.Close(); !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("Close with a Ref out: %v, want ErrInvalidArgument", err)
	}
	opened(2, "z in use after its Handle closed")
	readBack(t, "z in use after its Handle closed", rz.Buf, patternN(13, n))
	release(rz)
	opened(1, "z released after its Handle closed")
	// Opened again through the long-lived Handle, x is a miss, a new view.
	rx2 := open(t, keep, x)
	if rx2.Hit {
		t.Errorf("x after its only Handle closed: a hit on a view that should be closed")
	}
	readBack(t, "x opened again", rx2.Buf, patternN(11, n))
	release(ry, rx2)
	if err := keep.Close(); err != nil {
		t.Fatal(err)
	}
	opened(0, "after the last Handle closed")
}
