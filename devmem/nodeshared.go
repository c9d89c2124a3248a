package devmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
)

// NodeComm is what NodeShared needs from a communicator of the ranks of one
// node. devmem cannot import comm (comm imports devmem), so comm adapts its
// Communicator to this with comm.NodeComm. Every method is collective: all
// ranks call it, in the same order.
type NodeComm interface {
	// Rank is this rank's index in [0, Size).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Device is this rank's device.
	Device() *Device
	// BroadcastBytes copies root's b into every rank's b; every rank passes
	// the same length.
	BroadcastBytes(b []byte, root int) error
	// AllGatherInt64 returns every rank's v, indexed by rank.
	AllGatherInt64(v int64) ([]int64, error)
	// Barrier returns once every rank has called it.
	Barrier() error
}

// NodeShared is one device buffer that all ranks of a node fill together:
// rank r owns the elements at the exclusive prefix sum of the counts before
// it, and every rank can read (and write) all of it. The node root (rank 0)
// allocates it and exports it; the other ranks open it through IPC, so there
// is one copy of the data on the root's device and nothing is sent.
//
// Writes by different ranks are ordered by Barrier: after every rank has
// written its part and called Barrier, every rank sees all of it.
type NodeShared struct {
	c        NodeComm
	dev      *Device
	rank     int
	elemSize int
	counts   []int64
	offset   int64
	all      Buffer // the whole buffer: the root's allocation or an opened view
	mine     Buffer
	owned    Buffer // the root's allocation (zero elsewhere)
	closed   atomic.Bool
}

// shareMsg is what the root broadcasts: a status byte (0: shared), the
// handle, then its error text when it failed.
const (
	shareErrLen = 240
	shareMsgLen = 1 + HandleSize + 2 + shareErrLen
)

// NewNodeShared allocates, on the root's device, one buffer holding every
// rank's count elements of elemSize bytes, and gives every rank its view.
// Every rank of c calls it. An error on any rank (a bad argument, a failed
// allocation, a handle that does not open) makes every rank return an error
// and leaves nothing allocated or open.
func NewNodeShared(c NodeComm, count int64, elemSize int) (*NodeShared, error) {
	var badElem error
	if elemSize <= 0 {
		badElem = fmt.Errorf("element size %d is not positive: %w", elemSize, ErrInvalidArgument)
	}
	return newNodeShared(c, count, elemSize, badElem)
}

