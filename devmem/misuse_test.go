package devmem

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"
)

// refused runs call and fails the test unless it returns an error wrapping
// want; a panic is reported as a failure, not a crash of the test binary.
func refused(t *testing.T, what string, want error, call func() error) {
	t.Helper()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panicked: %v", r)
			}
		}()
		err = call()
	}()
	if !errors.Is(err, want) {
		t.Errorf("%s = %v, want an error wrapping %v", what, err, want)
	}
}

// AllocSlice refuses counts whose bytes overflow an int, where it allocated
// a few bytes and reported a huge Len (or Host panicked), and allocates
// nothing.
func TestAllocSliceRefusesCountsThatOverflow(t *testing.T) {
	d := NewHostDevice()
	before := d.Stats()
	cases := []struct {
		what string
		call func() (int, error)
	}{
		{"float32 (1<<62)+2", func() (int, error) { s, err := AllocSlice[float32](d, (1<<62)+2); return s.Len(), err }},
		{"float64 (1<<61)+1", func() (int, error) { s, err := AllocSlice[float64](d, (1<<61)+1); return s.Len(), err }},
		{"float32 MaxInt/4+1", func() (int, error) { s, err := AllocSlice[float32](d, math.MaxInt/4+1); return s.Len(), err }},
		{"[3]float64 MaxInt/24+1", func() (int, error) { s, err := AllocSlice[[3]float64](d, math.MaxInt/24+1); return s.Len(), err }},
		{"byte -1", func() (int, error) { s, err := AllocSlice[byte](d, -1); return s.Len(), err }},
	}
	for _, c := range cases {
		n, err := c.call()
		if !errors.Is(err, ErrInvalidArgument) || n != 0 {
			t.Errorf("AllocSlice %s = Len %d, %v; want ErrInvalidArgument", c.what, n, err)
		}
	}
	if st := d.Stats(); st != before {
		t.Errorf("Stats went from %+v to %+v after refused allocations", before, st)
	}
	// A count that fits allocates its bytes and holds its elements.
	s, err := AllocSlice[float64](d, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	if s.Len() != 3 || s.Buffer().Len() != 24 {
		t.Fatalf("AllocSlice[float64](3): Len %d over %d bytes", s.Len(), s.Buffer().Len())
	}
	if err := s.CopyFrom([]float64{1.5, -2, 3e300}, nil); err != nil {
		t.Fatal(err)
	}
	h, ok := s.Host()
	if !ok || len(h) != 3 || h[0] != 1.5 || h[1] != -2 || h[2] != 3e300 {
		t.Fatalf("Host = %v, %v", h, ok)
	}
}

// A type of size zero has no bytes to view: AllocSlice refuses it, and
// SliceOf gives the zero Slice, which every call refuses, where SliceOf
// divided by zero.
func TestSlicesOfZeroSizeTypesAreRefused(t *testing.T) {
	d := NewHostDevice()
	before := d.Stats()
	if s, err := AllocSlice[struct{}](d, 4); !errors.Is(err, ErrInvalidArgument) || s.Len() != 0 {
		t.Errorf("AllocSlice[struct{}] = Len %d, %v; want ErrInvalidArgument", s.Len(), err)
	}
	if s, err := AllocSlice[[0]float32](d, 0); !errors.Is(err, ErrInvalidArgument) || s.Len() != 0 {
		t.Errorf("AllocSlice[[0]float32] = Len %d, %v; want ErrInvalidArgument", s.Len(), err)
	}
	if st := d.Stats(); st != before {
		t.Errorf("Stats went from %+v to %+v", before, st)
	}
	b, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	var s Slice[struct{}]
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("SliceOf[struct{}] panicked: %v", r)
			}
		}()
		s = SliceOf[struct{}](b)
	}()
	if s.Len() != 0 || !s.Buffer().IsZero() {
		t.Fatalf("SliceOf[struct{}] = Len %d on a buffer of %d bytes; want the zero Slice", s.Len(), s.Buffer().Len())
	}
	refused(t, "ToHost of SliceOf[struct{}]", ErrInvalidArgument, func() error { _, err := s.ToHost(nil); return err })
	refused(t, "CopyFrom into SliceOf[struct{}]", ErrInvalidArgument, func() error { return s.CopyFrom(make([]struct{}, 3), nil) })
	refused(t, "Sub of SliceOf[struct{}]", ErrInvalidArgument, func() error { _, err := s.Sub(0, 0); return err })
	if h, ok := s.Host(); ok || h != nil {
		t.Errorf("Host of SliceOf[struct{}] = %v, %v", h, ok)
	}
	if v := FromBytes[struct{}](make([]byte, 8)); v != nil {
		t.Errorf("FromBytes[struct{}] = %d values, want nil", len(v))
	}
}

