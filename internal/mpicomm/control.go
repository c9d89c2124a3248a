package mpicomm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// With a timeout, every rank tells every other rank "I entered collective
// #k" in a tiny message on the control communicator before it enters it.
// When a collective times out, the ranks whose latest announcement is below
// k are the ones that never arrived.

const (
	annRing = 64 // outgoing announcement cells, reused round robin
	annTag  = 1
)

type announcer struct {
	c      *Comm
	mu     sync.Mutex
	in     []byte           // pinned cell per peer: the announcement being received
	out    []byte           // pinned ring of outgoing announcements
	inBuf  devmem.Buffer    // in, for addresses
	outBuf devmem.Buffer    // out, for addresses
	recvs  []*mpi.Request   // the receive posted from each peer (nil for self)
	sends  [][]*mpi.Request // the sends still reading each ring cell
	latest []uint64         // highest collective each peer announced
	lost   []error          // why MPI failed the receive from each peer, if it did
}

func newAnnouncer(c *Comm) *announcer {
	inBuf, _ := c.ctlBuf.Slice(0, 8*c.size)
	outBuf, _ := c.ctlBuf.Slice(8*c.size, 8*annRing)
	in, _ := inBuf.Bytes()
	out, _ := outBuf.Bytes()
	return &announcer{c: c, in: in, out: out, inBuf: inBuf, outBuf: outBuf,
		recvs: make([]*mpi.Request, c.size), sends: make([][]*mpi.Request, annRing), latest: make([]uint64, c.size),
		lost: make([]error, c.size)}
}

