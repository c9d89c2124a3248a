package driver

import (
	"fmt"
	"strings"

	"github.com/gpucomm/gpucomm/devmem"
)

// Engine is what a backend implements to get every data method of
// comm.Communicator from Front: how the bytes of one checked call move.
type Engine interface {
	// Usable returns nil when an operation may start, else why not: an
	// error wrapping ErrClosed once the communicator is closed, or the
	// failure that broke it. Front asks before it checks the arguments;
	// an engine that can be closed concurrently checks again where it
	// takes its own lock.
	Usable() error
	// Run runs a call whose arguments Front has checked: in stream order
	// on call.Stream (complete on return when the stream is nil). A
	// collective whose Count is 0 reaches Run only when Front's SkipEmpty
	// is off (the ranks must still meet, to compare signatures); Run then
	// skips it after the comparison (see Empty). Front makes whatever Run
	// returns an *Error of the operation.
	Run(call Call) error
}

// Limiter is an Engine that refuses some calls Validate accepts (a
// CUDA-aware MPI whose counts are C ints, say). Front calls Limit after
// Validate, before Run.
type Limiter interface {
	Limit(call Call) error
}

// Front is the one dispatcher of every backend: embedded in a backend's
// communicator, it gives it AllReduce, Reduce, Broadcast, AllGather,
// ReduceScatter, AllToAll, Gather, Scatter, Barrier, Send, Recv and
// GroupP2P. Each builds the Call, refuses it when the communicator is not
// usable or an argument is bad (before any memory is touched), skips a
// collective that moves nothing when the ranks need not meet for it, hands
// the rest to the Engine and makes every error an *Error naming backend,
// operation and rank. GroupP2P hands the engine its own copy of the
// transfer list, so the caller may reuse its slice at once.
type Front struct {
	eng       Engine
	limit     Limiter // eng, when it is one
	backend   string
	rank      int
	size      int
	dev       *devmem.Device
	skipEmpty bool
	rec       *Recorder    // the flight recorder; nil when recording is off
	flight    FlightRunner // eng, when it reports starts and ends
}

// FrontConfig describes the communicator a Front serves.
type FrontConfig struct {
	Backend    string
	Rank, Size int
	Device     *devmem.Device
	// SkipEmpty lets Front return at once from a collective of count 0
	// (Barrier aside): right when the ranks need not meet for it, that is
	// unless they compare signatures (GPUCOMM_DEBUG) or always meet.
	SkipEmpty bool
}

// NewFront makes the dispatcher of eng.
func NewFront(cfg FrontConfig, eng Engine) Front {
	f := Front{eng: eng, backend: cfg.Backend, rank: cfg.Rank, size: cfg.Size, dev: cfg.Device, skipEmpty: cfg.SkipEmpty}
	f.limit, _ = eng.(Limiter)
	f.flight, _ = eng.(FlightRunner)
	f.rec = newRecorder(cfg, f.flight != nil)
	return f
}

// Empty reports whether call is a collective that moves nothing (count 0,
// not a Barrier): every backend skips it, after the ranks compared
// signatures where they do.
func Empty(call Call) bool {
	switch call.Operation {
	case OpBarrier, OpSend, OpRecv, OpGroupP2P, OpSplit:
		return false
	}
	return call.Count == 0
}

// Check is what Front checks before Run: the communicator usable, the
// arguments valid, the engine's own limits. It touches no memory.
func (f *Front) Check(call Call) error {
	if err := f.eng.Usable(); err != nil {
		return Wrap(f.backend, call.Operation.String(), f.rank, err)
	}
	if err := call.Validate(f.rank, f.size, f.dev); err != nil {
		return Wrap(f.backend, call.Operation.String(), f.rank, err)
	}
	if f.limit != nil {
		if err := f.limit.Limit(call); err != nil {
			return Wrap(f.backend, call.Operation.String(), f.rank, err)
		}
	}
	return nil
}

// Do checks call and runs it on the engine, recording it when the flight
// recorder is on.
func (f *Front) Do(call Call) error {
	if err := f.Check(call); err != nil {
		return err
	}
	if f.rec != nil {
		return f.doRecorded(call)
	}
	if f.skipEmpty && Empty(call) {
		return nil
	}
	if err := f.eng.Run(call); err != nil {
		return Wrap(f.backend, call.Operation.String(), f.rank, err)
	}
	return nil
}