// newNodeShared is NewNodeShared; badElem, when not nil, says why this
// rank's element type or size is refused: the rank still joins the
// collectives, so that the others fail too instead of waiting, and returns
// badElem.
func newNodeShared(c NodeComm, count int64, elemSize int, badElem error) (*NodeShared, error) {
	if c == nil {
		return nil, fmt.Errorf("devmem: NewNodeShared with a nil NodeComm: %w", ErrInvalidArgument)
	}
	rank, size, dev := c.Rank(), c.Size(), c.Device()
	// A bad local argument still joins the collectives, as -1, so that the
	// other ranks fail with it instead of waiting.
	mine, elem := count, int64(elemSize)
	if count < 0 || dev == nil {
		mine = -1
	}
	if badElem != nil {
		elem = -1
	}
	counts, err := c.AllGatherInt64(mine)
	if err != nil {
		return nil, fmt.Errorf("devmem: NodeShared: gathering counts: %w", err)
	}
	elems, err := c.AllGatherInt64(elem)
	if err != nil {
		return nil, fmt.Errorf("devmem: NodeShared: gathering element sizes: %w", err)
	}
	if badElem != nil {
		// Said here, with what -1 stands for on this rank; layout fails
		// the same way on every rank.
		return nil, fmt.Errorf("devmem: NodeShared: rank %d: %w", rank, badElem)
	}
	offset, totalBytes, err := layout(counts, elems, size, rank)
	if err != nil {
		return nil, err
	}

	msg := make([]byte, shareMsgLen)
	var owned Buffer
	var rootErr error
	if rank == 0 {
		// At least one byte, so that a node whose ranks all bring zero
		// elements still has a buffer to export.
		// AllocShared: VMM memory on a GPU, which every rank maps from a
		// descriptor, so that a CUDA-aware MPI's own mappings of it do not
		// collide with the ranks'.
		owned, rootErr = dev.AllocShared(max(totalBytes, 1))
		var h IPCHandle
		if rootErr == nil {
			var whole Buffer
			whole, rootErr = owned.Slice(0, totalBytes)
			if rootErr == nil {
				h, rootErr = whole.Export()
			}
		}
		if rootErr != nil {
			if !owned.IsZero() {
				rootErr = errors.Join(rootErr, owned.Free())
				owned = Buffer{}
			}
			msg[0] = 1
			text := rootErr.Error()
			if len(text) > shareErrLen {
				text = text[:shareErrLen]
			}
			binary.LittleEndian.PutUint16(msg[1+HandleSize:], uint16(len(text)))
			copy(msg[1+HandleSize+2:], text)
		} else {
			copy(msg[1:], h.raw[:])
		}
	}
	if err := c.BroadcastBytes(msg, 0); err != nil {
		if !owned.IsZero() {
			err = errors.Join(err, owned.Free())
		}
		return nil, fmt.Errorf("devmem: NodeShared: broadcasting the handle: %w", err)
	}
	if rank == 0 && rootErr != nil {
		return nil, fmt.Errorf("devmem: NodeShared: root could not share a %d-byte buffer: %w", totalBytes, rootErr)
	}
	if msg[0] != 0 {
		n := min(int(binary.LittleEndian.Uint16(msg[1+HandleSize:])), shareErrLen)
		return nil, fmt.Errorf("devmem: NodeShared: root could not share a %d-byte buffer: %s", totalBytes, msg[1+HandleSize+2:1+HandleSize+2+n])
	}

	var all Buffer
	var openErr error
	if rank == 0 {
		all, openErr = owned.Slice(0, totalBytes)
	} else {
		var h IPCHandle
		if openErr = h.UnmarshalBinary(msg[1 : 1+HandleSize]); openErr == nil {
			all, openErr = dev.OpenIPC(h)
		}
	}
	// Everyone learns whether everyone opened it, so that a failure on one
	// rank undoes the buffer on all of them.
	ok := int64(1)
	if openErr != nil {
		ok = 0
	}
	oks, err := c.AllGatherInt64(ok)
	if err == nil && len(oks) != size {
		err = fmt.Errorf("AllGatherInt64 returned %d values for %d ranks", len(oks), size)
	}
	if err != nil || openErr != nil || !allOne(oks) {
		failed := openErr
		if failed == nil && err != nil {
			failed = fmt.Errorf("devmem: NodeShared: gathering open results: %w", err)
		}
		if failed == nil {
			failed = fmt.Errorf("devmem: NodeShared: rank(s) %v could not open the root's buffer: %w", zeros(oks), ErrBadHandle)
		}
		return nil, errors.Join(failed, undo(c, rank, all, owned, err == nil))
	}
	ns := &NodeShared{c: c, dev: dev, rank: rank, elemSize: elemSize, counts: counts, offset: offset, all: all, owned: owned}
	ns.mine, err = all.Slice(int(offset)*elemSize, int(count)*elemSize)
	if err != nil { // layout made sure it fits; kept as an error rather than a panic
		return nil, errors.Join(err, undo(c, rank, all, owned, true))
	}
	return ns, nil
}

// layout checks the gathered arguments, the same way on every rank, and
// returns this rank's element offset and the buffer's size in bytes.
func layout(counts, elems []int64, size, rank int) (offset int64, totalBytes int, err error) {
	if len(counts) != size || len(elems) != size {
		return 0, 0, fmt.Errorf("devmem: NodeShared: AllGatherInt64 returned %d and %d values for %d ranks: %w", len(counts), len(elems), size, ErrInvalidArgument)
	}
	for r := range size {
		if counts[r] < 0 {
			return 0, 0, fmt.Errorf("devmem: NodeShared: rank %d gave a negative count or no device: %w", r, ErrInvalidArgument)
		}
	}
	for r := range size {
		if elems[r] <= 0 {
			return 0, 0, fmt.Errorf("devmem: NodeShared: rank %d refused its element type or size (its own error says why): %w", r, ErrInvalidArgument)
		}
	}
	for r := range size {
		if elems[r] != elems[0] {
			return 0, 0, fmt.Errorf("devmem: NodeShared: element sizes differ (rank %d: %d bytes, rank 0: %d bytes): %w", r, elems[r], elems[0], ErrInvalidArgument)
		}
	}
	var total int64
	for r, n := range counts {
		if r == rank {
			offset = total
		}
		if n > math.MaxInt64/elems[0]-total {
			return 0, 0, fmt.Errorf("devmem: NodeShared: %d ranks' counts of %d-byte elements overflow: %w", size, elems[0], ErrInvalidArgument)
		}
		total += n
	}
	if total > math.MaxInt/elems[0] {
		return 0, 0, fmt.Errorf("devmem: NodeShared: %d elements of %d bytes overflow: %w", total, elems[0], ErrInvalidArgument)
	}
	return offset, int(total * elems[0]), nil
}