// Element types that hold Go pointers are refused by AllocSlice (which
// allocated device or pinned memory holding them, hidden from the garbage
// collector), and SliceOf and FromBytes give nothing for them; plain
// types, arrays and structs of them, and zero-length arrays of pointers
// inside them pass.
func TestSlicesOfPointerTypesAreRefused(t *testing.T) {
	d := NewHostDevice()
	before := d.Stats()
	type withPtr struct {
		A int32
		P *int
	}
	type deep struct {
		X [2]struct {
			F float64
			S string
		}
	}
	check := func(name, want string, alloc func() (int, error)) {
		t.Helper()
		n, err := alloc()
		if !errors.Is(err, ErrInvalidArgument) || n != 0 {
			t.Errorf("AllocSlice[%s] = Len %d, %v; want ErrInvalidArgument", name, n, err)
		} else if !strings.Contains(err.Error(), "pointers") || !strings.Contains(err.Error(), want) {
			t.Errorf("AllocSlice[%s]: %q; want it to say the type holds pointers, at %q", name, err, want)
		}
	}
	alloc := func(n int, err error) (int, error) { return n, err }
	check("*int", "pointer", func() (int, error) { s, err := AllocSlice[*int](d, 4); return alloc(s.Len(), err) })
	check("string", "string", func() (int, error) { s, err := AllocSlice[string](d, 4); return alloc(s.Len(), err) })
	check("[]byte", "slice", func() (int, error) { s, err := AllocSlice[[]byte](d, 4); return alloc(s.Len(), err) })
	check("map", "map", func() (int, error) { s, err := AllocSlice[map[int]int](d, 4); return alloc(s.Len(), err) })
	check("chan", "channel", func() (int, error) { s, err := AllocSlice[chan int](d, 4); return alloc(s.Len(), err) })
	check("func", "function", func() (int, error) { s, err := AllocSlice[func()](d, 4); return alloc(s.Len(), err) })
	check("any", "interface", func() (int, error) { s, err := AllocSlice[any](d, 4); return alloc(s.Len(), err) })
	check("error", "interface", func() (int, error) { s, err := AllocSlice[error](d, 4); return alloc(s.Len(), err) })
	check("unsafe.Pointer", "unsafe.Pointer", func() (int, error) { s, err := AllocSlice[unsafe.Pointer](d, 4); return alloc(s.Len(), err) })
	check("withPtr", "pointer at .P", func() (int, error) { s, err := AllocSlice[withPtr](d, 4); return alloc(s.Len(), err) })
	check("[3]*int", "[0]", func() (int, error) { s, err := AllocSlice[[3]*int](d, 4); return alloc(s.Len(), err) })
	check("deep", "string at .X[0].S", func() (int, error) { s, err := AllocSlice[deep](d, 4); return alloc(s.Len(), err) })
	// Asked again (the verdict is cached), still refused.
	check("withPtr again", ".P", func() (int, error) { s, err := AllocSlice[withPtr](d, 4); return alloc(s.Len(), err) })
	if st := d.Stats(); st != before {
		t.Errorf("refused AllocSlices left Stats %+v, was %+v", st, before)
	}

	b, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if s := SliceOf[*int](b); s.Len() != 0 || !s.Buffer().IsZero() {
		t.Errorf("SliceOf[*int] = Len %d on %d bytes; want the zero Slice", s.Len(), s.Buffer().Len())
	}
	if s := SliceOf[deep](b); s.Len() != 0 || !s.Buffer().IsZero() {
		t.Errorf("SliceOf[deep] = Len %d; want the zero Slice", s.Len())
	}
	if v := FromBytes[string](make([]byte, 64)); v != nil {
		t.Errorf("FromBytes[string] = %d values, want nil", len(v))
	}

	// Plain types pass, with their data.
	type plain struct {
		A int32
		B [3]float64
		Z [0]*int // no elements: holds no pointer
		U uintptr
	}
	ps, err := AllocSlice[plain](d, 2)
	if err != nil {
		t.Fatalf("AllocSlice[plain]: %v", err)
	}
	defer ps.Free()
	want := []plain{{A: 1, B: [3]float64{2, 3, 4}, U: 5}, {A: -1, B: [3]float64{0.5}, U: 7}}
	if err := ps.CopyFrom(want, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := ps.ToHost(nil); err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("ToHost = %v, %v; want %v", got, err, want)
	}
	if s := SliceOf[plain](b); s.Len() != 64/int(unsafe.Sizeof(plain{})) {
		t.Errorf("SliceOf[plain] of 64 bytes = Len %d", s.Len())
	}
	if v := FromBytes[[2]int32](AsBytes([]int32{7, 8, 9, 10})); len(v) != 2 || v[1] != [2]int32{9, 10} {
		t.Errorf("FromBytes[[2]int32] = %v", v)
	}
	// AsBytes refuses what FromBytes refuses: bytes copied into a view of
	// pointers would forge them. A copy into the nil view moves nothing:
	// the pointers stay as they were.
	x, y := 1, 2
	ptrs := []*int{&x, &y}
	if v := AsBytes(ptrs); v != nil {
		t.Errorf("AsBytes([]*int) = %d bytes, want nil", len(v))
	}
	if v := AsBytes([]struct{ p *byte }{{}}); v != nil {
		t.Errorf("AsBytes of a struct holding a pointer = %d bytes, want nil", len(v))
	}
	if v := AsBytes(make([]struct{}, 4)); v != nil {
		t.Errorf("AsBytes of zero-size elements = %d bytes, want nil", len(v))
	}
	if err := Memset(b, 0x5a, nil); err != nil {
		t.Fatal(err)
	}
	if err := CopyToHost(AsBytes(ptrs), b, nil); err != nil {
		t.Errorf("a copy of nothing into AsBytes([]*int): %v", err)
	}
	if ptrs[0] != &x || ptrs[1] != &y {
		t.Error("the pointers changed")
	}
	// The verdict is cached: FromBytes of a struct type allocates nothing.
	raw := make([]byte, 64)
	if n := testing.AllocsPerRun(100, func() { _ = FromBytes[plain](raw) }); n != 0 {
		t.Errorf("FromBytes[plain] allocates %v times a call", n)
	}
}

