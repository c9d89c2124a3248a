package devmem

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"testing"
)

func allocPinnedSharedFilled(t *testing.T, d *Device, seed uint64, n int) Buffer {
	t.Helper()
	b, err := d.AllocPinnedShared(n)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Pinned() || b.Len() != n {
		t.Fatalf("AllocPinnedShared(%d): Pinned %v, Len %d", n, b.Pinned(), b.Len())
	}
	host, ok := b.Bytes()
	if !ok || len(host) != n {
		t.Fatalf("Bytes of AllocPinnedShared(%d): %d bytes, %v", n, len(host), ok)
	}
	copy(host, fill(seed, n))
	return b
}

// A child process opens a view of pinned shared memory, finds the parent's
// bytes there, and its writes are the parent's to read.
func TestPinnedSharedChildReadsAndWrites(t *testing.T) {
	const total, seed = 3*4096 + 123, 21 // not whole pages: the mapping is rounded up, the Buffer is not
	d := NewHostDevice()
	buf := allocPinnedSharedFilled(t, d, seed, total)
	defer buf.Free()
	view, err := buf.Slice(100, total-200)
	if err != nil {
		t.Fatal(err)
	}
	h, err := view.Export()
	if err != nil {
		t.Fatal(err)
	}
	if !h.Pinned() || h.Offset() != 100 || h.Size() != total-200 || h.Kind() != Host {
		t.Fatalf("handle says %v, pinned %v", h, h.Pinned())
	}
	childWritesView(t, buf, h, seed, total, 999, 4000, 31)
}

// Opened in the exporting process, the view is the memory itself, pinned,
// and device copies to and from it work as with any pinned buffer.
func TestPinnedSharedOpenInExporterAndCopy(t *testing.T) {
	const n = 10000
	d := NewHostDevice()
	buf := allocPinnedSharedFilled(t, d, 3, n)
	defer buf.Free()
	h, v := exportOpen(t, d, buf)
	if v.Addr() != buf.Addr() || !v.Pinned() || v.Len() != n {
		t.Fatalf("view at %#x (pinned %v, %d bytes), memory at %#x", v.Addr(), v.Pinned(), v.Len(), buf.Addr())
	}
	if again, err := v.Export(); err != nil || again != h {
		t.Errorf("Export of the opened view = %v, %v; want the handle it was opened from", again, err)
	}
	dev, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	if err := Memset(dev, 0xAB, nil); err != nil {
		t.Fatal(err)
	}
	if err := CopyN(dev, v, n, s); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, n)
	if err := CopyToHost(back, dev, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	want := fill(3, n)
	for i := range want {
		if back[i] != want[i] {
			t.Fatalf("byte %d copied through the view = %#x, want %#x", i, back[i], want[i])
		}
	}
	if err := v.CloseIPC(); err != nil {
		t.Fatal(err)
	}
}

func TestPinnedSharedMisuse(t *testing.T) {
	d := NewHostDevice()
	for _, n := range []int{0, -1} {
		if b, err := d.AllocPinnedShared(n); !errors.Is(err, ErrInvalidArgument) || !b.IsZero() {
			t.Errorf("AllocPinnedShared(%d) = %v, %v; want ErrInvalidArgument", n, b, err)
		}
	}
	var nilDev *Device
	if _, err := nilDev.AllocPinnedShared(8); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AllocPinnedShared on a nil device: %v", err)
	}
	// A handle with an unknown flag is refused before anything is mapped.
	buf := allocPinnedSharedFilled(t, d, 1, 64)
	h, err := buf.Export()
	if err != nil {
		t.Fatal(err)
	}
	bad := h
	bad.raw[hoFlags] = 2
	binary.LittleEndian.PutUint32(bad.raw[hoCRC:], crc32.Checksum(bad.raw[:hoCRC], castagnoli))
	if _, err := d.OpenIPC(bad); !errors.Is(err, ErrBadHandle) {
		t.Errorf("OpenIPC of a handle with flags 2: %v", err)
	}
	// Driver bytes naming a descriptor the process does not have: refused
	// as a bad handle, nothing mapped.
	forged := reseal(t, h, func(f *handleFields) {
		binary.LittleEndian.PutUint32(f.drv[4:], 1<<20)
		f.pid = uint32(os.Getppid())
	})
	if v, err := d.OpenIPC(forged); !errors.Is(err, ErrBadHandle) {
		v.CloseIPC()
		t.Errorf("OpenIPC of pinned driver bytes naming no descriptor: %v, want ErrBadHandle", err)
	}
	// Freed: the handle no longer opens in the exporter.
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.OpenIPC(h); !errors.Is(err, ErrBadHandle) {
		t.Errorf("OpenIPC after Free: %v, want ErrBadHandle", err)
	}
	if len(exports) != 0 || len(mappings) != 0 {
		t.Errorf("%d exports and %d mappings recorded, want none", len(exports), len(mappings))
	}
}
