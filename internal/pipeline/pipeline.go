package pipeline

import (
	"errors"
	"sync"

	"github.com/gpucomm/gpucomm/devmem"
)

// Slots is how many pinned chunks one pipelined transfer holds: one being
// copied in, one with the transport, one being copied out, and one spare so
// that the copy in never waits for the copy out.
const Slots = 4

// Stage copies between a device range and a slot; st nil means "now".
type Stage func(s *Slot, off, n int, st *devmem.Stream) error

// Transport is what carries the chunks, over its request type R: Run starts
// a chunk's requests through Pipe.Start and completes them here.
type Transport[R any] interface {
	// Wait completes reqs, within whatever deadline the transfer has.
	Wait(reqs []R) error
	// Abandon is told, once a transfer failed with err, of the requests
	// its slots still have (per slot; any may be empty), after their
	// copies have finished. cancel says they are receives, which the
	// transport may cancel. It reports whether none of them can still
	// touch its slot: the slots are then reused, else left (leaked) to the
	// transport, which is then out of step and says so itself.
	Abandon(reqs [][]R, cancel bool, err error) (clear bool)
	// Label names the transfer in a trace.
	Label() string
}

// Pipe is one transfer cut into chunks that each go through a slot: In (a
// copy into the slot on the D2H stream), Start (the transport's requests on
// the slot), Check and Post (host work once they are complete), Out (a copy
// out of the slot on the H2D stream). The copy in of later chunks, the
// transport's work on chunk k and the copy out of earlier chunks run at the
// same time. Any stage may be nil.
type Pipe[R any] struct {
	Bytes      int
	Cut             // how the message is cut (policy.go)
	AtLeastOne bool // a message of 0 bytes still goes (point-to-point)
	Receives   bool // its requests are receives, which a failure may cancel
	In         Stage
	Start      func(s *Slot, off, n int) ([]R, error)
	// Check runs in the transport's stage right after a chunk's requests
	// complete and before the next chunk's are waited for: a receive
	// shorter than expected must stop the pipeline before it waits for a
	// receive that no send will ever match.
	Check func(s *Slot, off, n int, reqs []R) error
	Post  func(s *Slot, off, n int, reqs []R) error
	Out   Stage
}

// Engine is what every transfer of one communicator shares: the slot pool,
// the two copy streams, and the tracer with the rank its lines name.
type Engine struct {
	Pool     *Pool
	D2H, H2D *devmem.Stream
	Trace    *Tracer // nil traces nothing
	Rank     int
}

