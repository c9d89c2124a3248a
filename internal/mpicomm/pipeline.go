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
// Slots come in sizes of base << i, so that a few sizes serve every chunk.
type pool struct {
	dev  *devmem.Device
	base int // the smallest slot: the agreed chunk

	mu     sync.Mutex
	free   map[int][]*slot // by size
	lent   int             // slots handed out and not yet back
	leaked int             // slots left to MPI requests that never completed
}

// class is the slot size that holds n bytes.
func (p *pool) class(n int) int {
	size := max(p.base, 1)
	for size < n {
		size *= 2
	}
	return size
}

func (p *pool) get(n, bytes int) ([]*slot, error) {
	size := p.class(bytes)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[int][]*slot{}
	}
	out := make([]*slot, 0, n)
	for len(out) < n && len(p.free[size]) > 0 {
		f := p.free[size]
		out = append(out, f[len(f)-1])
		p.free[size] = f[:len(f)-1]
	}
	for len(out) < n {
		s, err := p.newSlot(size)
		if err != nil {
			p.free[size] = append(p.free[size], out...)
			return nil, err
		}
		out = append(out, s)
	}
	p.lent += n
	return out, nil
}

func (p *pool) newSlot(size int) (*slot, error) {
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
	return &slot{buf: buf, in: in, out: out}, nil
}

