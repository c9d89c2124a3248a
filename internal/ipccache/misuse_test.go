package ipccache

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// noPanic runs f and fails the test, rather than the test binary, when it
// panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panicked: %v", what, p)
		}
	}()
	f()
}

// A Ref copied and released through both copies: the second Release is
// refused and changes nothing. (It was accepted: the entry's count went
// below the Refs out, the next open evicted the entry another Ref still
// read, InUse went to -1 and a view stayed open after Close.)
func TestReleaseOfACopiedRefIsRefused(t *testing.T) {
	dev := devmem.NewHostDevice()
	const n = 4096
	a, wantA := filled(t, dev, n, 30)
	defer a.Free()
	b, wantB := filled(t, dev, n, 31)
	defer b.Free()
	c := newCache(t, dev, Limits{Entries: 1})
	r1, err := c.Open(export(t, a, 0, n))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Open(export(t, a, 0, n))
	if err != nil {
		t.Fatal(err)
	}
	cp := *r1
	if err := r1.Release(); err != nil {
		t.Fatal(err)
	}
	if err := cp.Release(); !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("Release of a copy of a released Ref: %v, want ErrInvalidArgument", err)
	}
	wantStats(t, c, Stats{Hits: 1, Misses: 1, Entries: 1, Views: 1, Bytes: n, InUse: 1})
	// A's entry is still in use (r2): opening B goes over the bound rather
	// than evict it.
	rb, err := c.Open(export(t, b, 0, n))
	if err != nil {
		t.Fatal(err)
	}
	readBack(t, "the Ref still out, after an open past the bound", r2.Buf, wantA)
	readBack(t, "the other allocation", rb.Buf, wantB)
	wantStats(t, c, Stats{Hits: 1, Misses: 2, Entries: 2, Views: 2, Bytes: 2 * n, InUse: 2})
	for _, r := range []*Ref{r2, rb} {
		if err := r.Release(); err != nil {
			t.Fatal(err)
		}
	}
	// A copy taken before the first Release is refused too, and so is the
	// Ref it was copied from after the copy's Release.
	r3, err := c.Open(export(t, b, 0, n))
	if err != nil {
		t.Fatal(err)
	}
	cp3 := *r3
	if err := cp3.Release(); err != nil {
		t.Fatal(err)
	}
	if err := r3.Release(); !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("Release of a Ref whose copy was released: %v, want ErrInvalidArgument", err)
	}
	wantStats(t, c, Stats{Hits: 2, Misses: 2, Evictions: 1, Entries: 1, Views: 1, Bytes: n})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	noViewsOpen(t, dev, "after Close")
}

