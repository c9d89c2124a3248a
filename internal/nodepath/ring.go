package nodepath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/errs"
)

const (
	// DefaultBytes is where the node path starts when no option says:
	// from there up a message is worth its header round.
	DefaultBytes = 64 << 10
	// ringSlots is how many chunks a ring holds: one being copied in, one
	// being copied out, and two in between.
	ringSlots = 4
	// ringCtlBytes is the page before the slots: the two counters, each on
	// a cache line of its own, and the sender's outgoing header.
	ringCtlBytes = 4096
	ringReadyOff = 0
	ringDoneOff  = 128
	ringHdrOff   = 1024

	hdrMagic = 0x676370636e6f6465 // "gcpcnode"
	// HdrLen is the length of a header.
	HdrLen = 5*8 + devmem.HandleSize
)

// IsHeader reports whether b (HdrLen bytes) is a node path header.
func IsHeader(b []byte) bool { return binary.LittleEndian.Uint64(b) == hdrMagic }

// HeaderBytes is the message length a header b announces.
func HeaderBytes(b []byte) uint64 { return binary.LittleEndian.Uint64(b[16:]) }

// HdrRoom is the receive buffer for a header: larger than one, and than
// the first chunk of any message below the node path's size (nodeMin) cut
// in chunks of chunk, so that a message the sender sent through its
// transport (its count differs) arrives whole and is reported as a
// mismatch rather than truncated.
func HdrRoom(nodeMin, chunk int) int { return max(HdrLen+1, 4096, min(nodeMin, chunk)) }

func (l *Link) counter(off int) *atomic.Uint64 {
	b, _ := l.ring.Bytes()
	return (*atomic.Uint64)(unsafe.Pointer(&b[off]))
}

func (l *Link) slot(seq uint64, n int) devmem.Buffer {
	s, _ := l.ring.Slice(ringCtlBytes+int(seq%uint64(l.slots))*l.slotBytes, n)
	return s
}