// A nil or zero Device, Stream or Event is refused with ErrInvalidArgument
// by every method that returns an error, where several panicked; the
// accessors without one give zero answers, and a nil function given to
// HostFunc is refused at the call.
func TestNilAndZeroDevicesStreamsAndEventsAreRefused(t *testing.T) {
	for name, d := range map[string]*Device{"nil": nil, "zero": new(Device)} {
		refused(t, name+" device NewStream", ErrInvalidArgument, func() error { _, err := d.NewStream(); return err })
		refused(t, name+" device NewEvent", ErrInvalidArgument, func() error { _, err := d.NewEvent(); return err })
		refused(t, name+" device Synchronize", ErrInvalidArgument, d.Synchronize)
		refused(t, name+" device Alloc", ErrInvalidArgument, func() error { _, err := d.Alloc(8); return err })
		refused(t, name+" device AllocPinned", ErrInvalidArgument, func() error { _, err := d.AllocPinned(8); return err })
		refused(t, name+" device AllocShared", ErrInvalidArgument, func() error { _, err := d.AllocShared(8); return err })
		refused(t, name+" device AllocPinnedShared", ErrInvalidArgument, func() error { _, err := d.AllocPinnedShared(8); return err })
		refused(t, name+" device RegisterHost", ErrInvalidArgument, func() error { _, err := d.RegisterHost(make([]byte, 4096)); return err })
		refused(t, name+" device Memory", ErrInvalidArgument, func() error { _, _, err := d.Memory(); return err })
		refused(t, name+" device MemInfo", ErrInvalidArgument, func() error { _, _, err := d.MemInfo(); return err })
		refused(t, name+" device NewIPCEvent", ErrInvalidArgument, func() error { _, err := d.NewIPCEvent(); return err })
		refused(t, name+" device AllocSlice", ErrInvalidArgument, func() error { _, err := AllocSlice[float32](d, 4); return err })
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("accessors of a %s device panicked: %v", name, r)
				}
			}()
			if d.Kind() != 0 || d.Ordinal() != 0 || d.Name() != "" || d.UUID() != [16]byte{} || d.PCIBusID() != "" || d.Stats() != (Stats{}) {
				t.Errorf("accessors of a %s device: %v %d %q %x %q %+v; want zero answers", name, d.Kind(), d.Ordinal(), d.Name(), d.UUID(), d.PCIBusID(), d.Stats())
			}
			if d.String() == "" {
				t.Errorf("String of a %s device is empty", name)
			}
		}()
	}

	d := NewHostDevice()
	before := d.Stats()
	var nilStream *Stream
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("Device of a nil stream panicked: %v", r)
			}
		}()
		if dev := nilStream.Device(); dev != nil {
			t.Errorf("Device of a nil stream = %v, want nil", dev)
		}
	}()
	refused(t, "HostFunc(nil) on a nil stream", ErrInvalidArgument, func() error { return nilStream.HostFunc(nil) })
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	refused(t, "HostFunc(nil) on a stream", ErrInvalidArgument, func() error { return s.HostFunc(nil) })
	refused(t, "HostCall(nil) on a stream", ErrInvalidArgument, func() error { return s.hostCall(nil) })
	refused(t, "HostFuncDeferred(nil) on a stream", ErrInvalidArgument, func() error { return s.hostFuncDeferred(nil) })
	refused(t, "HostWait(nil) on a stream", ErrInvalidArgument, func() error {
		return s.hostWait(nil, func() (bool, error) { return true, nil }, false)
	})
	if err := s.Synchronize(); err != nil {
		t.Errorf("Synchronize after refused nil functions = %v, want nil: nothing was queued", err)
	}

	zs := new(Stream)
	ran := false
	refused(t, "HostFunc on a zero stream", ErrInvalidArgument, func() error { return zs.HostFunc(func() error { ran = true; return nil }) })
	if ran {
		t.Error("HostFunc on a zero stream ran its function")
	}
	if dev := zs.Device(); dev != nil {
		t.Errorf("Device of a zero stream = %v", dev)
	}
	buf, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	refused(t, "Synchronize of a zero stream", ErrInvalidArgument, zs.Synchronize)
	refused(t, "Query of a zero stream", ErrInvalidArgument, func() error { _, err := zs.Query(); return err })
	refused(t, "WaitEvent on a zero stream", ErrInvalidArgument, func() error { return zs.WaitEvent(ev) })
	refused(t, "Check of a zero stream", ErrInvalidArgument, func() error { return zs.Check(d) })
	refused(t, "Memset on a zero stream", ErrInvalidArgument, func() error { return Memset(buf, 1, zs) })
	refused(t, "Record of an event on a zero stream", ErrInvalidArgument, func() error { return ev.Record(zs) })
	refused(t, "task on a zero stream", ErrInvalidArgument, func() error { return zs.task(func(_, _ uintptr) error { return nil }) })
	refused(t, "enqueue on a zero stream", ErrInvalidArgument, func() error { return zs.enqueue(func(uintptr) error { return nil }) })
	refused(t, "Destroy of a zero stream", ErrInvalidArgument, zs.Destroy)

	ze := new(Event)
	refused(t, "Record of a zero event", ErrInvalidArgument, func() error { return ze.Record(nil) })
	refused(t, "Synchronize of a zero event", ErrInvalidArgument, ze.Synchronize)
	refused(t, "Done of a zero event", ErrInvalidArgument, func() error { _, err := ze.Done(); return err })
	refused(t, "Elapsed from a zero event", ErrInvalidArgument, func() error { _, err := Elapsed(ze, ev); return err })
	refused(t, "Elapsed to a zero event", ErrInvalidArgument, func() error { _, err := Elapsed(ev, ze); return err })
	refused(t, "ExportIPC of a zero event", ErrInvalidArgument, func() error { _, err := ze.ExportIPC(); return err })
	refused(t, "WaitEvent for a zero event", ErrInvalidArgument, func() error { return s.WaitEvent(ze) })
	refused(t, "Destroy of a zero event", ErrInvalidArgument, ze.Destroy)

	if err := s.Synchronize(); err != nil {
		t.Errorf("Synchronize of the stream after the refusals: %v", err)
	}
	if st := d.Stats(); st.Streams != before.Streams+1 || st.Events != before.Events+1 || st.Buffers != before.Buffers+1 {
		t.Errorf("Stats %+v: want one stream, one event and one buffer more than %+v", st, before)
	}
}

