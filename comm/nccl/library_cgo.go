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
	h   nccl.Comm
	ctx cuda.Context
}

func (e *ncclEngine) do(fn func() error) error { return cuda.WithContext(e.ctx, fn) }

func ptr(b devmem.Buffer) cuda.DevicePtr { return cuda.DevicePtr(b.Addr()) }

// on runs fn in s's order: now, or behind host work queued on s (whose
// errors then come from s's next Synchronize). A nil s is NCCL's default
// stream, and fn runs now.
func (e *ncclEngine) on(s *devmem.Stream, fn func(h cuda.Stream) error) error {
	if s == nil {
		return e.do(func() error { return fn(0) })
	}
	return devhook.Enqueue(s, func(h uintptr) error { return fn(cuda.Stream(h)) })
}

// ncclType maps gpucomm's element types to NCCL's, which has all of them
// natively, float16 and bfloat16 included; false for a DType it does not
// know (NCCL's zero, ncclInt8, is never a default). A switch, not a map: it
// runs on every call. mapping_test.go walks comm.DTypes through it.
func ncclType(dt comm.DType) (nccl.DataType, bool) {
	switch dt {
	case comm.Int8:
		return nccl.Int8, true
	case comm.Uint8:
		return nccl.Uint8, true
	case comm.Int32:
		return nccl.Int32, true
	case comm.Uint32:
		return nccl.Uint32, true
	case comm.Int64:
		return nccl.Int64, true
	case comm.Uint64:
		return nccl.Uint64, true
	case comm.Float16:
		return nccl.Float16, true
	case comm.BFloat16:
		return nccl.Bfloat16, true
	case comm.Float32:
		return nccl.Float32, true
	case comm.Float64:
		return nccl.Float64, true
	}
	return 0, false
}

// ncclOp maps gpucomm's reductions to NCCL's, the average included (NCCL
// 2.10 and later; avgfault.go decides when it is worked around); false for
// an Op it does not know (NCCL's zero, ncclSum, is never a default).
func ncclOp(op comm.Op) (nccl.RedOp, bool) {
	switch op {
	case comm.Sum:
		return nccl.Sum, true
	case comm.Prod:
		return nccl.Prod, true
	case comm.Min:
		return nccl.Min, true
	case comm.Max:
		return nccl.Max, true
	case comm.Avg:
		return nccl.Avg, true
	}
	return 0, false
}

// ncclArgs maps dt and op, or says which of them NCCL has no value for.
// Validation has refused both already; this is defence in depth.
func ncclArgs(dt comm.DType, op comm.Op) (nccl.DataType, nccl.RedOp, error) {
	t, ok := ncclType(dt)
	if !ok {
		return 0, 0, unmappedType(dt)
	}
	o, ok := ncclOp(op)
	if !ok {
		return 0, 0, fmt.Errorf("nccl: reduction %v has no NCCL value: %w", op, comm.ErrInvalidArgument)
	}
	return t, o, nil
}

func unmappedType(dt comm.DType) error {
	return fmt.Errorf("nccl: element type %v has no NCCL value: %w", dt, comm.ErrInvalidArgument)
}

func (e *ncclEngine) allReduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	t, o, err := ncclArgs(dt, op)
	if err != nil {
		return err
	}
	return e.onIn(s, func(ctx cuda.Context, h cuda.Stream) error {
		return nccl.AllReduce(ctx, ptr(send), ptr(recv), n, t, o, e.h, h)
	})
}

func (e *ncclEngine) reduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, root int, s *devmem.Stream) error {
	t, o, err := ncclArgs(dt, op)
	if err != nil {
		return err
	}
	return e.onIn(s, func(ctx cuda.Context, h cuda.Stream) error {
		return nccl.Reduce(ctx, ptr(send), ptr(recv), n, t, o, root, e.h, h)
	})
}

func (e *ncclEngine) broadcast(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	t, ok := ncclType(dt)
	if !ok {
		return unmappedType(dt)
	}
	return e.onIn(s, func(ctx cuda.Context, h cuda.Stream) error {
		return nccl.Broadcast(ctx, ptr(send), ptr(recv), n, t, root, e.h, h)
	})
}

// onIn is on for one NCCL collective, which makes e's context current
// itself, inside the same C call (ctx, the first argument of internal/nccl's
// collectives): one cgo call a collective instead of four, and no locked
// thread. A nil s is NCCL's default stream, and fn runs now.
func (e *ncclEngine) onIn(s *devmem.Stream, fn func(ctx cuda.Context, h cuda.Stream) error) error {
	if s == nil {
		return fn(e.ctx, 0)
	}
	return devhook.EnqueueIn(s, func(ctx, h uintptr) error { return fn(cuda.Context(ctx), cuda.Stream(h)) })
}

func (e *ncclEngine) allGather(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	t, ok := ncclType(dt)
	if !ok {
		return unmappedType(dt)
	}
	return e.onIn(s, func(ctx cuda.Context, h cuda.Stream) error {
		return nccl.AllGather(ctx, ptr(send), ptr(recv), n, t, e.h, h)
	})
}

func (e *ncclEngine) reduceScatter(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	t, o, err := ncclArgs(dt, op)
	if err != nil {
		return err
	}
	return e.onIn(s, func(ctx cuda.Context, h cuda.Stream) error {
		return nccl.ReduceScatter(ctx, ptr(send), ptr(recv), n, t, o, e.h, h)
	})
}

func (e *ncclEngine) group(ops []comm.P2P, s *devmem.Stream) error {
	// Every type is mapped before the group starts, so that an unmapped one
	// leaves nothing half queued.
	for _, p := range ops {
		if _, ok := ncclType(p.DType); !ok {
			return unmappedType(p.DType)
		}
	}
	return e.on(s, func(h cuda.Stream) error {
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