func newEvents(dev *devmem.Device, n int) ([]*devmem.Event, error) {
	evs := make([]*devmem.Event, 0, n)
	for range n {
		e, err := dev.NewEvent()
		if err != nil {
			for _, e := range evs {
				e.Destroy()
			}
			return nil, err
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// chunksOf is how many slots a message of n bytes takes.
func chunksOf(n, slotBytes int) int { return (n + slotBytes - 1) / slotBytes }

// Header gives a send link its ring of slots of slotBytes on its first
// message, writes the header of a message of bytes bytes into the ring's
// control page and returns it, for the caller's transport to send.
func (l *Link) Header(dev *devmem.Device, slotBytes, bytes int) (devmem.Buffer, error) {
	if l.ring.IsZero() {
		ring, err := dev.AllocPinnedShared(ringCtlBytes + ringSlots*slotBytes)
		if err != nil {
			return devmem.Buffer{}, err
		}
		h, err := ring.Export()
		if err != nil {
			return devmem.Buffer{}, errors.Join(err, ring.Free())
		}
		ev, err := newEvents(dev, ringSlots)
		if err != nil {
			return devmem.Buffer{}, errors.Join(err, ring.Free())
		}
		l.ring, l.handle, l.slots, l.slotBytes, l.ev = ring, h, ringSlots, slotBytes, ev
		l.Taken.Store(l.counter(ringDoneOff))
	}
	b, _ := l.ring.Bytes()
	h := b[ringHdrOff : ringHdrOff+HdrLen]
	binary.LittleEndian.PutUint64(h[0:], hdrMagic)
	binary.LittleEndian.PutUint64(h[8:], l.chunks)
	binary.LittleEndian.PutUint64(h[16:], uint64(bytes))
	binary.LittleEndian.PutUint64(h[24:], uint64(l.slots))
	binary.LittleEndian.PutUint64(h[32:], uint64(l.slotBytes))
	raw, _ := l.handle.MarshalBinary()
	copy(h[40:], raw)
	return l.ring.Slice(ringHdrOff, HdrLen)
}

// SendChunks copies bytes bytes of src through the ring on st, after the
// header (Header) has gone: chunk by chunk, each once the receiver has made
// room for it. progress, when set, drives the caller's transport between
// sleeps. On success the chunks count as sent (Sent). The caller moves the
// chunks of one message at a time on a link, in its turn.
func (l *Link) SendChunks(deadline time.Time, src devmem.Buffer, bytes int, st *devmem.Stream, progress func()) error {
	ready, done := l.counter(ringReadyOff), l.counter(ringDoneOff)
	base := l.chunks
	k := chunksOf(bytes, l.slotBytes)
	err := l.pump(deadline, base, bytes, st,
		func(seq uint64) bool { return seq-done.Load() < uint64(l.slots) },
		func(off, n int, slot devmem.Buffer) error {
			s, err := src.Slice(off, n)
			if err != nil {
				return err
			}
			return devmem.CopyN(slot, s, n, st)
		},
		ready.Store, progress,
		func() string {
			return fmt.Sprintf("rank %d has taken %d of the message's %d chunks out of the node ring", l.peer, done.Load()-min(done.Load(), base), k)
		})
	if err != nil {
		return err
	}
	l.chunks = base + uint64(k)
	return nil
}

// SendDone counts a message whose chunks went (SendChunks) and whose header
// the receiver has taken: its chunks are owed to the receiver until it has
// taken them out (Table.Owed).
func (l *Link) SendDone() { l.Sent.Store(l.chunks) }

// HeaderRoom is a receive link's pinned room for an incoming header, of
// room bytes (HdrRoom), made on first use.
func (l *Link) HeaderRoom(dev *devmem.Device, room int) (devmem.Buffer, error) {
	if l.hdr.IsZero() {
		var err error
		if l.hdr, err = dev.AllocPinned(room); err != nil {
			return devmem.Buffer{}, err
		}
	}
	return l.hdr, nil
}

// Accept reads the header that came into HeaderRoom as a message of got
// bytes, checks it against the ring this link has taken chunks from (whose
// slots must be of slotBytes), opens the sender's ring on first use, and
// returns the message's length. inStep false: the failure leaves the two
// sides' counters apart (a message of more than one chunk of chunk bytes
// through the transport, or a header out of step).
func (l *Link) Accept(dev *devmem.Device, got, slotBytes int) (bytes int, inStep bool, err error) {
	h, _ := l.hdr.Bytes()
	if got != HdrLen || !IsHeader(h) {
		// The first of several chunks: a message of more than one chunk
		// through the transport, whose later chunks wait for receives that
		// will not come.
		return 0, got+16 <= slotBytes, fmt.Errorf("rank %d sent a message of %d bytes through MPI, not through the node path; the sender's count differs: %w",
			l.peer, got, errs.ErrMismatch)
	}
	from := binary.LittleEndian.Uint64(h[8:])
	bytes = int(binary.LittleEndian.Uint64(h[16:]))
	slots := int(binary.LittleEndian.Uint64(h[24:]))
	hSlotBytes := int(binary.LittleEndian.Uint64(h[32:]))
	var handle devmem.IPCHandle
	if err := handle.UnmarshalBinary(h[40:HdrLen]); err != nil {
		return 0, false, fmt.Errorf("node path header from rank %d: %w", l.peer, err)
	}
	if from != l.chunks || slots != ringSlots || hSlotBytes != slotBytes || bytes < 0 || bytes > math.MaxInt/2 ||
		!handle.Pinned() || handle.Offset() != 0 || handle.Size() != ringCtlBytes+slots*hSlotBytes {
		return 0, false, fmt.Errorf("node path header from rank %d out of step (its chunks start at %d, this rank has taken %d; %d slots of %d bytes in %d): %w",
			l.peer, from, l.chunks, slots, hSlotBytes, handle.Size(), errs.ErrMismatch)
	}
	if l.ring.IsZero() || l.handle != handle {
		if !l.ring.IsZero() {
			return 0, false, fmt.Errorf("rank %d's node ring changed: %w", l.peer, errs.ErrMismatch)
		}
		ring, err := dev.OpenIPC(handle)
		if err != nil {
			return 0, false, fmt.Errorf("opening rank %d's node ring: %w", l.peer, err)
		}
		ev, err := newEvents(dev, slots)
		if err != nil {
			return 0, false, errors.Join(err, ring.CloseIPC())
		}
		l.ring, l.handle, l.slots, l.slotBytes, l.ev = ring, handle, slots, hSlotBytes, ev
	}
	return bytes, true, nil
}

// RecvChunks takes the bytes bytes of an accepted message out of the ring,
// copying them to dst on st; discard takes them out without copying (a
// sender whose count differs still sends its chunks, and the ring must stay
// in step).
func (l *Link) RecvChunks(deadline time.Time, dst devmem.Buffer, discard bool, bytes int, st *devmem.Stream) error {
	ready, done := l.counter(ringReadyOff), l.counter(ringDoneOff)
	base := l.chunks
	k := chunksOf(bytes, l.slotBytes)
	var copyOut func(off, n int, slot devmem.Buffer) error
	if !discard {
		copyOut = func(off, n int, slot devmem.Buffer) error {
			d, err := dst.Slice(off, n)
			if err != nil {
				return err
			}
			return devmem.CopyN(d, slot, n, st)
		}
	}
	err := l.pump(deadline, base, bytes, st,
		func(seq uint64) bool { return ready.Load() > seq },
		copyOut, done.Store, nil,
		func() string {
			return fmt.Sprintf("rank %d has put %d of the message's %d chunks into the node ring", l.peer, ready.Load()-min(ready.Load(), base), k)
		})
	if err != nil {
		return err
	}
	l.chunks = base + uint64(k)
	return nil
}

// poll waits until cond holds, spinning first (a chunk is tens of µs away),
// then sleeping a little longer each time, up to the deadline. failed stops
// it early (a helper goroutine failed: the caller collects its error);
// progress, when set, runs between sleeps (driving the transport).
func poll(deadline time.Time, cond func() bool, failed *atomic.Bool, progress func(), what func() string) error {
	const spin = 200 * time.Microsecond
	start := time.Now()
	sleep := 10 * time.Microsecond
	for i := 0; ; i++ {
		if cond() || failed.Load() {
			return nil
		}
		if i%32 != 31 {
			runtime.Gosched()
			continue
		}
		now := time.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			return fmt.Errorf("%s: %w", what(), errs.ErrTimeout)
		}
		if now.Sub(start) > spin {
			if progress != nil {
				progress()
			}
			time.Sleep(sleep)
			sleep = min(2*sleep, time.Millisecond)
		}
	}
}

// pump moves the chunks of a message of bytes bytes through the link's ring, from
// chunk base: for each in turn it waits until may (room in the ring for it,
// or it in the ring), queues copy of its bytes [off, off+n) to or from its
// slot on st (copy nil: nothing to copy, the chunk is only passed on) and
// records the slot's event; a goroutine waits for each chunk's copy, in
// order, and then publishes seq+1 (the count of chunks put in, or taken
// out). It returns once every chunk is published, or at the first error.
func (l *Link) pump(deadline time.Time, base uint64, bytes int, st *devmem.Stream, may func(seq uint64) bool,
	copy func(off, n int, slot devmem.Buffer) error, publish func(uint64), progress func(), what func() string) error {
	k := chunksOf(bytes, l.slotBytes)
	queued := make(chan uint64, l.slots)
	helperErr := make(chan error, 1)
	var failed atomic.Bool
	go func() {
		for range k {
			seq, ok := <-queued
			if !ok {
				break
			}
			if copy != nil {
				if err := l.ev[seq%uint64(l.slots)].Synchronize(); err != nil {
					failed.Store(true)
					helperErr <- err
					return
				}
			}
			publish(seq + 1)
		}
		helperErr <- nil
	}()
	var loopErr error
	for j := range k {
		seq := base + uint64(j)
		if loopErr = poll(deadline, func() bool { return may(seq) }, &failed, progress, what); loopErr != nil || failed.Load() {
			break
		}
		if copy != nil {
			off := j * l.slotBytes
			n := min(l.slotBytes, bytes-off)
			if loopErr = copy(off, n, l.slot(seq, n)); loopErr == nil {
				loopErr = l.ev[seq%uint64(l.slots)].Record(st)
			}
			if loopErr != nil {
				break
			}
		}
		queued <- seq
	}
	close(queued)
	return errors.Join(loopErr, <-helperErr)
}