// recordingModule is a moduleImpl whose functions record their launches.
type recordingModule struct{ unloads, launches int }

func (m *recordingModule) function(name string) (functionImpl, error) { return m, nil }
func (m *recordingModule) unload() error                              { m.unloads++; return nil }
func (m *recordingModule) launch(grid, block [3]uint32, sharedBytes int, s streamImpl, params [][]byte) error {
	m.launches++
	return nil
}

// A nil or zero Module or Function is refused with ErrInvalidArgument by
// every method that returns an error, where a zero Module's Function and
// Unload and a zero Function's Launch panicked, and its accessors give zero
// answers, where the nil ones' panicked; a module made as LoadModule makes
// one still works, and a refused Unload leaves nothing unloaded.
func TestNilAndZeroModulesAndFunctionsAreRefused(t *testing.T) {
	one := [3]uint32{1, 1, 1}
	for name, m := range map[string]*Module{"nil": nil, "zero": new(Module)} {
		refused(t, name+" Module Function", ErrInvalidArgument, func() error { _, err := m.Function("k"); return err })
		refused(t, name+" Module Unload", ErrInvalidArgument, m.Unload)
		refused(t, name+" Module Unload again", ErrInvalidArgument, m.Unload)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Device of a %s Module panicked: %v", name, r)
				}
			}()
			if d := m.Device(); d != nil {
				t.Errorf("Device of a %s Module = %v, want nil", name, d)
			}
		}()
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panicked: %v", r)
			}
		}()
		return new(Module).Unload()
	}()
	if err == nil || !strings.Contains(err.Error(), "zero Module") {
		t.Errorf("Unload of a zero Module = %v; want it to say the Module is zero", err)
	}
	for name, f := range map[string]*Function{"nil": nil, "zero": new(Function)} {
		refused(t, name+" Function Launch", ErrInvalidArgument, func() error { return f.Launch(one, one, 0, nil) })
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Name of a %s Function panicked: %v", name, r)
				}
			}()
			if n := f.Name(); n != "" {
				t.Errorf("Name of a %s Function = %q, want \"\"", name, n)
			}
		}()
	}

	// A module as LoadModule makes it, on a driver that records launches.
	d := NewHostDevice()
	rec := &recordingModule{}
	m := &Module{dev: d, impl: rec}
	f, err := m.Function("k")
	if err != nil || f == nil {
		t.Fatal(err)
	}
	if f.Name() != "k" || m.Device() != d {
		t.Errorf("Name %q, Device %v; want k, %v", f.Name(), m.Device(), d)
	}
	if err := f.Launch(one, one, 0, nil, int32(3)); err != nil || rec.launches != 1 {
		t.Errorf("Launch = %v after %d launches; want one", err, rec.launches)
	}
	if err := m.Unload(); err != nil || rec.unloads != 1 {
		t.Errorf("Unload = %v after %d unloads; want one", err, rec.unloads)
	}
	refused(t, "Launch after Unload", ErrInvalidArgument, func() error { return f.Launch(one, one, 0, nil) })
	if rec.launches != 1 {
		t.Errorf("%d launches after a refused one; want 1", rec.launches)
	}
}

