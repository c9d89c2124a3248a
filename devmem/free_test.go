package devmem

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// gated holds s's queue behind a host function until the returned function
// is called (a test's cleanup calls it too, so that a failing test does not
// leave the stream stuck).
func gated(t *testing.T, s *Stream) (open func()) {
	t.Helper()
	gate := make(chan struct{})
	if err := s.HostFunc(func() error { <-gate; return nil }); err != nil {
		t.Fatal(err)
	}
	opened := false
	open = func() {
		if !opened {
			opened = true
			close(gate)
		}
	}
	t.Cleanup(open)
	return open
}

// testStream makes a stream on d that the test's cleanup destroys (after
// the cleanups registered later, such as gated's, have run).
func testStream(t *testing.T, d *Device) *Stream {
	t.Helper()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(); err != nil {
			t.Errorf("stream Destroy: %v", err)
		}
	})
	return s
}

// Freeing buffers while a stream still has a copy between them queued
// returns at once (the device's Stats count them freed), and the copy then
// runs on the memory, which stays mapped until it has: the copy's result is
// every byte of the freed source, and the memory is unmapped after the
// Synchronize. Before the fix Free unmapped at once and the copy killed the
// process (SIGSEGV).
func TestFreeWithWorkQueuedKeepsTheMemoryForIt(t *testing.T) {
	d := NewHostDevice()
	s := testStream(t, d)
	const n = 4 << 20
	want := fill(41, n)
	src := exportFilled(t, d, 41, n)
	mid, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	dst := exportFilled(t, d, 42, n) // poisoned: other bytes than want
	defer dst.Free()
	open := gated(t, s)
	if err := Copy(mid, src, s); err != nil {
		t.Fatal(err)
	}
	if err := Copy(dst, mid, s); err != nil {
		t.Fatal(err)
	}
	srcAddr, midAddr := src.Addr(), mid.Addr()
	if err := src.Free(); err != nil {
		t.Fatalf("Free of a buffer with work queued: %v", err)
	}
	if err := mid.Free(); err != nil {
		t.Fatalf("Free of a buffer with work queued: %v", err)
	}
	if st := d.Stats(); st.Buffers != 1 || st.Bytes != n {
		t.Fatalf("Stats after two of three Frees: %+v, want 1 buffer of %d bytes", st, n)
	}
	if err := Copy(dst, src, s); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Copy from a freed buffer = %v, want ErrInvalidArgument", err)
	}
	for _, a := range []uintptr{srcAddr, midAddr} {
		if ok, err := mapped(a); err != nil || !ok {
			t.Fatalf("memory at %#x unmapped while work queued before its Free waits (%v)", a, err)
		}
	}
	open()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got, _ := dst.Bytes()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("byte %d copied through freed buffers is %#x, want %#x", i, got[i], want[i])
		}
	}
	for _, a := range []uintptr{srcAddr, midAddr} {
		if ok, err := mapped(a); err != nil || ok {
			t.Fatalf("memory at %#x still mapped after the work queued before its Free ran (%v)", a, err)
		}
	}
	for name, b := range map[string]Buffer{"src": src, "mid": mid} {
		if v, ok := b.Bytes(); ok || v != nil {
			t.Errorf("Bytes of freed %s = %d bytes, %v; want nil, false", name, len(v), ok)
		}
	}
}

// The reviewer's case: both sides of a queued copy freed, then the gate
// opened. Free returns nil for both, Synchronize reports nothing, and the
// process lives.
func TestFreeBothSidesOfAQueuedCopy(t *testing.T) {
	d := NewHostDevice()
	s := testStream(t, d)
	src := exportFilled(t, d, 43, 8<<20)
	dst, err := d.Alloc(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	open := gated(t, s)
	if err := Copy(dst, src, s); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(src.Free(), dst.Free()); err != nil {
		t.Fatal(err)
	}
	open()
	if err := s.Synchronize(); err != nil {
		t.Fatalf("Synchronize after freeing both sides of a queued copy: %v", err)
	}
	if st := d.Stats(); st.Buffers != 0 || st.Bytes != 0 {
		t.Fatalf("Stats: %+v, want no buffers", st)
	}
}

// A stream's own host function frees a buffer that a copy queued behind it
// reads: Free returns at once (no deadlock on the stream that runs it), and
// the copy reads the freed buffer's bytes.
func TestFreeFromAHostFunctionOfTheStreamThatUsesTheBuffer(t *testing.T) {
	d := NewHostDevice()
	s := testStream(t, d)
	const n = 1 << 20
	src := exportFilled(t, d, 44, n)
	dst := exportFilled(t, d, 45, n)
	defer dst.Free()
	freed := make(chan error, 1)
	queued := make(chan struct{})
	if err := s.HostFunc(func() error { <-queued; freed <- src.Free(); return nil }); err != nil {
		t.Fatal(err)
	}
	err := Copy(dst, src, s) // queued while src is live
	close(queued)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Synchronize() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Free from a stream's host function deadlocked the stream")
	}
	if err := <-freed; err != nil {
		t.Fatalf("Free from a host function: %v", err)
	}
	got, _ := dst.Bytes()
	if !bytes.Equal(got, fill(44, n)) {
		t.Fatal("the copy queued behind the Free did not read the freed buffer's bytes")
	}
}

