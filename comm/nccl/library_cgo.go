//go:build cgo

package nccl

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/devhook"
	"github.com/gpucomm/gpucomm/internal/nccl"
	"github.com/gpucomm/gpucomm/internal/ncclmap"
)

// ncclLibrary is NCCL itself, loaded by internal/nccl at Open.
type ncclLibrary struct{}

func realLibrary() library { return ncclLibrary{} }

func (ncclLibrary) load() error { return nccl.Load() }

func (ncclLibrary) describe() string {
	major, minor, patch, err := nccl.Version()
	if err != nil {
		return "NCCL (version unknown)"
	}
	return fmt.Sprintf("NCCL %d.%d.%d", major, minor, patch)
}

func (ncclLibrary) versionCode() int {
	major, minor, patch, err := nccl.Version() // read once, when NCCL was loaded
	if err != nil {
		return 0
	}
	return major*10000 + minor*100 + patch
}

func (ncclLibrary) checkDevice(d *devmem.Device) error {
	if d.Kind() != devmem.CUDA || devhook.Context(d) == 0 {
		return fmt.Errorf("this rank's device is %v: nccl needs a GPU; use local or mpi on the host device: %w", d, comm.ErrUnsupported)
	}
	return nil
}

func (ncclLibrary) deviceID(d *devmem.Device) [16]byte { return d.UUID() }

func (ncclLibrary) uniqueID() ([128]byte, error) {
	id, err := nccl.GetUniqueID()
	return [128]byte(id), err
}

