package pipeline

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/gpucomm/gpucomm/devmem"
)

// Slot is one pinned staging chunk with the events that say when the copy
// into it and the copy out of it are done.
type Slot struct {
	Buf     devmem.Buffer
	in, out *devmem.Event
}

// Bytes is the host view of the slot's first n bytes.
func (s *Slot) Bytes(n int) []byte {
	b, _ := s.Buf.Bytes()
	return b[:n]
}

// Part is a slot over n bytes of s from byte off, for a copy stage that
// moves only part of a chunk; it has no events of its own.
func (s *Slot) Part(off, n int) (*Slot, error) {
	b, err := s.Buf.Slice(off, n)
	if err != nil {
		return nil, err
	}
	return &Slot{Buf: b}, nil
}

// Pool keeps staging slots for reuse across transfers; Close frees them.
// Slots come in sizes of base << i, so that a few sizes serve every chunk.
type Pool struct {
	dev  *devmem.Device
	base int // the smallest slot

	mu sync.Mutex
	// free holds the slots waiting for reuse, by size class: a class is
	// base << i, so the bit length of its size names it alone, and a small
	// collective's take and give index an array where a map would hash.
	free   [bits.UintSize + 1][]*Slot
	lent   int // slots handed out and not yet back
	leaked int // slots left to requests that never completed
}

// NewPool makes an empty pool of slots of at least base bytes on dev.
func NewPool(dev *devmem.Device, base int) *Pool { return &Pool{dev: dev, base: base} }

// Class is the slot size that holds n bytes.
func (p *Pool) Class(n int) int {
	size := max(p.base, 1)
	for size < n {
		size *= 2
	}
	return size
}

// Lent is how many slots are handed out and not yet back.
func (p *Pool) Lent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lent
}

// Free is how many slots of size bytes, a Class, wait for reuse.
func (p *Pool) Free(size int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free[bits.Len(uint(size))])
}

func (p *Pool) get(n, bytes int) ([]*Slot, error) {
	size := p.Class(bytes)
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Slot, 0, n)
	for len(out) < n {
		s, err := p.takeLocked(size)
		if err != nil {
			for _, x := range out {
				p.giveLocked(x)
			}
			return nil, err
		}
		out = append(out, s)
	}
	p.lent += n
	return out, nil
}

// Take lends one slot of at least bytes bytes, for a message of one chunk
// that its caller moves itself, with a blocking call that is done with the
// slot when it returns; Give returns the slot. Unlike Run's slots, one slot
// costs no allocation once the pool holds one of its size.
func (p *Pool) Take(bytes int) (*Slot, error) {
	size := p.Class(bytes)
	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := p.takeLocked(size)
	if err != nil {
		return nil, err
	}
	p.lent++
	return s, nil
}

// Give returns a slot that Take lent.
func (p *Pool) Give(s *Slot) {
	p.mine(s)
	p.mu.Lock()
	p.giveLocked(s)
	p.lent--
	p.mu.Unlock()
}

// takeLocked reuses a free slot of size bytes, or makes one. p.mu is held.
func (p *Pool) takeLocked(size int) (*Slot, error) {
	i := bits.Len(uint(size))
	if f := p.free[i]; len(f) > 0 {
		s := f[len(f)-1]
		f[len(f)-1] = nil
		p.free[i] = f[:len(f)-1]
		return s, nil
	}
	return p.newSlot(size)
}

// mine panics unless s is a slot of one of the pool's classes with its
// events, as the pool makes them: filed by its size's bit length, any other
// would be lent for a class larger than it (a Part, or another pool's).
func (p *Pool) mine(s *Slot) {
	if n := s.Buf.Len(); s.in == nil || n != p.Class(n) {
		panic(fmt.Sprintf("pipeline: a slot of %d bytes given back to a pool whose classes start at %d bytes (a Part, or another pool's slot)", n, p.base))
	}
}

// giveLocked keeps s for reuse. p.mu is held.
func (p *Pool) giveLocked(s *Slot) {
	i := bits.Len(uint(s.Buf.Len()))
	p.free[i] = append(p.free[i], s)
}

func (p *Pool) newSlot(size int) (*Slot, error) {
	buf, err := p.dev.AllocPinned(size)
	if err != nil {
		return nil, fmt.Errorf("staging buffer of %d bytes: %w", size, err)
	}
	in, err := p.dev.NewEvent()
	if err != nil {
		return nil, errors.Join(err, buf.Free())
	}
	out, err := p.dev.NewEvent()
	if err != nil {
		return nil, errors.Join(err, buf.Free(), in.Destroy())
	}
	return &Slot{Buf: buf, in: in, out: out}, nil
}

func (p *Pool) put(s []*Slot) {
	for _, x := range s {
		p.mine(x)
	}
	p.mu.Lock()
	for _, x := range s {
		p.giveLocked(x)
	}
	p.lent -= len(s)
	p.mu.Unlock()
}

// leak gives up slots that pending requests may still read or write.
func (p *Pool) leak(s []*Slot) {
	p.mu.Lock()
	p.lent -= len(s)
	p.leaked += len(s)
	p.mu.Unlock()
}

// Close frees every slot; none may be lent, since transfers have ended.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for i, f := range p.free {
		for _, s := range f {
			errs = append(errs, s.Buf.Free(), s.in.Destroy(), s.out.Destroy())
		}
		p.free[i] = nil
	}
	if p.lent > 0 {
		errs = append(errs, fmt.Errorf("%d staging buffers still lent at Close", p.lent))
	}
	return errors.Join(errs...)
}