// A host handle whose header names one exporting process and its driver
// bytes (the memfd's) another is refused with ErrBadHandle, by
// UnmarshalBinary and OpenIPC, and opens nothing; before the fix a handle
// with only its header's pid changed (and its checksum made again) opened
// a view of this process's memory that was not seen to overlap it.
func TestHandleWhosePIDsDisagreeIsRefused(t *testing.T) {
	d := NewHostDevice()
	buf := exportFilled(t, d, 50, 4096)
	defer buf.Free()
	pinned, err := d.AllocPinnedShared(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Free()
	for name, b := range map[string]Buffer{"device memory": buf, "pinned memory": pinned} {
		h, err := b.Export()
		if err != nil {
			t.Fatal(err)
		}
		forged := map[string]IPCHandle{
			"header pid changed": reseal(t, h, func(f *handleFields) { f.pid++ }),
			"driver pid changed": reseal(t, h, func(f *handleFields) {
				x, err := parseHostIPC(f.drv)
				if err != nil {
					t.Fatal(err)
				}
				x.pid++
				f.drv = x.bytes()
			}),
		}
		for how, fh := range forged {
			raw := fh.raw[:]
			var into IPCHandle
			if err := into.UnmarshalBinary(raw); !errors.Is(err, ErrBadHandle) || !into.IsZero() {
				t.Errorf("%s, %s: UnmarshalBinary = %v; want ErrBadHandle and the handle unchanged", name, how, err)
			}
			v, err := d.OpenIPC(fh)
			if !errors.Is(err, ErrBadHandle) || !v.IsZero() {
				t.Errorf("%s, %s: OpenIPC = %v (%d bytes, overlapping the original: %v); want ErrBadHandle", name, how, err, v.Len(), v.Overlaps(b))
				if !v.IsZero() {
					v.CloseIPC()
				}
			}
		}
		if st := d.Stats(); st.Opened != 0 || len(mappings) != 0 {
			t.Errorf("%s: after the refused opens: Opened %d, %d mappings", name, st.Opened, len(mappings))
		}
		// The genuine handle still opens, as the memory it names.
		v, err := d.OpenIPC(h)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Overlaps(b) {
			t.Errorf("%s: the genuine handle's view does not overlap the buffer", name)
		}
		if err := v.CloseIPC(); err != nil {
			t.Fatal(err)
		}
	}
}