func allOne(v []int64) bool {
	for _, x := range v {
		if x != 1 {
			return false
		}
	}
	return true
}

func zeros(v []int64) []int {
	var r []int
	for i, x := range v {
		if x != 1 {
			r = append(r, i)
		}
	}
	return r
}

// undo closes this rank's view and, on the root, frees the buffer once the
// others have closed theirs. Without a working communicator (synced false)
// the root cannot know that, and keeps the buffer rather than free memory
// another rank may still write.
func undo(c NodeComm, rank int, all, owned Buffer, synced bool) error {
	var errs []error
	if rank != 0 && !all.IsZero() {
		errs = append(errs, all.CloseIPC())
	}
	if !synced {
		if !owned.IsZero() {
			errs = append(errs, fmt.Errorf("devmem: NodeShared: the root's %d-byte buffer is kept: the ranks could not agree it is unused", owned.Len()))
		}
		return errors.Join(errs...)
	}
	if err := c.Barrier(); err != nil {
		errs = append(errs, err)
		if !owned.IsZero() {
			errs = append(errs, fmt.Errorf("devmem: NodeShared: the root's %d-byte buffer is kept: the ranks could not agree it is unused", owned.Len()))
		}
		return errors.Join(errs...)
	}
	if !owned.IsZero() {
		errs = append(errs, owned.Free())
	}
	return errors.Join(errs...)
}

// Mine is this rank's part of the buffer.
func (ns *NodeShared) Mine() Buffer { return ns.mine }

// All is the whole buffer, every rank's part in rank order.
func (ns *NodeShared) All() Buffer { return ns.all }

// Offset is where this rank's part starts, in elements.
func (ns *NodeShared) Offset() int64 { return ns.offset }

// Counts is every rank's element count, indexed by rank.
func (ns *NodeShared) Counts() []int64 { return append([]int64(nil), ns.counts...) }

// ElemSize is the size of an element in bytes.
func (ns *NodeShared) ElemSize() int { return ns.elemSize }

// Barrier waits for the work queued on the device's streams
// (Device.Synchronize, so that this rank's writes have landed) and then for
// every rank to do the same.
func (ns *NodeShared) Barrier() error {
	if ns.closed.Load() {
		return fmt.Errorf("devmem: NodeShared: barrier after Close: %w", ErrClosed)
	}
	// Every rank joins the barrier even if its own synchronize failed.
	syncErr := ns.dev.Synchronize()
	return errors.Join(syncErr, ns.c.Barrier())
}

// Close releases the buffer; every rank calls it. Each rank closes its view,
// then all meet at a barrier, then the root frees the memory, so the root
// never frees memory another rank still uses.
func (ns *NodeShared) Close() error {
	if !ns.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("devmem: NodeShared closed twice: %w", ErrClosed)
	}
	return undo(ns.c, ns.rank, ns.all, ns.owned, true)
}

// NodeSharedSlice is a NodeShared of elements of T.
type NodeSharedSlice[T any] struct {
	ns *NodeShared
}

// NewNodeSharedSlice is NewNodeShared for count elements of T on this rank.
// An element type that Slice refuses (of size zero, or holding pointers) is
// refused with an error wrapping ErrInvalidArgument that names it, on this
// rank, and with one that names this rank on the others.
func NewNodeSharedSlice[T any](c NodeComm, count int) (*NodeSharedSlice[T], error) {
	ns, err := newNodeShared(c, int64(count), elemSize[T](), checkElem[T]())
	if err != nil {
		return nil, err
	}
	return &NodeSharedSlice[T]{ns: ns}, nil
}

// Mine is this rank's elements.
func (s *NodeSharedSlice[T]) Mine() Slice[T] { return SliceOf[T](s.ns.mine) }

// All is every rank's elements, in rank order.
func (s *NodeSharedSlice[T]) All() Slice[T] { return SliceOf[T](s.ns.all) }

// Offset is where this rank's elements start in All.
func (s *NodeSharedSlice[T]) Offset() int { return int(s.ns.offset) }

// Counts is every rank's element count.
func (s *NodeSharedSlice[T]) Counts() []int64 { return s.ns.Counts() }

// Shared is the untyped NodeShared underneath.
func (s *NodeSharedSlice[T]) Shared() *NodeShared { return s.ns }

// Barrier is NodeShared.Barrier.
func (s *NodeSharedSlice[T]) Barrier() error { return s.ns.Barrier() }

// Close is NodeShared.Close; every rank calls it.
func (s *NodeSharedSlice[T]) Close() error { return s.ns.Close() }
