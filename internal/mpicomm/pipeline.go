package mpicomm

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// slot is one pinned staging chunk with the events that say when the copy
// into it and the copy out of it are done.
type slot struct {
	buf     devmem.Buffer
	in, out *devmem.Event
}

// pool keeps staging slots for reuse across operations; Close frees them.
type pool struct {
	dev  *devmem.Device
	size int // bytes a slot holds: the agreed chunk

	mu     sync.Mutex
	free   []*slot
	lent   int // slots handed out and not yet back
	leaked int // slots left to MPI requests that never completed
}

func (p *pool) get(n int) ([]*slot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*slot, 0, n)
	for len(out) < n && len(p.free) > 0 {
		out = append(out, p.free[len(p.free)-1])
		p.free = p.free[:len(p.free)-1]
	}
	for len(out) < n {
		s, err := p.newSlot()
		if err != nil {
			p.free = append(p.free, out...)
			return nil, err
		}
		out = append(out, s)
	}
	p.lent += n
	return out, nil
}

func (p *pool) newSlot() (*slot, error) {
	buf, err := p.dev.AllocPinned(p.size)
	if err != nil {
		return nil, fmt.Errorf("staging buffer of %d bytes: %w", p.size, err)
	}
	in, err := p.dev.NewEvent()
	if err != nil {
		return nil, errors.Join(err, buf.Free())
	}
	out, err := p.dev.NewEvent()
	if err != nil {
		return nil, errors.Join(err, buf.Free(), in.Destroy())
	}
	return &slot{buf: buf, in: in, out: out}, nil
}

func (p *pool) put(s []*slot) {
	p.mu.Lock()
	p.free = append(p.free, s...)
	p.lent -= len(s)
	p.mu.Unlock()
}

// leak gives up slots that pending MPI requests may still read or write.
func (p *pool) leak(s []*slot) {
	p.mu.Lock()
	p.lent -= len(s)
	p.leaked += len(s)
	p.mu.Unlock()
}

// close frees every slot; none may be lent, since operations have ended.
func (p *pool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, s := range p.free {
		errs = append(errs, s.buf.Free(), s.in.Destroy(), s.out.Destroy())
	}
	p.free = nil
	if p.lent > 0 {
		errs = append(errs, fmt.Errorf("%d staging buffers still lent at Close", p.lent))
	}
	return errors.Join(errs...)
}

// copyStage copies between a device range and a slot; st nil means "now".
type copyStage func(s *slot, off, n int, st *devmem.Stream) error

// pipeline is one transfer cut into chunks that each go through a slot:
// in (a copy into the slot on the D2H stream), MPI on the slot, post (host
// work on the result), out (a copy out of the slot on the H2D stream). The
// copy in of chunk k+1, MPI on chunk k and the copy out of chunk k-1 run at
// the same time. in, mpi, post and out may be nil.
type pipeline struct {
	bytes      int
	chunk      int  // bytes, a whole number of elements
	atLeastOne bool // a message of 0 bytes still goes (point-to-point)
	receives   bool // its MPI requests are receives, which a failure may cancel
	in         copyStage
	mpi        func(s *slot, off, n int) ([]*mpi.Request, error)
	post       func(s *slot, off, n int, reqs []*mpi.Request) error
	out        copyStage
}