// Copies of one Ref released at once: one Release is accepted, the others
// refused.
func TestConcurrentReleaseOfCopies(t *testing.T) {
	dev := devmem.NewHostDevice()
	a, _ := filled(t, dev, 512, 32)
	defer a.Free()
	c := newCache(t, dev, Limits{})
	r, err := c.Open(export(t, a, 0, 512))
	if err != nil {
		t.Fatal(err)
	}
	const copies = 8
	errs := make(chan error, copies)
	for range copies {
		cp := *r
		go func() { errs <- cp.Release() }()
	}
	ok := 0
	for range copies {
		if err := <-errs; err == nil {
			ok++
		} else if !errors.Is(err, devmem.ErrInvalidArgument) {
			t.Errorf("a refused Release: %v, want ErrInvalidArgument", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d of %d Releases of copies of one Ref accepted, want 1", ok, copies)
	}
	wantStats(t, c, Stats{Misses: 1, Entries: 1, Views: 1, Bytes: 512})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// A copy of a Handle closed after the Handle: refused, and the shared cache
// stays open for the other Handles (it was closed under them).
func TestCloseOfACopiedHandleIsRefused(t *testing.T) {
	dev := devmem.NewHostDevice()
	a, want := filled(t, dev, 512, 33)
	defer a.Free()
	h := export(t, a, 0, 512)
	hd1, hd2 := sharedHandle(t, dev), sharedHandle(t, dev)
	cp := *hd1
	if err := hd1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cp.Close(); !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("Close of a copy of a closed Handle: %v, want ErrInvalidArgument", err)
	}
	if _, err := cp.Open(h); !errors.Is(err, devmem.ErrInvalidArgument) {
		t.Errorf("Open through a copy of a closed Handle: %v, want ErrInvalidArgument", err)
	}
	r, err := hd2.Open(h)
	if err != nil {
		t.Fatalf("Open through the Handle left open: %v", err)
	}
	readBack(t, "through the Handle left open", r.Buf, want)
	if err := errors.Join(r.Release(), hd2.Close()); err != nil {
		t.Fatal(err)
	}
	noViewsOpen(t, dev, "after the last Handle closed")
}

// The zero values (and nil pointers) of Handle, Ref and Cache refuse their
// methods with an error, and do not panic.
func TestZeroValuesRefuseWithoutPanic(t *testing.T) {
	dev := devmem.NewHostDevice()
	a, _ := filled(t, dev, 64, 34)
	defer a.Free()
	h := export(t, a, 0, 64)
	wantErr := func(what string, f func() error) {
		t.Helper()
		noPanic(t, what, func() {
			if err := f(); !errors.Is(err, devmem.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", what, err)
			}
		})
	}
	wantZero := func(what string, f func() Stats) {
		t.Helper()
		noPanic(t, what, func() {
			if st := f(); st != (Stats{}) {
				t.Errorf("%s: %+v, want zero Stats", what, st)
			}
		})
	}
	openErr := func(open func(devmem.IPCHandle) (*Ref, error)) func() error {
		return func() error {
			r, err := open(h)
			if r != nil {
				return fmt.Errorf("a Ref %+v", r)
			}
			return err
		}
	}
	var hd Handle
	wantErr("Close of the zero Handle", hd.Close)
	wantErr("Open through the zero Handle", openErr(hd.Open))
	wantZero("Stats of the zero Handle", hd.Stats)
	wantZero("Total of the zero Handle", hd.Total)
	var nilHd *Handle
	wantErr("Close of a nil Handle", nilHd.Close)
	wantErr("Open through a nil Handle", openErr(nilHd.Open))
	wantZero("Stats of a nil Handle", nilHd.Stats)
	wantZero("Total of a nil Handle", nilHd.Total)

	var r Ref
	wantErr("Release of the zero Ref", r.Release)
	var nilRef *Ref
	wantErr("Release of a nil Ref", nilRef.Release)

	var c Cache
	wantErr("Open through the zero Cache", openErr(c.Open))
	wantErr("Close of the zero Cache", c.Close)
	wantZero("Stats of the zero Cache", c.Stats)
	var nilC *Cache
	wantErr("Open through a nil Cache", openErr(nilC.Open))
	wantErr("Close of a nil Cache", nilC.Close)
	wantZero("Stats of a nil Cache", nilC.Stats)
	noViewsOpen(t, dev, "at the end")
}

// A handle this process exported, opened through the cache, then its
// memory freed: a later Open is refused as devmem's OpenIPC refuses it
// (ErrBadHandle), not served from the entry; an idle entry of it is closed
// (Stale), one in use is kept for its Ref.
func TestOwnFreedMemoryIsNotServed(t *testing.T) {
	dev := devmem.NewHostDevice()
	const n = 4096
	a, _ := filled(t, dev, n, 35)
	h := export(t, a, 0, n)
	c := newCache(t, dev, Limits{})
	r, err := c.Open(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if _, err := dev.OpenIPC(h); !errors.Is(err, devmem.ErrBadHandle) {
		t.Fatalf("devmem's own open of the freed memory: %v, want ErrBadHandle: the case is not set up", err)
	}
	if r, err := c.Open(h); !errors.Is(err, devmem.ErrBadHandle) {
		t.Errorf("Open of memory this process freed since: %+v, %v; want ErrBadHandle", r, err)
		if r != nil {
			r.Release()
		}
	}
	wantStats(t, c, Stats{Misses: 1, Stale: 1})
	noViewsOpen(t, dev, "after the entry of freed memory was refused")

	// In use: the open is refused, the Ref out keeps reading its memory.
	b, wantB := filled(t, dev, n, 36)
	hb := export(t, b, 0, n)
	rb, err := c.Open(hb)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Open(hb); !errors.Is(err, devmem.ErrBadHandle) {
		t.Errorf("Open of freed memory whose entry is in use: %+v, %v; want ErrBadHandle", r, err)
		if r != nil {
			r.Release()
		}
	}
	readBack(t, "the Ref out of memory freed since", rb.Buf, wantB)
	if err := rb.Release(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	noViewsOpen(t, dev, "after Close")
}
