//go:build cgo

package nccl

import (
	"sync/atomic"

	"github.com/gpucomm/gpucomm/internal/nccl"
)

// A collective reaches NCCL through devhook.EnqueueIn, which runs the
// function it is given at once or, behind host work queued on the stream,
// later on another goroutine. The function therefore escapes: a closure
// made for each call is an allocation (two were, the collective's own and
// the one that mapped its types, about 100 bytes a call on the GPU's hot
// path). Instead each engine keeps one queuedCall, whose function is made
// once, and hands it out again for the next call as soon as the call it
// was handed for has run, which, on a stream with no host work queued, is
// before EnqueueIn returns. A call still queued keeps its queuedCall; the
// next call gets a new one. (cgo only, as the engine, library_cgo.go.)

// collKind is which NCCL collective a queuedCall makes.
type collKind uint8

const (
	collAllReduce collKind = iota + 1
	collReduce
	collBroadcast
	collAllGather
	collReduceScatter
)

// collArgs are one collective's arguments, mapped to NCCL's values.
type collArgs struct {
	kind       collKind
	send, recv uintptr // device pointers; 0 is NULL
	n          int
	dt         nccl.DataType
	op         nccl.RedOp // reductions only
	root       int        // Reduce and Broadcast only
	comm       nccl.Comm
}

// queuedCall is one collective handed to EnqueueIn: its arguments and fn,
// which runs it.
type queuedCall struct {
	args collArgs
	// seq is the number of the call it was last handed for: written by the
	// engine before it hands the call out, read by fn.
	seq uint64
	// done is the seq of the last call whose fn has returned: the engine
	// reuses the queuedCall only when done is seq, so fn has read
	// everything it needed (the atomic orders the reads before the
	// engine's next writes).
	done atomic.Uint64
	fn   func(ctx, h uintptr) error
}

// callSlot hands out the queuedCalls of one engine, whose calls never
// overlap (the communicator's lock).
type callSlot struct{ last *queuedCall }

// next returns a queuedCall holding a: the last one when its call has run,
// else a new one, whose fn calls run (the same run on every call of a
// slot: runCollective in production), which makes the NCCL call of its
// arguments on the context ctx and the stream h.
func (cs *callSlot) next(a collArgs, run func(a *collArgs, ctx, h uintptr) error) *queuedCall {
	q := cs.last
	if q == nil || q.done.Load() != q.seq {
		q = &queuedCall{}
		q.fn = func(ctx, h uintptr) error {
			seq := q.seq
			err := run(&q.args, ctx, h)
			q.done.Store(seq)
			return err
		}
		cs.last = q
	}
	q.seq++
	q.args = a
	return q
}