// Run drives p to the end. A message of one chunk runs its stages one
// after the other on this goroutine, with synchronous copies. A longer one
// runs three stages at once, with up to Slots chunks between them: a
// goroutine copies each chunk in (waiting for the copy) and starts its
// requests at once; this goroutine waits for each chunk's requests in
// order; a goroutine finishes each chunk (Post, copy out, wait for it) and
// frees its slot. So the transport always has the next chunks while the
// first is waited for, and copies are issued and waited for outside the
// waits, which is where a shared-memory MPI moves the data. Every rank
// starts a collective's chunks in the same order, from the one goroutine of
// stage 1.
func Run[R any](e *Engine, t Transport[R], p Pipe[R]) (err error) {
	spans := p.Spans(p.Bytes, p.AtLeastOne)
	k := len(spans)
	if k == 0 {
		return nil
	}
	largest := 0
	for _, sp := range spans {
		largest = max(largest, sp[1])
	}
	nSlots := min(Slots, k)
	slots, err := e.Pool.get(nSlots, max(p.SlotBytes, largest, 1))
	if err != nil {
		return err
	}
	reqs := make([][]R, nSlots)
	span := func(j int) (off, n int) { return spans[j][0], spans[j][1] }
	tr := e.Trace.begin(k)
	if k == 1 {
		defer func() { settle(e, t, slots, reqs, p.Receives, err) }()
		return runOne(t, p, slots[0], &reqs[0])
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
	posted := make(chan int, k) // chunks whose requests have started, in order
	out := make(chan int, k)    // chunks through the transport, in order
	var wg sync.WaitGroup
	// Stage 1: copy each chunk in and start its requests at once, so that
	// the transport has the next chunks while stage 2 waits for the first.
	wg.Go(func() {
		for j := range k {
			select {
			case <-free:
			case <-quit:
				return
			}
			s := slots[j%nSlots]
			off, n := span(j)
			if tr != nil && p.In != nil {
				tr.rows[j].inStart = tr.at()
			}
			if err := copyAndWait(p.In, s, off, n, e.D2H, s.in); err != nil {
				fail(err)
				return
			}
			if tr != nil && p.In != nil {
				tr.rows[j].inEnd = tr.at()
			}
			if p.Start != nil {
				r, err := p.Start(s, off, n)
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
			if p.Post != nil {
				if err := p.Post(s, off, n, r); err != nil {
					fail(err)
					return
				}
			}
			if tr != nil && p.Out != nil {
				tr.rows[j].outStart = tr.at()
			}
			if err := copyAndWait(p.Out, s, off, n, e.H2D, s.out); err != nil {
				fail(err)
				return
			}
			if tr != nil && p.Out != nil {
				tr.rows[j].outEnd = tr.at()
			}
			free <- struct{}{}
		}
	})
	// Stage 2, here: wait for each chunk's requests in order.
waits:
	for j := range k {
		select {
		case <-posted:
		case <-quit:
			break waits
		}
		if err := t.Wait(reqs[j%nSlots]); err != nil {
			fail(err)
			break
		}
		if tr != nil && p.Start != nil {
			tr.rows[j].mpiDone = tr.at()
		}
		if p.Check != nil {
			off, n := span(j)
			if err := p.Check(slots[j%nSlots], off, n, reqs[j%nSlots]); err != nil {
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
	settle(e, t, slots, reqs, p.Receives, err)
	if err == nil && tr != nil {
		tr.print(e.Trace, e.Rank, t.Label(), spans)
	}
	return err
}

// copyAndWait queues a copy stage (if any) of a chunk on st and waits for it
// through the slot's event ev.
func copyAndWait(stage Stage, s *Slot, off, n int, st *devmem.Stream, ev *devmem.Event) error {
	if stage == nil {
		return nil
	}
	if err := stage(s, off, n, st); err != nil {
		return err
	}
	return errors.Join(ev.Record(st), ev.Synchronize())
}

// runOne runs a message of one chunk through its stages in turn, with
// synchronous copies, which is faster than going through the streams.
func runOne[R any](t Transport[R], p Pipe[R], s *Slot, reqs *[]R) error {
	n := p.Bytes
	if p.In != nil {
		if err := p.In(s, 0, n, nil); err != nil {
			return err
		}
	}
	if p.Start != nil {
		r, err := p.Start(s, 0, n)
		*reqs = r
		if err != nil {
			return err
		}
		if err := t.Wait(r); err != nil {
			return err
		}
		if p.Check != nil {
			if err := p.Check(s, 0, n, r); err != nil {
				return err
			}
		}
	}
	r := *reqs
	*reqs = nil
	if p.Post != nil {
		if err := p.Post(s, 0, n, r); err != nil {
			return err
		}
	}
	if p.Out != nil {
		return p.Out(s, 0, n, nil)
	}
	return nil
}

// settle returns the slots once nothing uses them. After a failure, copies
// still queued finish first, then the transport settles the requests the
// slots still have (cancelling receives posted ahead: a shorter message
// than expected leaves the next chunk's receive posted); slots whose
// requests may still be pending are left to them (leaked).
func settle[R any](e *Engine, t Transport[R], slots []*Slot, reqs [][]R, cancel bool, err error) {
	if err == nil {
		e.Pool.put(slots)
		return
	}
	for _, s := range slots {
		s.in.Synchronize()
		s.out.Synchronize()
	}
	if t.Abandon(reqs, cancel, err) {
		e.Pool.put(slots)
		return
	}
	e.Pool.leak(slots)
}

// CopyIn copies bytes [off, off+n) of buf into the slot.
func CopyIn(buf devmem.Buffer) Stage {
	return func(s *Slot, off, n int, st *devmem.Stream) error {
		if n == 0 {
			return nil
		}
		src, err := buf.Slice(off, n)
		if err != nil {
			return err
		}
		return devmem.CopyN(s.Buf, src, n, st)
	}
}

// CopyOut copies the slot's first n bytes to bytes [off-base, off-base+n)
// of buf.
func CopyOut(buf devmem.Buffer, base int) Stage {
	return func(s *Slot, off, n int, st *devmem.Stream) error {
		if n == 0 {
			return nil
		}
		dst, err := buf.Slice(off-base, n)
		if err != nil {
			return err
		}
		return devmem.CopyN(dst, s.Buf, n, st)
	}
}
