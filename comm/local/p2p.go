package local

import (
	"fmt"
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
func (c *Comm) transfer(call driver.Call, ops []comm.P2P) error {
	for _, p := range ops {
		if p.Kind == comm.SendKind {
			data := clone(bytesOf(p.Buf, p.Count*p.DType.Size()))
			c.g.link(c.rank, p.Peer).put(message{data: data, count: p.Count, dt: p.DType})
		}
	}
	for _, p := range ops {
		if p.Kind != comm.RecvKind {
			continue
		}
		m, err := c.g.take(p.Peer, c.rank)
		if err != nil {
			return c.fail(call.Operation, nil, "receive of %d %v from rank %d: %w", p.Count, p.DType, p.Peer, err)
		}
		if m.count != p.Count || m.dt != p.DType {
			return c.fail(call.Operation, comm.ErrMismatch, "receive of %d %v from rank %d met a send of %d %v", p.Count, p.DType, p.Peer, m.count, m.dt)
		}
		copy(bytesOf(p.Buf, len(m.data)), m.data)
	}
	return nil
}
