package mpicomm

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gpucomm/gpucomm/devmem"
)

// copyBatch issues the IPC path's receiving copies on one stream and waits
// for them together: a receiver whose copy is issued while another waits
// for the stream waits for the next synchronize, which one of the waiters
// makes for every copy issued meanwhile (a group commit). The transfers of
// a window (up to 64 at once, one goroutine each) each synchronized the
// stream themselves: 64 waits on one stream, each spinning or polling, for
// copies that run one after the other anyway. Nothing changes between the
// ranks: each message keeps its control message and acknowledgement, and
// a receiver acknowledges its message as soon as its own copy is done.
type copyBatch struct {
	s    *devmem.Stream
	wait func() error // s.Synchronize (a test's stand-in)

	mu      sync.Mutex
	cond    *sync.Cond
	cur     *copyGen // the copies issued since the last synchronize began
	syncing bool     // a waiter synchronizes the stream (mu released)
	syncs   int      // synchronizes made (the tests read it)
}

// copyGen is the copies one synchronize waits for, and its result.
type copyGen struct {
	n    int // copies issued into it
	done bool
	err  error
}

func newCopyBatch(s *devmem.Stream) *copyBatch {
	b := &copyBatch{s: s, wait: s.Synchronize, cur: &copyGen{}}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// copy copies n bytes of src to dst on the batch's stream and returns once
// a synchronize that began after the copy was issued has ended (issue, then
// await).
func (b *copyBatch) copy(dst, src devmem.Buffer, n int) error {
	g, err := b.issue(dst, src, n)
	if err != nil {
		return err
	}
	return b.await(g)
}

// issue queues a copy of n bytes of src to dst on the batch's stream and
// returns the generation whose synchronize covers it.
func (b *copyBatch) issue(dst, src devmem.Buffer, n int) (*copyGen, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := devmem.CopyN(dst, src, n, b.s); err != nil {
		return nil, err
	}
	b.cur.n++
	return b.cur, nil
}

// await returns once g's synchronize has ended, making it if no one else
// is synchronizing. A synchronize reports the stream's first error since the
// one before it, and on the host device it also runs the copies issued while
// it is under way: an error fails its own generation and the one open
// meanwhile (a copy reported failed that did not fail is sent again through
// the pipeline; a failed copy reported done would be a wrong answer).
func (b *copyBatch) await(g *copyGen) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for !g.done {
		if b.syncing {
			b.cond.Wait()
			continue
		}
		// No one synchronizes: this waiter does, for every copy issued
		// so far; copies issued meanwhile wait for the next.
		b.syncing = true
		b.syncs++
		b.cur = &copyGen{}
		b.mu.Unlock()
		err := b.synchronize()
		b.mu.Lock()
		g.err, g.done = errors.Join(g.err, err), true
		if err != nil && b.cur.n > 0 {
			b.cur.err = errors.Join(b.cur.err, err)
		}
		b.syncing = false
		b.cond.Broadcast()
	}
	return g.err
}

// synchronize synchronizes the batch's stream, a panic in the work it runs
// made an error (the waiters are then told, not left waiting).
func (b *copyBatch) synchronize() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the IPC path's copy stream: synchronize panicked: %v", r)
		}
	}()
	return b.wait()
}