// start posts one receive from every other rank.
func (a *announcer) start() error {
	for p := range a.c.size {
		if p != a.c.rank {
			if err := a.post(p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *announcer) post(p int) error {
	r, err := a.c.ctl.Irecv(a.inBuf.Addr()+uintptr(8*p), 1, mpi.Uint64, p, annTag)
	a.recvs[p] = r
	return err
}

// enter announces collective o.seq to every other rank.
func (a *announcer) enter(o *op) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	cell := int(o.seq % annRing)
	// The cell's sends of annRing collectives ago must be done before it
	// changes; they are eager and long done unless MPI is stuck.
	if err := a.c.wait(o, a.sends[cell]); err != nil {
		return err
	}
	binary.NativeEndian.PutUint64(a.out[8*cell:], o.seq)
	a.sends[cell] = a.sends[cell][:0]
	for p := range a.c.size {
		if p == a.c.rank {
			continue
		}
		r, err := a.c.ctl.Isend(a.outBuf.Addr()+uintptr(8*cell), 1, mpi.Uint64, p, annTag)
		if err != nil {
			return err
		}
		a.sends[cell] = append(a.sends[cell], r)
	}
	return a.drainLocked()
}

// drainLocked reads every announcement that has arrived. A receive that
// MPI fails (its peer died or cannot be reached) is not posted again: that
// peer announces nothing more, and the failure is kept in lost.
func (a *announcer) drainLocked() error {
	for p := range a.recvs {
		for a.recvs[p] != nil {
			done, err := a.recvs[p].Test()
			if err != nil && mpiFailed(err) {
				a.lost[p], a.recvs[p] = err, nil
				break
			}
			if err != nil {
				return err
			}
			if !done {
				break
			}
			a.latest[p] = max(a.latest[p], binary.NativeEndian.Uint64(a.in[8*p:]))
			if err := a.post(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// behind lists the other ranks that have not announced collective seq.
func (a *announcer) behind(seq uint64) ([]int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.drainLocked()
	var ranks []int
	for p, v := range a.latest {
		if p != a.c.rank && v < seq {
			ranks = append(ranks, p)
		}
	}
	return ranks, err
}

// behindBy is behind once the ranks still behind can announce seq no
// more, or at deadline: MPI can fail a collective at once (a message to a
// rank it knows dead) while a live rank's announcement of it is still on
// its way, and that rank did arrive. A rank whose receive MPI failed
// announces nothing more; a dead one without such a failure is waited for
// until deadline, the collective's own bound (the error is due by then
// anyway).
func (a *announcer) behindBy(seq uint64, deadline time.Time) ([]int, error) {
	for {
		ranks, err := a.behind(seq)
		if err != nil || len(ranks) == 0 || !time.Now().Before(deadline) || a.allLost(ranks) {
			return ranks, err
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// allLost reports whether MPI failed the receive from each of ranks.
func (a *announcer) allLost(ranks []int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range ranks {
		if a.lost[p] == nil {
			return false
		}
	}
	return true
}

// stop cancels the posted receives and completes every request, within a
// bound: a rank that died leaves nothing here to wait for.
func (a *announcer) stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	var reqs []*mpi.Request
	for _, r := range a.recvs {
		if r != nil {
			errs = append(errs, r.Cancel())
			reqs = append(reqs, r)
		}
	}
	for _, s := range a.sends {
		reqs = append(reqs, s...)
	}
	errs = append(errs, mpi.WaitTimeout(reqs, 10*time.Second))
	return errors.Join(errs...)
}

// mpiFailure says what MPI failed, the failed request's peer (err names
// it when it is an *mpi.PeerError) and, for a collective with a timeout,
// the ranks that never announced it: those a dead node's ranks are among.
func (c *Comm) mpiFailure(o *op, err error) error {
	what := o.call.Signature()
	if o.seq > 0 {
		what = fmt.Sprintf("%s (collective #%d)", what, o.seq)
	}
	var pe *mpi.PeerError
	peer := ""
	if errors.As(err, &pe) {
		peer = fmt.Sprintf("; its peer, rank %d, may have died", pe.Peer)
	}
	if o.seq == 0 || c.ann == nil || (!c.multiple && c.direct(o.call)) {
		// No announcements (no timeout), or a blocking call may still hold
		// internal/mpi's lock below MPI_THREAD_MULTIPLE.
		return fmt.Errorf("%s: MPI failed it%s: %w", what, peer, err)
	}
	ranks, aerr := c.ann.behindBy(o.seq, o.deadline)
	switch {
	case aerr != nil:
		return fmt.Errorf("%s: MPI failed it%s (reading the other ranks' announcements failed too: %v): %w", what, peer, aerr, err)
	case len(ranks) == 0:
		return fmt.Errorf("%s: MPI failed it%s; every rank entered it: %w", what, peer, err)
	}
	return fmt.Errorf("%s: MPI failed it%s; ranks that never arrived: %s: %w", what, peer, rankList(ranks), err)
}

// rankList is ranks as "2, 3".
func rankList(ranks []int) string {
	names := make([]string, len(ranks))
	for i, r := range ranks {
		names[i] = fmt.Sprint(r)
	}
	return strings.Join(names, ", ")
}

// collectiveTimeout says which collective timed out and which ranks never
// announced it.
func (c *Comm) collectiveTimeout(o *op, cause error) error {
	what := fmt.Sprintf("%v (collective #%d)", o.call.Signature(), o.seq)
	if !c.multiple && c.direct(o.call) {
		// The blocking call left in MPI holds internal/mpi's lock: asking
		// MPI anything more would hang. (A staged call leaves none.)
		return fmt.Errorf("%s: no progress after %v; MPI is below MPI_THREAD_MULTIPLE, so which ranks never arrived is unknown (%v): %w",
			what, c.timeout, cause, comm.ErrTimeout)
	}
	ranks, err := c.ann.behind(o.seq)
	switch {
	case err != nil:
		return fmt.Errorf("%s: no progress after %v; reading the other ranks' announcements failed (%v): %w", what, c.timeout, err, comm.ErrTimeout)
	case len(ranks) == 0:
		return fmt.Errorf("%s: no progress after %v; every rank entered it, so its arguments disagree (GPUCOMM_DEBUG=1 compares them): %w",
			what, c.timeout, comm.ErrTimeout)
	}
	return fmt.Errorf("%s: no progress after %v; ranks that never arrived: %s: %w", what, c.timeout, rankList(ranks), comm.ErrTimeout)
}

// agreeOnSignature compares the collective's signature across the ranks
// before it runs: an Allreduce(min) of the digest and its complement shows
// whether every digest is the same (min(h) == max(h)); only when one differs
// do the ranks exchange the texts, to name who called what.
func (c *Comm) agreeOnSignature(o *op) error {
	sig := o.call.Signature()
	h := fnv.New64a()
	h.Write([]byte(sig))
	d := h.Sum64()
	cells, _ := c.ctlBuf.Slice(8*(c.size+annRing), 16)
	b, _ := cells.Bytes()
	binary.NativeEndian.PutUint64(b, d)
	binary.NativeEndian.PutUint64(b[8:], ^d)
	r, err := c.ctl.Iallreduce(cells.Addr(), cells.Addr(), 2, mpi.Uint64, mpi.Min)
	if err != nil {
		return err
	}
	if err := c.wait(o, []*mpi.Request{r}); err != nil {
		return err
	}
	if binary.NativeEndian.Uint64(b) == ^binary.NativeEndian.Uint64(b[8:]) {
		return nil
	}
	sigs, err := mpi.AllgatherBytes(c.ctl, []byte(sig))
	if err != nil {
		return fmt.Errorf("ranks called different collectives (#%d), and gathering what they called failed: %v: %w", o.seq, err, comm.ErrMismatch)
	}
	return mismatch(o.seq, sigs)
}

// mismatch names the ranks whose call differs from rank 0's.
func mismatch(seq uint64, sigs [][]byte) error {
	want := string(sigs[0])
	byCall := map[string][]int{}
	for r, s := range sigs[1:] {
		if string(s) != want {
			byCall[string(s)] = append(byCall[string(s)], r+1)
		}
	}
	var bad []string
	for s, ranks := range byCall {
		names := make([]string, len(ranks))
		for i, r := range ranks {
			names[i] = fmt.Sprint(r)
		}
		who := "rank " + names[0]
		if len(names) > 1 {
			who = "ranks " + strings.Join(names, ", ")
		}
		bad = append(bad, fmt.Sprintf("%s called %s", who, s))
	}
	sort.Strings(bad)
	if len(bad) == 0 {
		return fmt.Errorf("collective #%d: the digests differ but the calls read the same (%s): %w", seq, want, comm.ErrMismatch)
	}
	return fmt.Errorf("collective #%d: rank 0 called %s but %s: %w", seq, want, strings.Join(bad, "; "), comm.ErrMismatch)
}