// doRecorded is Do's second half with the recorder on: the call is queued
// in the record before the engine sees it, and ended when it returns (a
// nil stream) or fails to enqueue; an engine that is a FlightRunner
// reports a stream-ordered call's start and end itself.
func (f *Front) doRecorded(call Call) error {
	fl := f.rec.queue(&call)
	if f.skipEmpty && Empty(call) {
		f.rec.skip(fl.seq)
		return nil
	}
	var err error
	if f.flight != nil {
		err = f.flight.RunFlight(call, fl)
	} else {
		err = f.eng.Run(call)
	}
	if err != nil {
		err = Wrap(f.backend, call.Operation.String(), f.rank, err)
	}
	if call.Stream == nil || err != nil {
		fl.Ended(err)
	}
	return err
}

// Errorf is the *Error of operation op on this communicator.
func (f *Front) Errorf(op Operation, sentinel error, format string, args ...any) error {
	return Errorf(f.backend, op.String(), f.rank, sentinel, format, args...)
}

// Wrap makes err an *Error of operation op on this communicator.
func (f *Front) Wrap(op Operation, err error) error {
	return Wrap(f.backend, op.String(), f.rank, err)
}

func (f *Front) AllReduce(send, recv devmem.Buffer, count int, dt DType, op Op, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpAllReduce, Send: send, Recv: recv, Count: count, DType: dt, Op: op, Stream: s})
}

func (f *Front) Reduce(send, recv devmem.Buffer, count int, dt DType, op Op, root int, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpReduce, Send: send, Recv: recv, Count: count, DType: dt, Op: op, Root: root, Stream: s})
}

func (f *Front) Broadcast(send, recv devmem.Buffer, count int, dt DType, root int, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpBroadcast, Send: send, Recv: recv, Count: count, DType: dt, Root: root, Stream: s})
}

func (f *Front) AllGather(send, recv devmem.Buffer, count int, dt DType, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpAllGather, Send: send, Recv: recv, Count: count, DType: dt, Stream: s})
}

func (f *Front) ReduceScatter(send, recv devmem.Buffer, count int, dt DType, op Op, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpReduceScatter, Send: send, Recv: recv, Count: count, DType: dt, Op: op, Stream: s})
}

func (f *Front) AllToAll(send, recv devmem.Buffer, count int, dt DType, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpAllToAll, Send: send, Recv: recv, Count: count, DType: dt, Stream: s})
}

func (f *Front) Gather(send, recv devmem.Buffer, count int, dt DType, root int, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpGather, Send: send, Recv: recv, Count: count, DType: dt, Root: root, Stream: s})
}

func (f *Front) Scatter(send, recv devmem.Buffer, count int, dt DType, root int, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpScatter, Send: send, Recv: recv, Count: count, DType: dt, Root: root, Stream: s})
}

func (f *Front) Barrier(s *devmem.Stream) error {
	return f.Do(Call{Operation: OpBarrier, Stream: s})
}

func (f *Front) Send(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpSend, Send: buf, Count: count, DType: dt, Root: peer, Stream: s})
}

func (f *Front) Recv(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpRecv, Recv: buf, Count: count, DType: dt, Root: peer, Stream: s})
}

func (f *Front) GroupP2P(ops []P2P, s *devmem.Stream) error {
	return f.Do(Call{Operation: OpGroupP2P, P2P: append([]P2P(nil), ops...), Stream: s})
}

// Transfers is the transfer list of a point-to-point call: one entry for a
// Send or a Recv (in one, which the caller may keep on its stack), the
// call's own list for a GroupP2P.
func Transfers(call Call, one *[1]P2P) []P2P {
	switch call.Operation {
	case OpSend:
		one[0] = SendTo(call.Root, call.Send, call.Count, call.DType)
	case OpRecv:
		one[0] = RecvFrom(call.Root, call.Recv, call.Count, call.DType)
	default:
		return call.P2P
	}
	return one[:]
}

// CompareSignatures checks that every rank called what this one did, from
// all ranks' signatures (Call.Signature) gathered in rank order; a
// difference is an error wrapping ErrMismatch that names the ranks and
// what each called.
func CompareSignatures(call Call, all [][]byte) error {
	want := call.Signature()
	var bad []string
	for r, got := range all {
		if string(got) != want {
			bad = append(bad, fmt.Sprintf("rank %d called %s", r, got))
		}
	}
	if bad != nil {
		return fmt.Errorf("this rank called %s but %s: %w", want, strings.Join(bad, "; "), ErrMismatch)
	}
	return nil
}
