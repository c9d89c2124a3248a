//go:build cgo

package nccl

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
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
	if d.Kind() != devmem.CUDA || d.Context() == 0 {
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
	e := &ncclEngine{ctx: cuda.Context(d.Context())}
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
	return s.Enqueue(func(h uintptr) error { return fn(cuda.Stream(h)) })
}

// dataTypes and redOps map gpucomm's types and reductions to NCCL's; NCCL
// has all of them natively, float16, bfloat16 and the average included.
var dataTypes = map[comm.DType]nccl.DataType{
	comm.Int8: nccl.Int8, comm.Uint8: nccl.Uint8, comm.Int32: nccl.Int32, comm.Uint32: nccl.Uint32,
	comm.Int64: nccl.Int64, comm.Uint64: nccl.Uint64, comm.Float16: nccl.Float16, comm.BFloat16: nccl.Bfloat16,
	comm.Float32: nccl.Float32, comm.Float64: nccl.Float64,
}

var redOps = map[comm.Op]nccl.RedOp{comm.Sum: nccl.Sum, comm.Prod: nccl.Prod, comm.Min: nccl.Min, comm.Max: nccl.Max, comm.Avg: nccl.Avg}

func (e *ncclEngine) allReduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	return e.on(s, func(h cuda.Stream) error {
		return nccl.AllReduce(ptr(send), ptr(recv), n, dataTypes[dt], redOps[op], e.h, h)
	})
}

func (e *ncclEngine) reduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, root int, s *devmem.Stream) error {
	return e.on(s, func(h cuda.Stream) error {
		return nccl.Reduce(ptr(send), ptr(recv), n, dataTypes[dt], redOps[op], root, e.h, h)
	})
}

func (e *ncclEngine) broadcast(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	return e.on(s, func(h cuda.Stream) error {
		return nccl.Broadcast(ptr(send), ptr(recv), n, dataTypes[dt], root, e.h, h)
	})
}

func (e *ncclEngine) allGather(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	return e.on(s, func(h cuda.Stream) error { return nccl.AllGather(ptr(send), ptr(recv), n, dataTypes[dt], e.h, h) })
}

func (e *ncclEngine) reduceScatter(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	return e.on(s, func(h cuda.Stream) error {
		return nccl.ReduceScatter(ptr(send), ptr(recv), n, dataTypes[dt], redOps[op], e.h, h)
	})
}

func (e *ncclEngine) group(ops []comm.P2P, s *devmem.Stream) error {
	return e.on(s, func(h cuda.Stream) error {
		if err := nccl.GroupStart(); err != nil {
			return err
		}
		var first error
		for _, p := range ops {
			var err error
			if p.Kind == comm.SendKind {
				err = nccl.Send(ptr(p.Buf), p.Count, dataTypes[p.DType], p.Peer, e.h, h)
			} else {
				err = nccl.Recv(ptr(p.Buf), p.Count, dataTypes[p.DType], p.Peer, e.h, h)
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
