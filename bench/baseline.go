package bench

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/gpucomm/gpucomm/bench/cbaseline"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// Baseline times an operation issued from a C loop straight to the library
// underneath a backend, on buffers like gpucomm's, so that a report can show
// gpucomm's overhead against it.
type Baseline interface {
	// Name says what is timed, for the report ("MPI_Allreduce ... from C").
	Name() string
	// Time runs t.Warmup untimed iterations of op and then len(times) timed
	// ones, writing each one's seconds to times. Every rank calls it for a
	// collective; only ranks 0 and 1 for a point-to-point test, where rank 0
	// gets the times (one-way latency, or one message's share of a window).
	Time(op Operation, t Task, times []float64) error
	// Close releases what the baseline holds.
	Close() error
}

// Task is one timing for a Baseline.
type Task struct {
	// Send and Recv are gpucomm's buffers for this size, on the
	// communicator's device; a baseline uses them or copies of them.
	Send, Recv devmem.Buffer
	Shape      Shape
	DType      comm.DType
	Op         comm.Op
	Root       int
	Rank       int
	Ranks      int
	Window     int
	Warmup     int
	// Wall is true when gpucomm was timed by wall clock with a barrier
	// before every iteration; the baseline does the same.
	Wall bool
}

// BaselineFunc opens one backend's baseline for a communicator of that
// backend. Every rank calls it, in step, as with a collective.
type BaselineFunc func(c comm.Communicator) (Baseline, error)

var (
	baselinesMu sync.Mutex
	baselines   = map[string]BaselineFunc{
		"mpi":       func(c comm.Communicator) (Baseline, error) { return newMPIBaseline(c, true) },
		"cudaaware": func(c comm.Communicator) (Baseline, error) { return newMPIBaseline(c, false) },
		"nccl":      newNCCLBaseline,
	}
)

// RegisterBaseline sets the baseline of the backend with the given name, as
// reported by Communicator.Backend; nil removes it.
func RegisterBaseline(backend string, f BaselineFunc) {
	baselinesMu.Lock()
	defer baselinesMu.Unlock()
	if f == nil {
		delete(baselines, backend)
		return
	}
	baselines[backend] = f
}

