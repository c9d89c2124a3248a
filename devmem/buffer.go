package devmem

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// allocation is one piece of memory a driver handed out.
type allocation struct {
	dev    *Device
	addr   uintptr // device address, or host address for host-accessible memory
	host   []byte  // host view; nil when the host cannot touch the memory
	size   int
	pinned bool
	freed  atomic.Bool // Free or CloseIPC was called: the Buffer is no longer usable
	// gone is set once the host view may no longer be read: with the
	// memory's return, or once the work queued before Free or CloseIPC has
	// run (retire), whichever comes first. Bytes then reports false.
	gone    atomic.Bool
	release func() error // returns the memory to the driver
	shared  *sharedMem   // host driver memory that can be exported
	vmm     *vmmMem      // GPU memory from the driver's virtual memory management
	// home is the allocation whose memory this one is, at homeOff, for the
	// views OpenIPC returns (nil otherwise): overlap is judged on it.
	home    *allocation
	homeOff int
	once    sync.Once
	err     error
}

// Buffer is a range of bytes on a device: a whole allocation or a view into
// one. The zero Buffer is "no buffer". Buffers are small values; copies of
// one refer to the same memory.
type Buffer struct {
	a      *allocation
	off, n int
}

// Alloc allocates n bytes of device memory.
func (d *Device) Alloc(n int) (Buffer, error) {
	return d.allocate(n, false)
}

// AllocPinned allocates n bytes of page-locked host memory that the device
// copies to and from asynchronously. Its Bytes are the host view.
func (d *Device) AllocPinned(n int) (Buffer, error) {
	return d.allocate(n, true)
}

func (d *Device) allocate(n int, pinned bool) (Buffer, error) {
	if err := d.usable("alloc"); err != nil {
		return Buffer{}, err
	}
	if n < 0 {
		return Buffer{}, fmt.Errorf("devmem: alloc of %d bytes: %w", n, ErrInvalidArgument)
	}
	a, err := d.drv.alloc(n, pinned)
	if err != nil {
		return Buffer{}, err
	}
	a.dev, a.size, a.pinned = d, n, pinned
	if pinned {
		d.stats.pinned.Add(1)
	} else {
		d.stats.buffers.Add(1)
	}
	d.stats.bytes.Add(int64(n))
	return Buffer{a: a, n: n}, nil
}

// Free returns the allocation to its device. Only the whole allocation can be
// freed; freeing twice or freeing a view is an error.
//
// The Buffer is dead from the call on: every call that takes it refuses it,
// and the device's Stats no longer count it. Work already queued on a
// stream still runs on the memory, as it would on a GPU, whose cuMemFree
// waits for the work the device was given: the memory is returned once
// every stream that has work queued or running at the Free (on any device:
// a stream of another device may copy it) has run that work, and at once
// when none has. Free never waits for that, so a stream's own host function
// may free what the stream's earlier work used. A GPU stream's work queued
// behind a host function is not the device's yet, so cuMemFree waits for
// it likewise. While a stream's work never ends (a collective no rank
// joins), memory freed after it was queued stays in use, though no longer
// counted. The memory's return fails only where the driver fails; when it
// was left to the streams, Free returns nil and the error is the next
// Synchronize's of the stream whose work ended last, which may be any
// stream that was busy at the Free.
func (b Buffer) Free() error {
	if b.a == nil {
		return fmt.Errorf("devmem: free of the zero Buffer: %w", ErrInvalidArgument)
	}
	if b.off != 0 || b.n != b.a.size || b.a.release == nil {
		return fmt.Errorf("devmem: free of a view (offset %d, %d of %d bytes): %w", b.off, b.n, b.a.size, ErrInvalidArgument)
	}
	if !b.a.freed.CompareAndSwap(false, true) {
		return fmt.Errorf("devmem: buffer freed twice: %w", ErrInvalidArgument)
	}
	b.a.once.Do(func() { b.a.err = b.a.free() })
	st := &b.a.dev.stats
	if b.a.pinned {
		st.pinned.Add(-1)
	} else {
		st.buffers.Add(-1)
	}
	st.bytes.Add(-int64(b.a.size))
	return b.a.err
}

// free returns a's memory (Free): an exported allocation's through its
// export, which keeps it for the views open in this process; any other's
// once the work queued on streams before this call has run (retire).
func (a *allocation) free() error {
	ipcMu.Lock()
	e := exports[a]
	ipcMu.Unlock()
	if e != nil {
		return e.ownerFree()
	}
	return errors.Join(retire(a.dev, a.markGone), retire(nil, func() error {
		a.gone.Store(true)
		return a.release()
	}))
}

// markGone marks a's host view as no longer to be read (gone).
func (a *allocation) markGone() error {
	a.gone.Store(true)
	return nil
}

// IsZero reports whether b is the zero Buffer.
func (b Buffer) IsZero() bool { return b.a == nil }

// Len is the buffer's size in bytes.
func (b Buffer) Len() int { return b.n }

// Device is the device the memory belongs to (nil for the zero Buffer).
func (b Buffer) Device() *Device {
	if b.a == nil {
		return nil
	}
	return b.a.dev
}

// Pinned reports whether b is page-locked host memory rather than device memory.
func (b Buffer) Pinned() bool { return b.a != nil && b.a.pinned }

// Addr is the address of the first byte: a device pointer for device memory,
// a host address for pinned or host-device memory. It is for handing to C
// libraries (MPI, NCCL); Go code uses Bytes.
func (b Buffer) Addr() uintptr {
	if b.a == nil {
		return 0
	}
	return b.a.addr + uintptr(b.off)
}