func (p *pool) put(s []*slot) {
	p.mu.Lock()
	if p.free == nil {
		p.free = map[int][]*slot{}
	}
	for _, x := range s {
		p.free[x.buf.Len()] = append(p.free[x.buf.Len()], x)
	}
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
	for _, f := range p.free {
		for _, s := range f {
			errs = append(errs, s.buf.Free(), s.in.Destroy(), s.out.Destroy())
		}
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
// copy in of later chunks, MPI on chunk k and the copy out of earlier chunks
// run at the same time. in, mpi, post and out may be nil.
type pipeline struct {
	bytes      int
	chunk      int  // bytes of the first chunk, a whole number of elements
	maxChunk   int  // later chunks double up to this many bytes (whole elements); 0: all are chunk
	slotBytes  int  // bytes a slot must hold for one chunk; the largest chunk when 0
	atLeastOne bool // a message of 0 bytes still goes (point-to-point)
	receives   bool // its MPI requests are receives, which a failure may cancel
	in         copyStage
	mpi        func(s *slot, off, n int) ([]*mpi.Request, error)
	// check runs in the MPI stage right after a chunk's requests complete
	// and before the next chunk's are waited for: a receive shorter than
	// expected must stop the pipeline before it waits for a receive that
	// no send will ever match.
	check func(s *slot, off, n int, reqs []*mpi.Request) error
	post  func(s *slot, off, n int, reqs []*mpi.Request) error
	out   copyStage
}

// run drives p to the end. A message of one chunk runs its stages one
// after the other on this goroutine, with synchronous copies. A longer one
// runs three stages at once, with up to pipeSlots chunks between them: a
// goroutine copies each chunk in (waiting for the copy) and starts its MPI
// at once; this goroutine waits for each chunk's MPI in order; a goroutine
// finishes each chunk (post, copy out, wait for it) and frees its slot. So
// MPI always has the next chunks while the first is waited for, and copies
// are issued and waited for outside the waits, which is where a
// shared-memory MPI moves the data. Every rank starts a collective's chunks
// in the same order, from the one goroutine of stage 1.
func (c *Comm) run(o *op, p pipeline) (err error) {
	spans := p.spans()
	k := len(spans)
	if k == 0 {
		return nil
	}
	largest := 0
	for _, sp := range spans {
		largest = max(largest, sp[1])
	}
	nSlots := min(pipeSlots, k)
	slots, err := c.pool.get(nSlots, max(p.slotBytes, largest, 1))
	if err != nil {
		return err
	}
	reqs := make([][]*mpi.Request, nSlots)
	span := func(j int) (off, n int) { return spans[j][0], spans[j][1] }
	tr := c.trace.begin(k)
	if k == 1 {
		defer func() { c.settle(o, slots, reqs, p.receives, err) }()
		return c.runOne(o, p, slots[0], &reqs[0])
	}

	quit := make(chan struct{})
	var stageErr error
	var stageMu sync.Mutex
	fail := func(err error) {
		stageMu.Lock()
		if stageErr == nil {
			stageErr = err
			close(quit)
		}
		stageMu.Unlock()
	}
	free := make(chan struct{}, nSlots) // tokens: a slot may take a new chunk
	for range nSlots {
		free <- struct{}{}
	}
	posted := make(chan int, k) // chunks whose MPI has started, in order
	out := make(chan int, k)    // chunks through MPI, in order
	var wg sync.WaitGroup
	// Stage 1: copy each chunk in and start its MPI at once, so that MPI
	// has the next chunks while stage 2 waits for the first.
	wg.Go(func() {
		for j := range k {
			select {
			case <-free:
			case <-quit:
				return
			}
			s := slots[j%nSlots]
			off, n := span(j)
			if tr != nil && p.in != nil {
				tr.rows[j].inStart = tr.at()
			}
			if err := copyAndWait(p.in, s, off, n, c.d2h, s.in); err != nil {
				fail(err)
				return
			}
			if tr != nil && p.in != nil {
				tr.rows[j].inEnd = tr.at()
			}
			if p.mpi != nil {
				r, err := p.mpi(s, off, n)
				reqs[j%nSlots] = r
				if err != nil {
					fail(err)
					return
				}
				if tr != nil {
					tr.rows[j].posted = tr.at()
				}
			}
			posted <- j
		}
	})
	// Stage 3: finish each chunk and free its slot.
	wg.Go(func() {
		for range k {
			var j int
			select {
			case j = <-out:
			case <-quit:
				return
			}
			s := slots[j%nSlots]
			off, n := span(j)
			r := reqs[j%nSlots]
			reqs[j%nSlots] = nil
			if p.post != nil {
				if err := p.post(s, off, n, r); err != nil {
					fail(err)
					return
				}
			}
			if tr != nil && p.out != nil {
				tr.rows[j].outStart = tr.at()
			}
			if err := copyAndWait(p.out, s, off, n, c.h2d, s.out); err != nil {
				fail(err)
				return
			}
			if tr != nil && p.out != nil {
				tr.rows[j].outEnd = tr.at()
			}
			free <- struct{}{}
		}
	})
	// Stage 2, here: wait for each chunk's MPI in order.
waits:
	for j := range k {
		select {
		case <-posted:
		case <-quit:
			break waits
		}
		if err := c.wait(o, reqs[j%nSlots]); err != nil {
			fail(err)
			break
		}
		if tr != nil && p.mpi != nil {
			tr.rows[j].mpiDone = tr.at()
		}
		if p.check != nil {
			off, n := span(j)
			if err := p.check(slots[j%nSlots], off, n, reqs[j%nSlots]); err != nil {
				fail(err)
				break
			}
		}
		out <- j
	}
	wg.Wait()
	stageMu.Lock()
	err = stageErr
	stageMu.Unlock()
	c.settle(o, slots, reqs, p.receives, err)
	if err == nil && tr != nil {
		tr.print(c.trace, c.rank, o.call.Signature(), spans)
	}
	return err
}

// copyAndWait queues a copy stage (if any) of a chunk on st and waits for it
// through the slot's event ev.
func copyAndWait(stage copyStage, s *slot, off, n int, st *devmem.Stream, ev *devmem.Event) error {
	if stage == nil {
		return nil
	}
	if err := stage(s, off, n, st); err != nil {
		return err
	}
	return errors.Join(ev.Record(st), ev.Synchronize())
}

// spans cuts the message into chunks {offset, bytes}: the first of p.chunk
// bytes, each next one twice the one before up to p.maxChunk. The cuts
// depend on the chunk's index only, never on the message's length, so that
// a sender and a receiver that disagree on the length still cut the same
// way up to the shorter one's end, and the receiver sees the difference
// (ErrMismatch) instead of a sender waiting for receives that never come.
func (p pipeline) spans() [][2]int {
	var out [][2]int
	c := p.chunk
	for off := 0; off < p.bytes; off += c {
		if len(out) > 0 && p.maxChunk > c {
			c = min(2*c, p.maxChunk)
		}
		out = append(out, [2]int{off, min(c, p.bytes-off)})
	}
	if len(out) == 0 && p.atLeastOne {
		out = append(out, [2]int{0, 0})
	}
	return out
}

// runOne runs a message of one chunk through its stages in turn, with
// synchronous copies, which is faster than going through the streams.
func (c *Comm) runOne(o *op, p pipeline, s *slot, reqs *[]*mpi.Request) error {
	n := p.bytes
	if p.in != nil {
		if err := p.in(s, 0, n, nil); err != nil {
			return err
		}
	}
	if p.mpi != nil {
		r, err := p.mpi(s, 0, n)
		*reqs = r
		if err != nil {
			return err
		}
		if err := c.wait(o, r); err != nil {
			return err
		}
		if p.check != nil {
			if err := p.check(s, 0, n, r); err != nil {
				return err
			}
		}
	}
	r := *reqs
	*reqs = nil
	if p.post != nil {
		if err := p.post(s, 0, n, r); err != nil {
			return err
		}
	}
	if p.out != nil {
		return p.out(s, 0, n, nil)
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

// Chunks grow along the message: the first is the agreed chunk and each
// next one twice the one before, up to maxGrownChunk (or the agreed chunk,
// when that is larger). Each chunk costs MPI a rendezvous and the copies a
// launch and a wait: measured on an H200 (two ranks, one GPU), a 32 MiB
// ping-pong reached 0.77 of host MPI with 1 MiB chunks, 0.85 with 2 MiB and
// 0.90 with 4 MiB, while a short first chunk keeps the copy before MPI
// starts short.
const maxGrownChunk = 4 << 20

// pipe is a pipeline of the given bytes of elements of es bytes, cut as
// the ranks agreed: the first chunk the agreed chunk in whole elements,
// later ones doubling up to maxGrownChunk (or the agreed chunk, if larger).
func (c *Comm) pipe(bytes, es int) pipeline {
	m := max(c.chunk, maxGrownChunk)
	return pipeline{bytes: bytes, chunk: max(es, c.chunk/es*es), maxChunk: max(es, m/es*es)}
}

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