// BaselineBackends lists the backends that have a baseline.
func BaselineBackends() []string {
	baselinesMu.Lock()
	defer baselinesMu.Unlock()
	var names []string
	for n := range baselines {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// openBaseline finds and opens c's baseline. No baseline (the local
// backend has no library underneath) is (nil, nil).
func openBaseline(c comm.Communicator) (Baseline, error) {
	baselinesMu.Lock()
	f := baselines[c.Backend()]
	baselinesMu.Unlock()
	if f == nil {
		return nil, nil
	}
	return f(c)
}

// coll maps a bench operation to the C loop's.
func coll(op Operation) cbaseline.Coll {
	return map[Operation]cbaseline.Coll{
		AllReduce: cbaseline.AllReduce, AllGather: cbaseline.AllGather, ReduceScatter: cbaseline.ReduceScatter,
		Broadcast: cbaseline.Broadcast, Reduce: cbaseline.Reduce, AllToAll: cbaseline.AllToAll,
		PingPong: cbaseline.PingPong, Bandwidth: cbaseline.Bandwidth,
	}[op]
}

// cArgs are t's arguments for a C loop on the given addresses.
func cArgs(t Task, send, recv uintptr) cbaseline.Args {
	return cbaseline.Args{
		Send: send, Recv: recv, Count: t.Shape.Count, DType: t.DType, Op: t.Op, Root: t.Root,
		Peer: 1 - t.Rank, Initiator: t.Rank == 0, Window: t.Window, Warmup: t.Warmup, SyncEach: t.Wall,
	}
}

// mpiBaseline calls MPI on MPI_COMM_WORLD from C: on pinned host buffers
// for the host-staged backend (the plain host MPI it stages through), on
// gpucomm's own device buffers for the CUDA-aware one.
type mpiBaseline struct {
	host       bool
	dev        *devmem.Device
	send, recv devmem.Buffer // pinned, grown as sizes grow (host only)
}

func newMPIBaseline(c comm.Communicator, host bool) (Baseline, error) {
	if !cbaseline.MPIBuilt {
		return nil, cbaseline.ErrNotBuilt
	}
	if !cbaseline.MPIInitialized() {
		return nil, cbaseline.ErrNotInitialized
	}
	return &mpiBaseline{host: host, dev: c.Device()}, nil
}

func (m *mpiBaseline) Name() string {
	if m.host {
		return "MPI from C on pinned host buffers"
	}
	return "MPI from C on device buffers"
}

// grow makes *b a pinned buffer of at least n bytes.
func (m *mpiBaseline) grow(b *devmem.Buffer, n int) error {
	if !b.IsZero() && b.Len() >= n {
		return nil
	}
	if !b.IsZero() {
		if err := b.Free(); err != nil {
			return err
		}
		*b = devmem.Buffer{}
	}
	nb, err := m.dev.AllocPinned(max(n, 1))
	if err != nil {
		return err
	}
	*b = nb
	return nil
}

func (m *mpiBaseline) Time(op Operation, t Task, times []float64) error {
	send, recv := t.Send, t.Recv
	if m.host {
		if err := m.grow(&m.send, t.Send.Len()); err != nil {
			return err
		}
		if err := m.grow(&m.recv, t.Recv.Len()); err != nil {
			return err
		}
		// The same input as gpucomm's, so reductions see the same numbers.
		if err := devmem.CopyN(m.send, t.Send, t.Send.Len(), nil); err != nil {
			return err
		}
		send, recv = m.send, m.recv
	}
	return cbaseline.MPI(coll(op), cArgs(t, send.Addr(), recv.Addr()), times)
}

func (m *mpiBaseline) Close() error {
	var err error
	for _, b := range []devmem.Buffer{m.send, m.recv} {
		if !b.IsZero() {
			if e := b.Free(); e != nil && err == nil {
				err = e
			}
		}
	}
	m.send, m.recv = devmem.Buffer{}, devmem.Buffer{}
	return err
}

// ncclBaseline calls NCCL from C on a communicator and stream of its own,
// on gpucomm's device buffers.
type ncclBaseline struct {
	n          *cbaseline.NCCL
	nccl, cuda string // the files the C loop calls: the loaders' own, as the nccl backend's
}

// newNCCLBaseline makes the NCCL communicator: rank 0 makes the unique id
// and the gpucomm communicator carries it to every rank, with a flag byte
// first so that a failure on rank 0 fails every rank instead of hanging them.
func newNCCLBaseline(c comm.Communicator) (Baseline, error) {
	dev := c.Device()
	if dev.Kind() != devmem.CUDA {
		return nil, fmt.Errorf("the NCCL baseline needs a GPU, and this rank's device is %v: %w", dev, comm.ErrUnsupported)
	}
	msg := make([]byte, 1+cbaseline.NCCLIDSize)
	var idErr error
	if c.Rank() == 0 {
		id, err := cbaseline.NCCLUniqueID()
		if err != nil {
			idErr = err
		} else {
			msg[0] = 1
			copy(msg[1:], id[:])
		}
	}
	buf, err := dev.Alloc(len(msg))
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	if err := devmem.CopyFromHost(buf, msg, nil); err != nil {
		return nil, err
	}
	if err := c.Broadcast(buf, buf, len(msg), comm.Uint8, 0, nil); err != nil {
		return nil, err
	}
	if err := devmem.CopyToHost(msg, buf, nil); err != nil {
		return nil, err
	}
	if msg[0] != 1 {
		if idErr != nil {
			return nil, idErr
		}
		return nil, fmt.Errorf("rank 0 could not make an NCCL unique id")
	}
	var id [cbaseline.NCCLIDSize]byte
	copy(id[:], msg[1:])
	n, err := cbaseline.NewNCCL(dev.Ordinal(), c.Size(), c.Rank(), id)
	if err != nil {
		return nil, err
	}
	nFile, cFile, err := cbaseline.Libraries()
	if err != nil {
		return nil, errors.Join(err, n.Close())
	}
	return &ncclBaseline{n: n, nccl: nFile, cuda: cFile}, nil
}

// Name says which NCCL and driver files the loop calls, so that a report
// shows the baseline timed the library the backend loaded.
func (b *ncclBaseline) Name() string {
	return fmt.Sprintf("NCCL from C on device buffers (%s, %s)", b.nccl, b.cuda)
}

func (b *ncclBaseline) Time(op Operation, t Task, times []float64) error {
	return b.n.Run(coll(op), cArgs(t, t.Send.Addr(), t.Recv.Addr()), times)
}

func (b *ncclBaseline) Close() error { return b.n.Close() }