func (ncclLibrary) initRank(d *devmem.Device, nranks, rank int, id [128]byte) (engine, error) {
	e := &ncclEngine{ctx: cuda.Context(devhook.Context(d))}
	// NCCL takes its device from the current context: the device's primary one.
	err := e.do(func() error {
		var err error
		e.h, err = nccl.CommInitRank(nranks, nccl.UniqueID(id), rank)
		return err
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// ncclEngine is one ncclComm_t. Every call runs with the device's context
// current on a locked OS thread, which also keeps a group's calls, from
// ncclGroupStart to ncclGroupEnd, on the one thread NCCL's group state is on.
type ncclEngine struct {
	h     nccl.Comm
	ctx   cuda.Context
	calls callSlot // the collectives handed to the stream (handoff.go)
}

func (e *ncclEngine) do(fn func() error) error { return cuda.WithContext(e.ctx, fn) }

func ptr(b devmem.Buffer) cuda.DevicePtr { return cuda.DevicePtr(b.Addr()) }

// ncclType and ncclOp are the one NCCL mapping, internal/ncclmap's (the C
// baseline of bench/cbaseline is handed the same values): false for a value
// it does not know, never NCCL's zero (ncclInt8, ncclSum) as a default.
func ncclType(dt comm.DType) (nccl.DataType, bool) { return ncclmap.Type(dt) }

func ncclOp(op comm.Op) (nccl.RedOp, bool) { return ncclmap.Op(op) }

// ncclArgs maps dt and, when reduces, op, or says which of them NCCL has no
// value for. Validation has refused both already; this is defence in depth.
func ncclArgs(dt comm.DType, op comm.Op, reduces bool) (nccl.DataType, nccl.RedOp, error) {
	t, ok := ncclType(dt)
	if !ok {
		return 0, 0, unmappedType(dt)
	}
	if !reduces {
		return t, 0, nil
	}
	o, ok := ncclOp(op)
	switch {
	case !ok && op.Valid():
		// One of gpucomm's reductions that NCCL lacks: left out of
		// internal/ncclmap, refused here, the backend's only word on it.
		return 0, 0, fmt.Errorf("nccl: NCCL has no reduction %v: %w", op, comm.ErrUnsupported)
	case !ok:
		return 0, 0, fmt.Errorf("nccl: reduction %v has no NCCL value: %w", op, comm.ErrInvalidArgument)
	}
	return t, o, nil
}

func unmappedType(dt comm.DType) error {
	return fmt.Errorf("nccl: element type %v has no NCCL value: %w", dt, comm.ErrInvalidArgument)
}

// collective maps dt (and op, when reduces) and runs a on s as on runs its
// fn, through the engine's callSlot (handoff.go): a call on a stream with no
// host work queued allocates nothing.
func (e *ncclEngine) collective(a collArgs, dt comm.DType, op comm.Op, reduces bool, s *devmem.Stream) error {
	t, o, err := ncclArgs(dt, op, reduces)
	if err != nil {
		return err
	}
	a.dt, a.op, a.comm = t, o, e.h
	if s == nil {
		return runCollective(&a, uintptr(e.ctx), 0)
	}
	return devhook.EnqueueIn(s, e.calls.next(a, runCollective).fn)
}

// runCollective makes a's NCCL call on the context ctx and the stream h.
func runCollective(a *collArgs, ctx, h uintptr) error {
	c, st := cuda.Context(ctx), cuda.Stream(h)
	send, recv := cuda.DevicePtr(a.send), cuda.DevicePtr(a.recv)
	switch a.kind {
	case collAllReduce:
		return nccl.AllReduce(c, send, recv, a.n, a.dt, a.op, a.comm, st)
	case collReduce:
		return nccl.Reduce(c, send, recv, a.n, a.dt, a.op, a.root, a.comm, st)
	case collBroadcast:
		return nccl.Broadcast(c, send, recv, a.n, a.dt, a.root, a.comm, st)
	case collAllGather:
		return nccl.AllGather(c, send, recv, a.n, a.dt, a.comm, st)
	case collReduceScatter:
		return nccl.ReduceScatter(c, send, recv, a.n, a.dt, a.op, a.comm, st)
	}
	return fmt.Errorf("nccl: collective %d: %w", a.kind, comm.ErrUnsupported)
}

// on runs fn in s's order: now, or behind host work queued on s (whose
// errors then come from s's next Synchronize). fn gets e's context and
// makes it current itself, inside its own C call (ctx, the first argument
// of internal/nccl's collectives): one cgo call a collective, and no locked
// thread; a group, whose calls share one thread's group state, makes it
// current around them (inContext). A nil s is NCCL's default stream, and fn
// runs now.
func (e *ncclEngine) on(s *devmem.Stream, fn func(ctx cuda.Context, h cuda.Stream) error) error {
	if s == nil {
		return fn(e.ctx, 0)
	}
	return devhook.EnqueueIn(s, func(ctx, h uintptr) error { return fn(cuda.Context(ctx), cuda.Stream(h)) })
}

// inContext runs fn with ctx current on a locked OS thread (e's context
// where the stream has none).
func (e *ncclEngine) inContext(ctx cuda.Context, fn func() error) error {
	if ctx == 0 {
		ctx = e.ctx
	}
	return cuda.WithContext(ctx, fn)
}

func (e *ncclEngine) allReduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	return e.collective(collArgs{kind: collAllReduce, send: send.Addr(), recv: recv.Addr(), n: n}, dt, op, true, s)
}

func (e *ncclEngine) reduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, root int, s *devmem.Stream) error {
	return e.collective(collArgs{kind: collReduce, send: send.Addr(), recv: recv.Addr(), n: n, root: root}, dt, op, true, s)
}

func (e *ncclEngine) reduceScatter(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	return e.collective(collArgs{kind: collReduceScatter, send: send.Addr(), recv: recv.Addr(), n: n}, dt, op, true, s)
}

func (e *ncclEngine) broadcast(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	return e.collective(collArgs{kind: collBroadcast, send: send.Addr(), recv: recv.Addr(), n: n, root: root}, dt, 0, false, s)
}

func (e *ncclEngine) allGather(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	return e.collective(collArgs{kind: collAllGather, send: send.Addr(), recv: recv.Addr(), n: n}, dt, 0, false, s)
}

func (e *ncclEngine) group(ops []comm.P2P, s *devmem.Stream) error {
	// Every type is mapped before the group starts, so that an unmapped one
	// leaves nothing half queued.
	for _, p := range ops {
		if _, ok := ncclType(p.DType); !ok {
			return unmappedType(p.DType)
		}
	}
	return e.on(s, func(ctx cuda.Context, h cuda.Stream) error {
		return e.inContext(ctx, func() error {
			if err := nccl.GroupStart(); err != nil {
				return err
			}
			var first error
			for _, p := range ops {
				t, _ := ncclType(p.DType) // checked above
				var err error
				if p.Kind == comm.SendKind {
					err = nccl.Send(ptr(p.Buf), p.Count, t, p.Peer, e.h, h)
				} else {
					err = nccl.Recv(ptr(p.Buf), p.Count, t, p.Peer, e.h, h)
				}
				if err != nil {
					first = err
					break
				}
			}
			// Ended even after a failed call, so this thread's group state is closed.
			return errors.Join(first, nccl.GroupEnd())
		})
	})
}

func (e *ncclEngine) canSplit() bool {
	major, minor, _, err := nccl.Version()
	return err == nil && (major > 2 || major == 2 && minor >= 18)
}

func (e *ncclEngine) split(color, key int) (engine, error) {
	var h nccl.Comm
	err := e.do(func() error {
		var err error
		h, err = nccl.CommSplit(e.h, color, key)
		return err
	})
	if err != nil || h == 0 {
		return nil, err
	}
	return &ncclEngine{h: h, ctx: e.ctx}, nil
}

func (e *ncclEngine) asyncError() error {
	r, err := nccl.CommGetAsyncError(e.h)
	if err != nil {
		return err
	}
	if r != nccl.Success && r != nccl.InProgress {
		return &nccl.Error{Call: "an operation queued earlier", Code: r}
	}
	return nil
}

func (e *ncclEngine) abort() error { return e.do(func() error { return nccl.CommAbort(e.h) }) }

func (e *ncclEngine) finalize() error { return e.do(func() error { return nccl.CommFinalize(e.h) }) }

func (e *ncclEngine) destroy() error { return e.do(func() error { return nccl.CommDestroy(e.h) }) }
