//go:build cgo

package nccl

import (
	"sync"
	"testing"
)

// argsOf is the i-th call's arguments, every field made of i, so that a
// call run with another's arguments shows.
func argsOf(i int) collArgs {
	return collArgs{kind: collKind(1 + i%5), send: uintptr(0x1000 + i), recv: uintptr(0x2000 + i), n: i, root: -i}
}

// A call that ran before the next is made hands its queuedCall on: the hot
// path of a stream with no host work queued allocates nothing.
func TestCallSlotReusesACallThatRan(t *testing.T) {
	var cs callSlot
	var seen []collArgs
	run := func(a *collArgs, ctx, h uintptr) error { seen = append(seen, *a); return nil }
	q1 := cs.next(argsOf(1), run)
	if err := q1.fn(0, 0); err != nil {
		t.Fatal(err)
	}
	q2 := cs.next(argsOf(2), run)
	if q2 != q1 {
		t.Errorf("a call that ran was not reused")
	}
	if err := q2.fn(0, 0); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != argsOf(1) || seen[1] != argsOf(2) {
		t.Errorf("ran %+v; want calls 1 and 2", seen)
	}
	seen = make([]collArgs, 0, 1000)
	i := 3
	allocs := testing.AllocsPerRun(100, func() {
		if err := cs.next(argsOf(i), run).fn(0, 0); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocations a call run at once; want 0", allocs)
	}
	for k, a := range seen {
		if a != argsOf(3+k) {
			t.Fatalf("call %d ran with %+v", 3+k, a)
		}
	}
}

// A call still queued keeps its arguments: the next call gets a queuedCall
// of its own.
func TestCallSlotKeepsAQueuedCall(t *testing.T) {
	var cs callSlot
	var seen []collArgs
	run := func(a *collArgs, ctx, h uintptr) error { seen = append(seen, *a); return nil }
	q1 := cs.next(argsOf(1), run) // queued: not run yet
	q2 := cs.next(argsOf(2), run)
	if q2 == q1 {
		t.Fatal("a queued call's arguments were handed to the next call")
	}
	q1.fn(0, 0)
	q2.fn(0, 0)
	if len(seen) != 2 || seen[0] != argsOf(1) || seen[1] != argsOf(2) {
		t.Errorf("ran %+v; want calls 1 and 2, each with its own arguments", seen)
	}
	if q3 := cs.next(argsOf(3), run); q3 != q2 {
		t.Errorf("the last call ran, but its queuedCall was not reused")
	}
}

// As on a stream whose host work queue makes some calls wait: a call runs
// at once when nothing is queued, else behind the queue on the stream's
// goroutine, while the next calls are made. Every call runs once, in
// order, with its own arguments (under -race, also that the reuse races
// with nothing).
func TestCallSlotUnderAQueue(t *testing.T) {
	const calls = 20000
	var cs callSlot
	var mu sync.Mutex
	var queue []func(ctx, h uintptr) error
	seen := make([]collArgs, 0, calls)
	run := func(a *collArgs, ctx, h uintptr) error { seen = append(seen, *a); return nil } // one call at a time: under mu, or alone
	worker := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range worker {
			for {
				mu.Lock()
				if len(queue) == 0 {
					mu.Unlock()
					break
				}
				fn := queue[0]
				fn(0, 0) // under mu, as the head of the queue, so order holds
				queue = queue[1:]
				mu.Unlock()
			}
		}
	}()
	for i := range calls {
		q := cs.next(argsOf(i), run)
		mu.Lock()
		if len(queue) == 0 && i%3 != 0 {
			q.fn(0, 0) // nothing queued: at once
		} else {
			queue = append(queue, q.fn) // host work ahead, or every third call made to wait
			select {
			case worker <- struct{}{}:
			default:
			}
		}
		mu.Unlock()
	}
	close(worker)
	<-done
	mu.Lock()
	for len(queue) > 0 { // the worker may have stopped before the last were queued
		queue[0](0, 0)
		queue = queue[1:]
	}
	mu.Unlock()
	if len(seen) != calls {
		t.Fatalf("%d calls ran; want %d", len(seen), calls)
	}
	for i, a := range seen {
		if a != argsOf(i) {
			t.Fatalf("call %d ran with %+v; want %+v", i, a, argsOf(i))
		}
	}
}
