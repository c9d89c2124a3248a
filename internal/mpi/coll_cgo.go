//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

/*
#include "gpucomm_mpi.h"
*/
import "C"

import (
	"math"
	"unsafe"
)

// Buffers are addresses (uintptr) of device memory or of host memory outside
// the Go heap, counts are in elements. Arguments are checked here before any
// MPI call; a bad one returns an error wrapping errs.ErrInvalidArgument and
// touches no memory. MPI cannot check buffer sizes: that is the caller's part.
//
// In place: passing the same address for send and receive means MPI_IN_PLACE
// where MPI defines it, with the data where MPI (and NCCL) expect it:
//
//	Allreduce, Iallreduce       send == recv
//	Reduce (at root)            send == recv
//	ReduceScatterBlock          send == recv: input is recv[0:size*count], result recv[0:count]
//	Alltoall                    send == recv
//	Allgather                   send == recv + rank*count*elemsize (this rank's block already in place)
//	Gather (at root)            send == recv + root*count*elemsize
//	Scatter (at root)           recv == send + root*count*elemsize (root's block stays where it is)
//
// Any other overlap of send and receive buffers is an invalid argument.

func checkCount(name string, count int) error {
	if count < 0 || count > math.MaxInt32 {
		return argError(name, "count %d is outside [0, %d]", count, math.MaxInt32)
	}
	return nil
}

func checkBuf(name, what string, addr uintptr, count int) error {
	if addr == 0 && count > 0 {
		return argError(name, "%s buffer is nil for %d elements", what, count)
	}
	return nil
}

func checkType(name string, dt Datatype) error {
	if !dt.Valid() {
		return argError(name, "invalid datatype %v", dt)
	}
	return nil
}

func checkReduction(name string, dt Datatype, op Op) error {
	if err := checkType(name, dt); err != nil {
		return err
	}
	if !dt.Reducible() {
		return argError(name, "%v has no arithmetic; reduce it as Uint8", dt)
	}
	if !op.Valid() {
		return argError(name, "invalid op %v", op)
	}
	return nil
}

func (c *Comm) checkRoot(name string, root int) error {
	if root < 0 || root >= c.size {
		return argError(name, "root %d is outside [0, %d)", root, c.size)
	}
	return nil
}

// overlap reports whether byte ranges [a, a+an) and [b, b+bn) share a byte.
func overlap(a uintptr, an int, b uintptr, bn int) bool {
	if an <= 0 || bn <= 0 || a == 0 || b == 0 {
		return false
	}
	return a < b+uintptr(bn) && b < a+uintptr(an)
}

func checkDistinct(name string, send uintptr, sendBytes int, recv uintptr, recvBytes int) error {
	if overlap(send, sendBytes, recv, recvBytes) {
		return argError(name, "send and receive buffers overlap without being the in-place form")
	}
	return nil
}

