package devmem

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Memory freed while streams still have work queued stays where it is
// until that work has run: the host queue of a stream holds work that
// takes a Buffer and resolves its memory only when it runs (every copy of
// the host device, the work queued behind a host function on a GPU), and a
// Free or CloseIPC that unmapped the memory at once would leave that work
// touching unmapped memory (a fatal fault on the host device, an illegal
// address on a GPU). So Free and CloseIPC do their bookkeeping at once and
// hand the return of the memory to retire, which runs it behind the work
// queued on every live stream that is busy at that moment.

// live holds the host queue of every live stream of the process, with its
// stream's device.
var live struct {
	mu     sync.Mutex
	queues map[*hostQueue]*Device
}

// addLive notes q, the host queue of a new stream of d.
func addLive(q *hostQueue, d *Device) {
	live.mu.Lock()
	if live.queues == nil {
		live.queues = map[*hostQueue]*Device{}
	}
	live.queues[q] = d
	live.mu.Unlock()
}

// dropLive forgets q, the host queue of a destroyed stream.
func dropLive(q *hostQueue) {
	live.mu.Lock()
	delete(live.queues, q)
	live.mu.Unlock()
}

// liveQueues returns the host queues of the live streams of dev.
func liveQueues(dev *Device) []*hostQueue {
	live.mu.Lock()
	defer live.mu.Unlock()
	var qs []*hostQueue
	for q, d := range live.queues {
		if d == dev {
			qs = append(qs, q)
		}
	}
	return qs
}

// retire runs fn once every live stream of dev (of every device, for a nil
// dev) that has host work queued or running now has run that work. With
// no such stream it runs fn at once and returns fn's error. Otherwise it
// queues a marker behind the work of each such stream and returns nil; the
// last marker to run runs fn, on that stream's goroutine and ahead of the
// work queued there after the marker, and fn's error is the next
// Synchronize's of that stream. retire never waits, so that a Free from
// inside a stream's own host function cannot deadlock, and it holds no
// lock while fn runs.
func retire(dev *Device, fn func() error) error {
	var left atomic.Int64
	left.Store(1) // retire's own hold, given up below
	last := func() error {
		if left.Add(-1) != 0 {
			return nil
		}
		return fn()
	}
	marker := work{run: func() error {
		if err := last(); err != nil {
			return fmt.Errorf("devmem: returning memory freed while this stream had work queued: %w", err)
		}
		return nil
	}}
	live.mu.Lock()
	for q, d := range live.queues {
		if dev != nil && d != dev {
			continue
		}
		left.Add(1)
		if !q.pushIfBusy(marker) {
			left.Add(-1) // never 0 here: retire's hold is still counted
		}
	}
	live.mu.Unlock()
	return last()
}