// A peer copy between two host devices queued on the destination's stream
// reads memory of the source's device: freeing the source, whose own device
// has no stream busy, still waits for that copy.
func TestFreeWaitsForAnotherDevicesStreamThatCopiesIt(t *testing.T) {
	d1, d2 := NewHostDevice(), NewHostDevice()
	s := testStream(t, d1)
	const n = 1 << 20
	src := exportFilled(t, d2, 46, n)
	dst := exportFilled(t, d1, 47, n)
	defer dst.Free()
	open := gated(t, s)
	if err := CopyPeer(dst, src, n, s); err != nil {
		t.Fatal(err)
	}
	if err := src.Free(); err != nil {
		t.Fatal(err)
	}
	open()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got, _ := dst.Bytes()
	if !bytes.Equal(got, fill(46, n)) {
		t.Fatal("the peer copy queued before the Free did not read the source's bytes")
	}
}

// Bytes and Slice.Host report nothing for a freed buffer (and its views),
// for pinned memory, for a closed IPC view (remote, the last one: its
// mapping is gone; and in-process), where before the fix they handed out a
// view of unmapped memory, and reading it killed the process.
func TestBytesOfFreedOrClosedBuffersIsNothing(t *testing.T) {
	d := NewHostDevice()
	check := func(what string, b Buffer) {
		t.Helper()
		if v, ok := b.Bytes(); ok || v != nil {
			t.Errorf("Bytes of %s = %d bytes, %v; want nil, false", what, len(v), ok)
		}
		if v, ok := SliceOf[float32](b).Host(); ok || v != nil {
			t.Errorf("Host of %s = %d elements, %v; want nil, false", what, len(v), ok)
		}
	}
	b := exportFilled(t, d, 48, 4096)
	view, err := b.Slice(1024, 1024)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := AllocSlice[float64](d, 64)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.AllocPinned(4096)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := view.Bytes(); !ok || !bytes.Equal(v, fill(48, 4096)[1024:2048]) {
		t.Fatal("Bytes of a live view is not its bytes")
	}
	if err := errors.Join(b.Free(), sl.Free(), p.Free()); err != nil {
		t.Fatal(err)
	}
	check("a freed buffer", b)
	check("a view of a freed buffer", view)
	check("freed pinned memory", p)
	if v, ok := sl.Host(); ok || v != nil {
		t.Errorf("Host of a freed slice = %d elements, %v; want nil, false", len(v), ok)
	}

	exp := exportFilled(t, d, 49, 8192)
	defer exp.Free()
	h, err := exp.Export()
	if err != nil {
		t.Fatal(err)
	}
	remote, err := d.OpenIPC(asRemote(t, h))
	if err != nil {
		t.Fatal(err)
	}
	local, err := d.OpenIPC(h)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := remote.Bytes(); !ok || !bytes.Equal(v, fill(49, 8192)) {
		t.Fatal("Bytes of an open remote view is not the exported bytes")
	}
	addr := remote.Addr()
	if err := errors.Join(remote.CloseIPC(), local.CloseIPC()); err != nil {
		t.Fatal(err)
	}
	if ok, _ := mapped(addr); ok {
		t.Fatal("the remote mapping is still there after its last view closed")
	}
	check("a closed remote view", remote)
	check("a closed in-process view", local)
	if v, ok := exp.Bytes(); !ok || !bytes.Equal(v, fill(49, 8192)) {
		t.Fatal("closing views of a buffer changed its own Bytes")
	}
}

// When the memory's return is left to a stream, its failure is not lost:
// Free returns nil, and the stream's next Synchronize returns the driver's
// error; with no stream busy, Free returns it itself.
func TestFailedReturnOfFreedMemoryIsReported(t *testing.T) {
	d := NewHostDevice()
	s := testStream(t, d)
	errRelease := errors.New("test: the driver failed to return the memory")
	failing := func() Buffer {
		b, err := d.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		release := b.a.release
		b.a.release = func() error { return errors.Join(release(), errRelease) }
		return b
	}
	b := failing()
	open := gated(t, s)
	if err := Memset(b, 1, s); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); err != nil {
		t.Fatalf("Free with the return left to the stream = %v, want nil", err)
	}
	open()
	if err := s.Synchronize(); !errors.Is(err, errRelease) {
		t.Fatalf("Synchronize after the stream returned the memory = %v, want the driver's error", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("a second Synchronize = %v, want nil", err)
	}
	if err := failing().Free(); !errors.Is(err, errRelease) {
		t.Fatalf("Free with no stream busy = %v, want the driver's error", err)
	}
}
