package cbaseline

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
)

// Coll names an operation a C loop times. The values match GCB_* in
// baseline.h.
type Coll int

// The operations.
const (
	AllReduce Coll = iota + 1
	AllGather
	ReduceScatter
	Broadcast
	Reduce
	AllToAll
	PingPong  // half the round trip of a message there and back
	Bandwidth // a window of sends, then a one-byte ack; each time is one message's share
)

var collNames = [...]string{"", "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "pingpong", "bw"}

// reduces reports whether c takes a reduction (Args.Op).
func (c Coll) reduces() bool { return c == AllReduce || c == ReduceScatter || c == Reduce }

func (c Coll) String() string {
	if c < AllReduce || c > Bandwidth {
		return fmt.Sprintf("Coll(%d)", int(c))
	}
	return collNames[c]
}

// Args are one timing's arguments. Send and Recv are addresses the library
// can take: host memory, or device memory for NCCL and CUDA-aware MPI.
type Args struct {
	Send, Recv uintptr
	// Count is the library's count argument: per rank for AllGather,
	// ReduceScatter and AllToAll, as MPI and NCCL take it.
	Count int
	DType comm.DType
	Op    comm.Op // reductions only; Avg is timed as Sum under MPI
	Root  int
	// Peer is the other rank of PingPong and Bandwidth; Initiator is true
	// on the rank that sends first (or sends the window).
	Peer      int
	Initiator bool
	Window    int
	Warmup    int  // untimed iterations before the timed ones
	SyncEach  bool // a barrier before every timed iteration, for wall-clock timing
}

// Errors the loops report besides the library's own.
var (
	// ErrNotBuilt is what MPI returns in a binary built without -tags mpi or
	// -tags mpich (or without cgo), and NCCL without cgo.
	ErrNotBuilt = fmt.Errorf("baseline not built: rebuild with -tags mpi (Open MPI) or -tags mpich, with cgo enabled: %w", comm.ErrNotBuilt)
	// ErrNotInitialized is what MPI returns when gpucomm's MPI is not up:
	// before the first MPI backend opens (or comm/mpi's Init), or after
	// MPI_Finalize.
	ErrNotInitialized = errors.New("cbaseline: MPI is not initialised (open gpucomm's MPI backend, or call Init of gpucomm/comm/mpi, first)")
	// ErrUnsupported is returned for a datatype or reduction the library
	// lacks (MPI has no float16 or bfloat16 arithmetic).
	ErrUnsupported = fmt.Errorf("cbaseline: not supported by the library: %w", comm.ErrUnsupported)
)

// check rejects arguments before any C call.
func (a Args) check(c Coll, times []float64) error {
	switch {
	case c < AllReduce || c > Bandwidth:
		return fmt.Errorf("cbaseline: invalid operation %d: %w", int(c), comm.ErrInvalidArgument)
	case !a.DType.Valid():
		return fmt.Errorf("cbaseline: invalid dtype %v: %w", a.DType, comm.ErrInvalidArgument)
	case c.reduces() && !a.Op.Valid():
		return fmt.Errorf("cbaseline: invalid reduction %v: %w", a.Op, comm.ErrInvalidArgument)
	case a.Count < 0 || a.Count > 1<<31-1:
		return fmt.Errorf("cbaseline: count %d out of range: %w", a.Count, comm.ErrInvalidArgument)
	case a.Count > 0 && (a.Send == 0 || a.Recv == 0):
		return fmt.Errorf("cbaseline: %v of %d elements with a nil buffer: %w", c, a.Count, comm.ErrInvalidArgument)
	case a.Warmup < 0 || len(times) > 1<<31-1:
		return fmt.Errorf("cbaseline: %d warm-up and %d timed iterations: %w", a.Warmup, len(times), comm.ErrInvalidArgument)
	case c == Bandwidth && a.Window < 1:
		return fmt.Errorf("cbaseline: bandwidth window %d: %w", a.Window, comm.ErrInvalidArgument)
	case (c == PingPong || c == Bandwidth) && a.Peer < 0:
		return fmt.Errorf("cbaseline: peer %d: %w", a.Peer, comm.ErrInvalidArgument)
	}
	return nil
}

// checkNCCLRank rejects a rank, rank count or GPU ordinal before NCCL sees it.
func checkNCCLRank(ordinal, nranks, rank int) error {
	if ordinal < 0 || nranks < 1 || rank < 0 || rank >= nranks {
		return fmt.Errorf("cbaseline: NCCL rank %d of %d on GPU %d: %w", rank, nranks, ordinal, comm.ErrInvalidArgument)
	}
	return nil
}