// common checks every collective shares: c is usable, dt and count are valid.
func (c *Comm) common(name string, count int, dt Datatype) error {
	if err := c.ready(name); err != nil {
		return err
	}
	if err := checkType(name, dt); err != nil {
		return err
	}
	return checkCount(name, count)
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func addr(p uintptr) C.uintptr_t { return C.uintptr_t(p) }

// Barrier is MPI_Barrier.
func (c *Comm) Barrier() error {
	if err := c.ready("Barrier"); err != nil {
		return err
	}
	return call("MPI_Barrier", func() C.int { return C.gc_barrier(c.h) })
}

// Bcast is MPI_Bcast: root's count elements at buf go to buf on every rank.
func (c *Comm) Bcast(buf uintptr, count int, dt Datatype, root int) error {
	const name = "Bcast"
	if err := c.checkBcast(name, buf, count, dt, root); err != nil {
		return err
	}
	return call("MPI_Bcast", func() C.int { return C.gc_bcast(addr(buf), C.int(count), C.int(dt), C.int(root), c.h) })
}

func (c *Comm) checkBcast(name string, buf uintptr, count int, dt Datatype, root int) error {
	if err := c.common(name, count, dt); err != nil {
		return err
	}
	if err := c.checkRoot(name, root); err != nil {
		return err
	}
	return checkBuf(name, "", buf, count)
}

// Reduce is MPI_Reduce: the reduction of every rank's send lands in root's
// recv; recv is ignored on other ranks. In place at root: send == recv.
func (c *Comm) Reduce(send, recv uintptr, count int, dt Datatype, op Op, root int) error {
	const name = "Reduce"
	if err := c.common(name, count, dt); err != nil {
		return err
	}
	if err := checkReduction(name, dt, op); err != nil {
		return err
	}
	if err := c.checkRoot(name, root); err != nil {
		return err
	}
	n := count * dt.Size()
	inPlace := false
	if c.rank == root {
		inPlace = send == recv
		if err := checkBuf(name, "receive", recv, count); err != nil {
			return err
		}
		if !inPlace {
			if err := checkDistinct(name, send, n, recv, n); err != nil {
				return err
			}
		}
	}
	if err := checkBuf(name, "send", send, count); err != nil {
		return err
	}
	on, r, err := c.reduceTarget(root)
	if err != nil {
		return err
	}
	return call("MPI_Reduce", func() C.int {
		return C.gc_reduce(addr(send), addr(recv), C.int(count), C.int(dt), C.int(op), C.int(r), cbool(inPlace), on.h)
	})
}

func (c *Comm) checkAllreduce(name string, send, recv uintptr, count int, dt Datatype, op Op) (inPlace bool, err error) {
	if err := c.common(name, count, dt); err != nil {
		return false, err
	}
	if err := checkReduction(name, dt, op); err != nil {
		return false, err
	}
	if err := checkBuf(name, "send", send, count); err != nil {
		return false, err
	}
	if err := checkBuf(name, "receive", recv, count); err != nil {
		return false, err
	}
	n := count * dt.Size()
	if send == recv {
		return true, nil
	}
	return false, checkDistinct(name, send, n, recv, n)
}

// Allreduce is MPI_Allreduce: every rank's recv gets the reduction of every
// rank's send. In place: send == recv.
func (c *Comm) Allreduce(send, recv uintptr, count int, dt Datatype, op Op) error {
	inPlace, err := c.checkAllreduce("Allreduce", send, recv, count, dt, op)
	if err != nil {
		return err
	}
	return call("MPI_Allreduce", func() C.int {
		return C.gc_allreduce(addr(send), addr(recv), C.int(count), C.int(dt), C.int(op), cbool(inPlace), c.h)
	})
}

// ReduceLocal is MPI_Reduce_local: inout[i] = in[i] op inout[i], in this
// process, with the same ops (float16 and bfloat16 included) as the
// collectives. MPI must be up.
func ReduceLocal(in, inout uintptr, count int, dt Datatype, op Op) error {
	const name = "ReduceLocal"
	if err := upError(name); err != nil {
		return err
	}
	if err := checkReduction(name, dt, op); err != nil {
		return err
	}
	if err := checkCount(name, count); err != nil {
		return err
	}
	if err := checkBuf(name, "input", in, count); err != nil {
		return err
	}
	if err := checkBuf(name, "in-out", inout, count); err != nil {
		return err
	}
	n := count * dt.Size()
	if err := checkDistinct(name, in, n, inout, n); err != nil {
		return err
	}
	return call("MPI_Reduce_local", func() C.int {
		return C.gc_reduce_local(addr(in), addr(inout), C.int(count), C.int(dt), C.int(op))
	})
}

// Allgather is MPI_Allgather: rank r's count elements of send land at
// recv[r*count:(r+1)*count] on every rank. In place: send == recv +
// rank*count*elemsize.
func (c *Comm) Allgather(send, recv uintptr, count int, dt Datatype) error {
	const name = "Allgather"
	if err := c.common(name, count, dt); err != nil {
		return err
	}
	n := count * dt.Size()
	inPlace := send == recv+uintptr(c.rank*n)
	if err := checkBuf(name, "receive", recv, count); err != nil {
		return err
	}
	if !inPlace {
		if err := checkBuf(name, "send", send, count); err != nil {
			return err
		}
		if err := checkDistinct(name, send, n, recv, n*c.size); err != nil {
			return err
		}
	}
	return call("MPI_Allgather", func() C.int {
		return C.gc_allgather(addr(send), addr(recv), C.int(count), C.int(dt), cbool(inPlace), c.h)
	})
}

// ReduceScatterBlock is MPI_Reduce_scatter_block: send holds size*count
// elements; rank r's recv gets the reduction of block r. In place: send ==
// recv, where recv holds the input and gets the result in its first block.
func (c *Comm) ReduceScatterBlock(send, recv uintptr, count int, dt Datatype, op Op) error {
	const name = "ReduceScatterBlock"
	if err := c.common(name, count, dt); err != nil {
		return err
	}
	if err := checkReduction(name, dt, op); err != nil {
		return err
	}
	if count > math.MaxInt32/max(c.size, 1) {
		return argError(name, "%d ranks of %d elements exceed MPI's int count", c.size, count)
	}
	if err := checkBuf(name, "send", send, count); err != nil {
		return err
	}
	if err := checkBuf(name, "receive", recv, count); err != nil {
		return err
	}
	n := count * dt.Size()
	inPlace := send == recv
	if !inPlace {
		if err := checkDistinct(name, send, n*c.size, recv, n); err != nil {
			return err
		}
	}
	return call("MPI_Reduce_scatter_block", func() C.int {
		return C.gc_reduce_scatter_block(addr(send), addr(recv), C.int(count), C.int(dt), C.int(op), cbool(inPlace), c.h)
	})
}

// Alltoall is MPI_Alltoall: block j (count elements) of rank i's send lands
// in block i of rank j's recv. In place: send == recv.
func (c *Comm) Alltoall(send, recv uintptr, count int, dt Datatype) error {
	const name = "Alltoall"
	if err := c.common(name, count, dt); err != nil {
		return err
	}
	if err := checkBuf(name, "send", send, count); err != nil {
		return err
	}
	if err := checkBuf(name, "receive", recv, count); err != nil {
		return err
	}
	n := count * dt.Size() * c.size
	inPlace := send == recv
	if !inPlace {
		if err := checkDistinct(name, send, n, recv, n); err != nil {
			return err
		}
	}
	return call("MPI_Alltoall", func() C.int {
		return C.gc_alltoall(addr(send), addr(recv), C.int(count), C.int(dt), cbool(inPlace), c.h)
	})
}

// Gather is MPI_Gather: rank r's count elements land in root's recv at block
// r; recv is ignored on other ranks. In place at root: send == recv +
// root*count*elemsize.
func (c *Comm) Gather(send, recv uintptr, count int, dt Datatype, root int) error {
	inPlace, err := c.checkRooted("Gather", count, dt, root, recv, "receive", send, "send")
	if err != nil {
		return err
	}
	return call("MPI_Gather", func() C.int {
		return C.gc_gather(addr(send), addr(recv), C.int(count), C.int(dt), C.int(root), cbool(inPlace), c.h)
	})
}

// Scatter is MPI_Scatter: block r (count elements) of root's send lands in
// rank r's recv; send is ignored on other ranks. In place at root: recv ==
// send + root*count*elemsize.
func (c *Comm) Scatter(send, recv uintptr, count int, dt Datatype, root int) error {
	inPlace, err := c.checkRooted("Scatter", count, dt, root, send, "send", recv, "receive")
	if err != nil {
		return err
	}
	return call("MPI_Scatter", func() C.int {
		return C.gc_scatter(addr(send), addr(recv), C.int(count), C.int(dt), C.int(root), cbool(inPlace), c.h)
	})
}

// checkRooted checks a Gather or Scatter: whole is the root's buffer of
// every rank's block (ignored on other ranks), block each rank's own count
// elements; it reports the in-place form (at root, block is the root's
// own block of whole).
func (c *Comm) checkRooted(name string, count int, dt Datatype, root int, whole uintptr, wholeRole string, block uintptr, blockRole string) (inPlace bool, err error) {
	if err := c.common(name, count, dt); err != nil {
		return false, err
	}
	if err := c.checkRoot(name, root); err != nil {
		return false, err
	}
	n := count * dt.Size()
	if c.rank == root {
		if err := checkBuf(name, wholeRole, whole, count); err != nil {
			return false, err
		}
		inPlace = block == whole+uintptr(root*n)
		if !inPlace {
			if err := checkDistinct(name, block, n, whole, n*c.size); err != nil {
				return false, err
			}
		}
	}
	if !inPlace {
		if err := checkBuf(name, blockRole, block, count); err != nil {
			return false, err
		}
	}
	return inPlace, nil
}

// Ibarrier is MPI_Ibarrier.
func (c *Comm) Ibarrier() (*Request, error) {
	if err := c.ready("Ibarrier"); err != nil {
		return nil, err
	}
	r := &Request{dt: Byte}
	err := call("MPI_Ibarrier", func() C.int { return C.gc_ibarrier(c.h, &r.h) })
	return r.started(err)
}

// Ibcast is MPI_Ibcast; buf must stay valid until the request completes.
func (c *Comm) Ibcast(buf uintptr, count int, dt Datatype, root int) (*Request, error) {
	if err := c.checkBcast("Ibcast", buf, count, dt, root); err != nil {
		return nil, err
	}
	r := &Request{dt: dt}
	err := call("MPI_Ibcast", func() C.int {
		return C.gc_ibcast(addr(buf), C.int(count), C.int(dt), C.int(root), c.h, &r.h)
	})
	return r.started(err)
}

// Iallreduce is MPI_Iallreduce, for reductions that must be waited on with a
// bound (WaitTimeout). In place: send == recv.
func (c *Comm) Iallreduce(send, recv uintptr, count int, dt Datatype, op Op) (*Request, error) {
	inPlace, err := c.checkAllreduce("Iallreduce", send, recv, count, dt, op)
	if err != nil {
		return nil, err
	}
	r := &Request{dt: dt}
	err = call("MPI_Iallreduce", func() C.int {
		return C.gc_iallreduce(addr(send), addr(recv), C.int(count), C.int(dt), C.int(op), cbool(inPlace), c.h, &r.h)
	})
	return r.started(err)
}

// The Go-memory forms behind values.go. Each blocks until MPI is done with
// the memory, as cgo requires.

func (c *Comm) allreduceGo(buf unsafe.Pointer, count int, dt Datatype, op Op) error {
	const name = "AllreduceValues"
	if err := c.common(name, count, dt); err != nil {
		return err
	}
	if err := checkReduction(name, dt, op); err != nil {
		return err
	}
	return call("MPI_Allreduce", func() C.int { return C.gc_allreduce_go(buf, C.int(count), C.int(dt), C.int(op), c.h) })
}

func (c *Comm) bcastGo(buf unsafe.Pointer, count int, dt Datatype, root int) error {
	const name = "BcastValues"
	if err := c.common(name, count, dt); err != nil {
		return err
	}
	if err := c.checkRoot(name, root); err != nil {
		return err
	}
	return call("MPI_Bcast", func() C.int { return C.gc_bcast_go(buf, C.int(count), C.int(dt), C.int(root), c.h) })
}

func (c *Comm) allgatherGo(send, recv unsafe.Pointer, count int, dt Datatype) error {
	if err := c.common("AllgatherValues", count, dt); err != nil {
		return err
	}
	return call("MPI_Allgather", func() C.int { return C.gc_allgather_go(send, recv, C.int(count), C.int(dt), c.h) })
}

func (c *Comm) allgathervGo(send unsafe.Pointer, count int, recv unsafe.Pointer, counts, displs []int32) error {
	if err := c.common("AllgatherBytes", count, Byte); err != nil {
		return err
	}
	cnt := (*C.int)(unsafe.Pointer(unsafe.SliceData(counts)))
	dsp := (*C.int)(unsafe.Pointer(unsafe.SliceData(displs)))
	return call("MPI_Allgatherv", func() C.int { return C.gc_allgatherv_go(send, C.int(count), recv, cnt, dsp, c.h) })
}