// Bytes is the host view of the buffer, when the host can touch it (pinned
// memory, and device memory of the host driver). The second result is false
// otherwise, and for a Buffer that was freed (Free) or closed (CloseIPC):
// at once when no stream of its device had work queued then, else once
// that work has run (it may resolve the view as it runs). A view obtained
// earlier must not be used after the Free or CloseIPC.
func (b Buffer) Bytes() ([]byte, bool) {
	if b.a == nil || b.a.host == nil || b.a.gone.Load() {
		return nil, false
	}
	return b.a.host[b.off : b.off+b.n : b.off+b.n], true
}

// Slice returns the view of n bytes starting at off.
func (b Buffer) Slice(off, n int) (Buffer, error) {
	if b.a == nil {
		return Buffer{}, fmt.Errorf("devmem: slice of the zero Buffer: %w", ErrInvalidArgument)
	}
	if off < 0 || n < 0 || off > b.n || n > b.n-off {
		return Buffer{}, fmt.Errorf("devmem: slice [%d:+%d] of a %d-byte buffer: %w", off, n, b.n, ErrInvalidArgument)
	}
	return Buffer{a: b.a, off: b.off + off, n: n}, nil
}

// memory returns the allocation whose memory b is and where b starts in it:
// an opened IPC view resolves to the exported allocation (opened in its
// exporter) or to the one mapping of another process's allocation, which
// every view of it shares.
func (b Buffer) memory() (*allocation, int) {
	if b.a.home != nil {
		return b.a.home, b.a.homeOff + b.off
	}
	return b.a, b.off
}

// Same reports whether a and b are the same Buffer: the same range of the
// same allocation or opened view. (Two views of one memory are not the
// same Buffer, though they overlap: closing one does not close the other.)
func (b Buffer) Same(o Buffer) bool { return b.a == o.a && b.off == o.off && b.n == o.n }

// Overlaps reports whether a and b share any byte of memory. Views that
// OpenIPC returned are judged on the memory they open: a view of an
// allocation overlaps the allocation itself, and two views of one other
// process's allocation overlap where their ranges meet.
func (b Buffer) Overlaps(o Buffer) bool {
	if b.a == nil || o.a == nil || b.n == 0 || o.n == 0 {
		return false
	}
	bm, boff := b.memory()
	om, ooff := o.memory()
	return bm == om && boff < ooff+o.n && ooff < boff+b.n
}

// Check returns an error unless b is live, on dev (when dev is not nil) and
// at least n bytes long. what names the buffer in the message.
func (b Buffer) Check(what string, dev *Device, n int) error {
	switch {
	case b.a == nil:
		return fmt.Errorf("%s: no buffer given: %w", what, ErrInvalidArgument)
	case b.a.freed.Load():
		return fmt.Errorf("%s: buffer was freed: %w", what, ErrInvalidArgument)
	case dev != nil && b.a.dev != dev:
		return fmt.Errorf("%s: buffer is on %v, not %v: %w", what, b.a.dev, dev, ErrInvalidArgument)
	case n > b.n:
		return fmt.Errorf("%s: buffer holds %d bytes, %d needed: %w", what, b.n, n, ErrInvalidArgument)
	}
	return nil
}

// Copy copies all of src into the start of dst, in stream order on s.
func Copy(dst, src Buffer, s *Stream) error { return CopyN(dst, src, src.n, s) }

// CopyN copies the first n bytes of src to the start of dst, in stream order
// on s. Either side may be device or pinned memory; dst and src must belong
// to the same device.
func CopyN(dst, src Buffer, n int, s *Stream) error {
	if err := src.Check("devmem: copy source", nil, n); err != nil {
		return err
	}
	if err := dst.Check("devmem: copy destination", src.a.dev, n); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("devmem: copy of %d bytes: %w", n, ErrInvalidArgument)
	}
	if err := s.check(src.a.dev); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	d, v := Buffer{a: dst.a, off: dst.off, n: n}, Buffer{a: src.a, off: src.off, n: n}
	if d.Overlaps(v) {
		// CUDA leaves overlapping copies undefined; refuse them on every driver.
		return fmt.Errorf("devmem: copy between overlapping ranges: %w", ErrInvalidArgument)
	}
	return src.a.dev.drv.copy(dst, src, n, s)
}

// CopyFromHost copies src, in Go memory, to the start of dst. Because the
// caller may reuse src as soon as this returns, it waits for s's earlier work
// and for the copy itself.
func CopyFromHost(dst Buffer, src []byte, s *Stream) error {
	if err := dst.Check("devmem: copy destination", nil, len(src)); err != nil {
		return err
	}
	if err := s.check(dst.a.dev); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return dst.a.dev.drv.copyFromHost(dst, src, s)
}

// CopyToHost copies the first len(dst) bytes of src into Go memory, waiting
// for s's earlier work and for the copy itself.
func CopyToHost(dst []byte, src Buffer, s *Stream) error {
	if err := src.Check("devmem: copy source", nil, len(dst)); err != nil {
		return err
	}
	if err := s.check(src.a.dev); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return src.a.dev.drv.copyToHost(dst, src, s)
}

// Memset sets every byte of dst to v, in stream order on s.
func Memset(dst Buffer, v byte, s *Stream) error {
	if err := dst.Check("devmem: memset", nil, 0); err != nil {
		return err
	}
	if err := s.check(dst.a.dev); err != nil {
		return err
	}
	if dst.n == 0 {
		return nil
	}
	return dst.a.dev.drv.memset(dst, v, s)
}