// run drives p to the end. A message of one chunk copies synchronously,
// which is faster than going through the streams and their events.
func (c *Comm) run(o *op, p pipeline) (err error) {
	k := (p.bytes + p.chunk - 1) / p.chunk
	if k == 0 && p.atLeastOne {
		k = 1
	}
	if k == 0 {
		return nil
	}
	nSlots := min(pipeSlots, k)
	slots, err := c.pool.get(nSlots)
	if err != nil {
		return err
	}
	async := k > 1
	var sIn, sOut *devmem.Stream
	if async {
		sIn, sOut = c.d2h, c.h2d
	}
	reqs := make([][]*mpi.Request, nSlots)
	defer func() { c.settle(o, slots, reqs, p.receives, err) }()

	span := func(j int) (off, n int) {
		off = j * p.chunk
		return off, max(0, min(p.chunk, p.bytes-off))
	}
	issued, freed := 0, 0 // chunks whose copy in was queued; chunks whose slot is free again
	fill := func() error {
		for ; issued < k && issued < freed+nSlots; issued++ {
			if p.in == nil {
				continue
			}
			s := slots[issued%nSlots]
			off, n := span(issued)
			if err := p.in(s, off, n, sIn); err != nil {
				return err
			}
			if async {
				if err := s.in.Record(sIn); err != nil {
					return err
				}
			}
		}
		return nil
	}
	start := func(j int) error {
		s := slots[j%nSlots]
		if p.in != nil && async {
			if err := s.in.Synchronize(); err != nil {
				return err
			}
		}
		if p.mpi == nil {
			return nil
		}
		off, n := span(j)
		r, err := p.mpi(s, off, n)
		reqs[j%nSlots] = r
		return err
	}
	finish := func(j int) error {
		s := slots[j%nSlots]
		if err := c.wait(o, reqs[j%nSlots]); err != nil {
			return err
		}
		r := reqs[j%nSlots]
		reqs[j%nSlots] = nil
		off, n := span(j)
		if p.post != nil {
			if err := p.post(s, off, n, r); err != nil {
				return err
			}
		}
		if p.out == nil {
			return nil
		}
		if err := p.out(s, off, n, sOut); err != nil {
			return err
		}
		if async {
			return s.out.Record(sOut)
		}
		return nil
	}
	drained := func(j int) error {
		if p.out != nil && async {
			return slots[j%nSlots].out.Synchronize()
		}
		return nil
	}

	for j := range k {
		if err := fill(); err != nil {
			return err
		}
		if err := start(j); err != nil {
			return err
		}
		if j == 0 {
			continue
		}
		if err := finish(j - 1); err != nil {
			return err
		}
		switch {
		case p.out == nil:
			freed = j
		case j >= 2:
			if err := drained(j - 2); err != nil {
				return err
			}
			freed = j - 1
		}
	}
	if err := finish(k - 1); err != nil {
		return err
	}
	for j := max(0, k-2); j < k; j++ {
		if err := drained(j); err != nil {
			return err
		}
	}
	return nil
}

// settle returns the slots once nothing uses them. After a failure, copies
// still queued finish first, and receives posted ahead are cancelled (a
// shorter message than expected leaves the next chunk's receive posted);
// MPI requests still pending keep their slots (leaked) and leave the
// communicator broken, since MPI may yet write there and the ranks are out
// of step.
func (c *Comm) settle(o *op, slots []*slot, reqs [][]*mpi.Request, cancel bool, err error) {
	if err == nil {
		c.pool.put(slots)
		return
	}
	for _, s := range slots {
		s.in.Synchronize()
		s.out.Synchronize()
	}
	var pending []*mpi.Request
	for _, rs := range reqs {
		for _, r := range rs {
			if !r.Done() {
				pending = append(pending, r)
			}
		}
	}
	if len(pending) == 0 {
		c.pool.put(slots)
		return
	}
	if cancel && !errors.Is(err, comm.ErrTimeout) {
		for _, r := range pending {
			r.Cancel()
		}
		mpi.WaitTimeout(pending, time.Second)
	}
	if done, terr := mpi.Testall(pending); terr == nil && done {
		c.pool.put(slots)
		return
	}
	c.pool.leak(slots)
	if !errors.Is(err, comm.ErrTimeout) {
		c.setBroken(fmt.Errorf("%v failed with MPI requests pending: %w", o.call.Operation, err))
	}
}

// chunkFor is the agreed chunk rounded down to whole elements of es bytes.
func (c *Comm) chunkFor(es int) int { return max(es, c.chunk/es*es) }

// copyIn copies bytes [off, off+n) of buf into the slot.
func copyIn(buf devmem.Buffer) copyStage {
	return func(s *slot, off, n int, st *devmem.Stream) error {
		if n == 0 {
			return nil
		}
		src, err := buf.Slice(off, n)
		if err != nil {
			return err
		}
		return devmem.CopyN(s.buf, src, n, st)
	}
}

// copyOut copies the slot's first n bytes to bytes [off-base, off-base+n)
// of buf.
func copyOut(buf devmem.Buffer, base int) copyStage {
	return func(s *slot, off, n int, st *devmem.Stream) error {
		if n == 0 {
			return nil
		}
		dst, err := buf.Slice(off-base, n)
		if err != nil {
			return err
		}
		return devmem.CopyN(dst, s.buf, n, st)
	}
}

// slotBytes is the host view of a slot's first n bytes.
func slotBytes(s *slot, n int) []byte {
	b, _ := s.buf.Bytes()
	return b[:n]
}
