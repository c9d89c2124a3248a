package nodepath

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// Link is one direction of one pair's node path, as this rank sees it.
type Link struct {
	peer int
	send bool

	mu      sync.Mutex
	cond    *sync.Cond
	next    uint64 // tickets handed out (under the Table's owner's lock)
	serving uint64 // the ticket whose turn it is
	broken  error  // a message failed half way: the counters are out of step

	// Touched only by the message whose turn it is.
	chunks    uint64        // chunks through the ring so far
	ring      devmem.Buffer // the whole ring: own (send) or opened (receive)
	handle    devmem.IPCHandle
	slots     int
	slotBytes int
	hdr       devmem.Buffer // receive: pinned room for incoming headers
	ev        []*devmem.Event

	// A send link's chunks of completed sends, and its ring's done counter
	// (nil before the ring exists): a completed send is delivered whatever
	// the sender does next, so Close waits for the receiver to take them
	// before it frees the ring (Table.Owed).
	Sent  atomic.Uint64
	Taken atomic.Pointer[atomic.Uint64]
}

// Peer is the rank at the link's other end.
func (l *Link) Peer() int { return l.peer }

// Send reports whether the link carries this rank's messages to the peer.
func (l *Link) Send() bool { return l.send }

// Key names a link: its peer, its direction, and whether it carries the
// user's messages or those of collectives (AllGather, Gather, Scatter and
// AllToAll are built from messages), whose turns are taken in different
// orders.
type Key struct {
	Peer       int
	Send, Coll bool
}

// Turn is a message's place on its pair's link; Link nil: none.
type Turn struct {
	Link   *Link
	Ticket uint64
}

// Table holds a communicator's links, made on first use. Its owner
// serialises Take (which hands out turns in call order) and Owed with
// Close; the links' own turns are safe from any goroutine.
type Table struct {
	links map[Key]*Link
}

// Link returns the link of k, made on first use.
func (t *Table) Link(k Key) *Link {
	if t.links == nil {
		t.links = map[Key]*Link{}
	}
	l := t.links[k]
	if l == nil {
		l = &Link{peer: k.Peer, send: k.Send}
		l.cond = sync.NewCond(&l.mu)
		t.links[k] = l
	}
	return l
}

// Take gives a message the next turn on the link of k.
func (t *Table) Take(k Key) Turn {
	l := t.Link(k)
	l.mu.Lock()
	n := l.next
	l.next++
	l.mu.Unlock()
	return Turn{l, n}
}

// Owed is what a send link's peer has yet to take: Sent chunks of
// completed sends, of which Taken (the ring's done counter) are taken.
type Owed struct {
	Peer  int
	Sent  uint64
	Taken *atomic.Uint64
}

// Owed lists the send links whose rings exist, by peer.
func (t *Table) Owed() []Owed {
	var all []Owed
	for _, l := range t.links {
		if p := l.Taken.Load(); l.send && p != nil {
			all = append(all, Owed{l.peer, l.Sent.Load(), p})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Peer < all[j].Peer })
	return all
}

// Close releases every link's ring; nothing runs any more.
func (t *Table) Close() error {
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.release())
	}
	return errors.Join(errs...)
}

// AwaitTurn waits until ticket t may use the link, up to deadline (zero:
// none).
func (l *Link) AwaitTurn(deadline time.Time, t uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !deadline.IsZero() {
		stop := time.AfterFunc(time.Until(deadline), func() {
			l.mu.Lock()
			l.cond.Broadcast()
			l.mu.Unlock()
		})
		defer stop.Stop()
	}
	for l.serving != t && l.broken == nil {
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return fmt.Errorf("waited for %d earlier messages to rank %d to leave the node path: %w", t-l.serving, l.peer, errs.ErrTimeout)
		}
		l.cond.Wait()
	}
	if l.broken != nil {
		return fmt.Errorf("the node path with rank %d is broken by an earlier failure: %w", l.peer, l.broken)
	}
	return nil
}

// Abandon breaks the links of turns whose messages will never run (their
// operation failed before it started), so that later messages on those
// links fail instead of waiting for a turn that never comes.
func Abandon(turns []Turn, cause error) {
	for _, t := range turns {
		if t.Link != nil {
			t.Link.mu.Lock()
			if t.Link.broken == nil {
				t.Link.broken = fmt.Errorf("an earlier message never ran: %w", cause)
			}
			t.Link.cond.Broadcast()
			t.Link.mu.Unlock()
		}
	}
}

// Done passes the turn on; err, when the ring's counters may be out of step,
// breaks the link for every later message.
func (l *Link) Done(err error) {
	l.mu.Lock()
	if err != nil && l.broken == nil {
		l.broken = err
	}
	l.serving++
	l.cond.Broadcast()
	l.mu.Unlock()
}

func (l *Link) release() error {
	var errs []error
	for _, e := range l.ev {
		errs = append(errs, e.Destroy())
	}
	if !l.ring.IsZero() {
		if l.send {
			errs = append(errs, l.ring.Free())
		} else {
			errs = append(errs, l.ring.CloseIPC())
		}
	}
	if !l.hdr.IsZero() {
		errs = append(errs, l.hdr.Free())
	}
	return errors.Join(errs...)
}
