package local

import (
	"fmt"
	"strings"
	"sync"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
)

// link holds the messages from one rank to another, oldest first.
type link struct {
	mu    sync.Mutex
	queue []message
	ready chan struct{} // closed and replaced when a message arrives
}

type message struct {
	data  []byte
	count int
	dt    comm.DType
}

func (g *group) link(from, to int) *link {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.links[[2]int{from, to}]
	if l == nil {
		l = &link{ready: make(chan struct{})}
		g.links[[2]int{from, to}] = l
	}
	return l
}

func (l *link) put(m message) {
	l.mu.Lock()
	l.queue = append(l.queue, m)
	close(l.ready)
	l.ready = make(chan struct{})
	l.mu.Unlock()
}

// unget puts m, taken from l, back at the head of its queue, as if it had
// never been taken.
func (l *link) unget(m message) {
	l.mu.Lock()
	l.queue = append([]message{m}, l.queue...)
	close(l.ready)
	l.ready = make(chan struct{})
	l.mu.Unlock()
}

func (g *group) take(from, to int) (message, error) {
	l := g.link(from, to)
	for {
		l.mu.Lock()
		if len(l.queue) > 0 {
			m := l.queue[0]
			l.queue = l.queue[1:]
			l.mu.Unlock()
			return m, nil
		}
		ready := l.ready
		l.mu.Unlock()
		hopeless := func() error {
			if !g.isGone(from) {
				return nil
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if len(l.queue) > 0 {
				return nil // it sent before it went
			}
			return fmt.Errorf("rank %d closed its communicator without sending it: %w", from, ErrPeerClosed)
		}
		if err := g.wait(to, ready, func() string { return fmt.Sprintf("rank %d never sent", from) }, hopeless); err != nil {
			return message{}, err
		}
	}
}

// p2p queues sends (eager: they never wait) then receives, on the stream.
func (c *Comm) p2p(call driver.Call, ops []comm.P2P, fl driver.Flight) error {
	return c.queue(call.Operation, call.Stream, func() error {
		fl.Started()
		err := c.transfer(call, ops)
		fl.Ended(err)
		return err
	})
}

// transfer runs the sends, then the receives, of one point-to-point call.
//
// Sends to other ranks go on their links at once (eager: they complete
// whatever the receiver makes of them). Transfers to this rank itself,
// which Front has checked pair up in the call (the k-th send to self with
// the k-th receive from self, same count and dtype), never go on a link:
// a group that fails leaves none of them queued for a later call.
//
// The receives take their messages first and write nothing until every
// one of them has its message and matches it, so that a call that fails
// changes no receive buffer:
//   - a receive that met a send of another count or dtype fails the call
//     with ErrMismatch; every message the call's receives matched is
//     consumed all the same (as an MPI receive consumes the message it
//     matched when it fails), so the messages between two ranks stay in
//     step: the next receive gets the next message sent;
//   - a receive that gets no message (timeout, abort, this rank's Close, the
//     sender's Close) fails the call with that error, and the messages the
//     call's other receives took go back to the heads of their links: the
//     call consumed nothing, as a single Recv that times out.
func (c *Comm) transfer(call driver.Call, ops []comm.P2P) error {
	var self [][]byte // what the sends to self carry, in order
	for _, p := range ops {
		if p.Kind != comm.SendKind {
			continue
		}
		data := clone(bytesOf(p.Buf, p.Count*p.DType.Size()))
		if p.Peer == c.rank {
			self = append(self, data)
			continue
		}
		c.g.link(c.rank, p.Peer).put(message{data: data, count: p.Count, dt: p.DType})
	}
	type match struct {
		p comm.P2P
		m message
	}
	var matched []match // receives from other ranks and the messages they took, in order
	for _, p := range ops {
		if p.Kind != comm.RecvKind || p.Peer == c.rank {
			continue
		}
		m, err := c.g.take(p.Peer, c.rank)
		if err != nil {
			for i := len(matched) - 1; i >= 0; i-- {
				c.g.link(matched[i].p.Peer, c.rank).unget(matched[i].m)
			}
			return c.fail(call.Operation, nil, "receive of %d %v from rank %d: %w", p.Count, p.DType, p.Peer, err)
		}
		matched = append(matched, match{p, m})
	}
	var bad []string
	for _, t := range matched {
		if t.m.count != t.p.Count || t.m.dt != t.p.DType {
			bad = append(bad, fmt.Sprintf("receive of %d %v from rank %d met a send of %d %v", t.p.Count, t.p.DType, t.p.Peer, t.m.count, t.m.dt))
		}
	}
	if bad != nil {
		why := strings.Join(bad, "; ")
		if call.Operation == driver.OpGroupP2P {
			why += fmt.Sprintf(" (the call's %d receives consumed the messages they matched and wrote nothing)", len(matched)+len(self))
		}
		return c.fail(call.Operation, comm.ErrMismatch, "%s", why)
	}
	for _, t := range matched {
		copy(bytesOf(t.p.Buf, len(t.m.data)), t.m.data)
	}
	k := 0
	for _, p := range ops {
		if p.Kind == comm.RecvKind && p.Peer == c.rank {
			copy(bytesOf(p.Buf, len(self[k])), self[k])
			k++
		}
	}
	return nil
}
