package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"github.com/gpucomm/gpucomm/devmem"
)

// The flight recorder: every communicator whose Front was made while
// recording is on (GPUCOMM_TRACE_DIR or GPUCOMM_TRACE_SIGNAL set) keeps its
// last TraceDepth operations, each with its sequence number, operation,
// element type, count, root or peer, stream, the times it was queued,
// started and ended, and its state. On a timeout, on the signal
// GPUCOMM_TRACE_SIGNAL names, or when the program calls WriteTraces, each
// rank writes its record as JSON into the trace directory, one file per
// communicator and rank; "gpucomm trace DIR" merges them and names the
// first operation where the ranks diverge. With recording off Front does
// one nil check per operation and nothing else.

// TraceDepth is how many operations a communicator's recorder keeps.
const TraceDepth = 1024

// Operation states in a trace.
const (
	StateQueued  = "queued"  // handed to the backend; its start is not (yet) reported
	StateStarted = "started" // running: the ranks may be waiting in it
	StateDone    = "done"
	StateFailed  = "failed"
	StateSkipped = "skipped" // a collective of nothing, returned at once
)

// traceEntry is one operation in the ring; strings are made only when it
// is written out, so recording allocates nothing. Every field but end is
// written and read under the recorder's lock; end is the one word the end of
// an operation writes without it (see endWord).
type traceEntry struct {
	seq, coll       uint64
	op              Operation
	dtype           DType
	reduce          Op
	count           int
	root            int
	transfers       int
	stream          uintptr
	queued, started int64
	endedLong       int64 // the end, where end holds endLong
	skipped         bool
	err             error
	end             atomic.Uint64
}

// The end word of an entry: who ended it and when, written with one
// compare-and-swap and no lock, so that an operation costs the recorder two
// clock reads, one lock at its queueing and one atomic at its end (on the
// H200 machine an atomic costs about 16 ns and a lock and unlock twice
// that). Its high endTagBits are the low bits of the ending operation's
// sequence number: a ring slot is reused every TraceDepth operations, and
// the tag says which of them ended (0 in the whole word: none). Its low
// bits are the end in clock units since the operation was queued, plus 1;
// an end later than the bits hold (endLong: about 23 s on a 3 GHz counter)
// is kept in the entry's endedLong under the lock instead.
const (
	endTagBits  = 28
	endTimeBits = 64 - endTagBits
	endTimeMask = 1<<endTimeBits - 1
	endTagMask  = 1<<endTagBits - 1
	endLong     = endTimeMask
)

func endWord(seq uint64, since int64) uint64 {
	return (seq&endTagMask)<<endTimeBits | uint64(since)&endTimeMask
}

// endOf is the end the word w says seq had (0: not ended; seq's slot may
// hold another operation's end).
func (e *traceEntry) endOf(seq uint64, w uint64) int64 {
	if w == 0 || w>>endTimeBits != seq&endTagMask {
		return 0
	}
	if d := w & endTimeMask; d != endLong {
		return e.queued + int64(d) - 1
	}
	return e.endedLong
}

// newer reports whether tag a belongs to a later operation than tag b (both
// taken modulo 1<<endTagBits; operations ending more than half that apart
// are out of the ring anyway).
func newer(a, b uint64) bool {
	d := (a - b) & endTagMask
	return d != 0 && d < 1<<(endTagBits-1)
}

// Recorder is the flight recorder of one communicator. Front feeds it; an
// engine that runs calls on streams reports their start and end through
// the Flight it is given (FlightRunner). Its methods are safe for
// concurrent use.
type Recorder struct {
	id, backend      string
	rank, size       int
	dir              string
	streamEvents     bool // the engine reports starts and ends of stream-ordered calls
	mu               sync.Mutex
	ring             []traceEntry
	next, collective uint64 // the last sequence and collective numbers given
}

// Flight is one recorded operation, for the engine that runs it: Started
// when it begins to move data (its stream reached it), Ended when it has
// finished. The zero Flight (recording off) does nothing, so an engine
// calls both without a check.
type Flight struct {
	r      *Recorder
	seq    uint64
	queued int64 // in the recorder's clock
}

// FlightRunner is an Engine that reports when a stream-ordered call starts
// and ends: Front calls RunFlight instead of Run while recording is on.
// Front itself records a nil-stream call's start and end, and the end of a
// call Run refused.
type FlightRunner interface {
	RunFlight(call Call, f Flight) error
}

// Seq is the operation's sequence number on its communicator (0 when not
// recorded).
func (f Flight) Seq() uint64 { return f.seq }

// Started records that the operation began.
func (f Flight) Started() {
	if f.r != nil {
		f.r.started(f.seq)
	}
}

// Ended records that the operation finished with err (nil: done). A
// timeout makes every recorder of the process write its record.
func (f Flight) Ended(err error) {
	if f.r != nil {
		f.r.ended(f.seq, f.queued, err)
	}
}

// streamID is a stream's identity in the record (0: none).
func streamID(s *devmem.Stream) uintptr { return uintptr(unsafe.Pointer(s)) }

// queue records a call Front is about to hand to the engine; a nil-stream
// call starts at once. Each entry is written in place, under the lock: on
// an uncontended lock that costs less than the atomics of a lock-free ring.
func (r *Recorder) queue(call *Call) Flight {
	t := now()
	r.mu.Lock()
	r.next++
	seq := r.next
	e := &r.ring[seq%uint64(len(r.ring))]
	// Field by field: end is not the queue's to write (a late end of the
	// slot's previous operation may still land there; its tag tells).
	e.seq, e.coll, e.op, e.dtype, e.reduce, e.count, e.root = seq, 0, call.Operation, call.DType, 0, call.Count, -1
	e.transfers, e.stream, e.queued, e.started, e.endedLong, e.skipped, e.err = 0, streamID(call.Stream), t, 0, 0, false, nil
	switch call.Operation {
	case OpSend, OpRecv, OpGroupP2P:
		e.transfers = len(call.P2P)
		if call.Operation != OpGroupP2P {
			e.root, e.transfers = call.Root, 1
		}
	default:
		r.collective++
		e.coll = r.collective
		if call.Rooted() {
			e.root = call.Root
		}
		if call.Reduces() {
			e.reduce = call.Op
		}
	}
	if call.Stream == nil {
		e.started = t
	}
	r.mu.Unlock()
	return Flight{r: r, seq: seq, queued: t}
}

// slot is seq's entry while the ring still holds it; r.mu is held.
func (r *Recorder) slot(seq uint64) *traceEntry {
	e := &r.ring[seq%uint64(len(r.ring))]
	if e.seq != seq {
		return nil
	}
	return e
}

func (r *Recorder) started(seq uint64) {
	t := now()
	r.mu.Lock()
	if e := r.slot(seq); e != nil && e.started == 0 && e.endOf(seq, e.end.Load()) == 0 {
		e.started = t
	}
	r.mu.Unlock()
}

// ended marks seq, queued at queued, ended with err, once. A success that
// fits the end word costs one compare-and-swap; a failure or a long
// operation takes the lock.
func (r *Recorder) ended(seq uint64, queued int64, err error) {
	t := now()
	if since := t - queued + 1; err == nil && since > 0 && since < endLong {
		r.endFast(seq, endWord(seq, since))
		return
	}
	r.mu.Lock()
	first := false
	if e := r.slot(seq); e != nil {
		w := e.end.Load()
		if e.endOf(seq, w) == 0 {
			since := t - e.queued + 1
			if since <= 0 || since >= endLong {
				e.endedLong, since = t, endLong
			}
			// Under the lock, so a snapshot sees the end and its error
			// together; a lock-free end can still race in: then it was first.
			if e.end.CompareAndSwap(w, endWord(seq, since)) {
				if e.started == 0 {
					e.started = t
				}
				e.err, first = err, true
			}
		}
	}
	r.mu.Unlock()
	if first && err != nil && errors.Is(err, ErrTimeout) {
		ReportTraces("timeout: " + err.Error())
	}
}

// endFast writes end word w into seq's slot unless that slot already says
// seq (or an operation after it, the slot having been reused) ended.
func (r *Recorder) endFast(seq uint64, w uint64) {
	e := &r.ring[seq%uint64(len(r.ring))]
	tag := seq & endTagMask
	for {
		old := e.end.Load()
		if old != 0 && (old>>endTimeBits == tag || newer(old>>endTimeBits, tag)) {
			return
		}
		if e.end.CompareAndSwap(old, w) {
			return
		}
	}
}

func (r *Recorder) skip(seq uint64) {
	r.mu.Lock()
	if e := r.slot(seq); e != nil {
		e.started, e.skipped = e.queued, true
		w := e.end.Load()
		if e.endOf(seq, w) == 0 {
			e.end.CompareAndSwap(w, endWord(seq, 1))
		}
	}
	r.mu.Unlock()
}

// TraceFile is what a rank writes for one communicator: the file format
// "gpucomm trace" reads. Times are Unix nanoseconds, 0 when not reached.
type TraceFile struct {
	// ID names the communicator across ranks: backend, size and the
	// number of communicators of that backend and size this rank made
	// before it ("mpi-n4-c0" is the first 4-rank mpi communicator).
	ID      string `json:"id"`
	Backend string `json:"backend"`
	Rank    int    `json:"rank"`
	Size    int    `json:"size"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Written int64  `json:"written"`
	Reason  string `json:"reason"`
	// StreamEvents says whether the backend reports when a stream-ordered
	// operation starts and ends; without it such an operation stays
	// "queued" in the record after it was handed to its stream.
	StreamEvents bool `json:"stream_events"`
	// Operations and Collectives count every operation this rank entered
	// (Seq of the last) and the collectives among them (Coll of the last).
	Operations  uint64       `json:"operations"`
	Collectives uint64       `json:"collectives"`
	Entries     []TraceEntry `json:"entries"` // oldest first; at most TraceDepth
}

// TraceEntry is one operation of a TraceFile.
type TraceEntry struct {
	Seq  uint64 `json:"seq"`
	Coll uint64 `json:"coll,omitempty"` // its number among the collectives; 0 for point-to-point
	Op   string `json:"op"`
	// DType and Count are the element type and count; a Barrier, a Split
	// and a GroupP2P have neither (no dtype, count 0): a GroupP2P's
	// transfers each have their own, and Transfers says how many.
	DType     string `json:"dtype,omitempty"`
	Count     int    `json:"count"`
	Reduce    string `json:"reduce,omitempty"`
	Root      *int   `json:"root,omitempty"` // the root of a rooted collective, the peer of a Send or Recv
	Transfers int    `json:"transfers,omitempty"`
	Stream    int    `json:"stream"` // 0: none (the call returned when done); else the stream's number in this file
	Queued    int64  `json:"queued"`
	Started   int64  `json:"started,omitempty"`
	Ended     int64  `json:"ended,omitempty"`
	State     string `json:"state"`
	Error     string `json:"error,omitempty"`
}

// Signature is what the ranks must agree on at a collective, written as
// Call's Signature writes the call the entry records.
func (e TraceEntry) Signature() string {
	root := e.Root
	if e.Coll == 0 {
		root = nil // a Send's or Recv's peer: Call's Signature leaves it out
	}
	return signature(e.Op, e.Count, e.DType, e.Reduce, root, e.Transfers)
}

// Snapshot is the record as a TraceFile.
func (r *Recorder) Snapshot(reason string) TraceFile {
	host, _ := os.Hostname()
	f := TraceFile{ID: r.id, Backend: r.backend, Rank: r.rank, Size: r.size, Host: host, PID: os.Getpid(),
		Written: time.Now().UnixNano(), Reason: reason, StreamEvents: r.streamEvents}
	streams := map[uintptr]int{}
	r.mu.Lock()
	defer r.mu.Unlock()
	f.Operations, f.Collectives = r.next, r.collective
	conv := toNanos()
	first := uint64(1)
	if r.next > uint64(len(r.ring)) {
		first = r.next - uint64(len(r.ring)) + 1
	}
	for seq := first; seq <= r.next; seq++ {
		e := &r.ring[seq%uint64(len(r.ring))]
		ended, started := e.endOf(seq, e.end.Load()), e.started
		if ended != 0 && started == 0 {
			started = ended // ended without a reported start
		}
		te := TraceEntry{Seq: seq, Coll: e.coll, Op: e.op.String(), Count: e.count, Transfers: e.transfers,
			Queued: unixTime(e.queued, conv), Started: unixTime(started, conv), Ended: unixTime(ended, conv)}
		if countsElements(e.op.String()) {
			te.DType = e.dtype.String()
		}
		if e.coll != 0 && (Call{Operation: e.op}).Reduces() {
			te.Reduce = e.reduce.String()
		}
		if e.root >= 0 {
			root := e.root
			te.Root = &root
		}
		if e.stream != 0 {
			if _, ok := streams[e.stream]; !ok {
				streams[e.stream] = len(streams) + 1
			}
			te.Stream = streams[e.stream]
		}
		switch {
		case e.skipped:
			te.State = StateSkipped
		case ended != 0 && e.err != nil:
			te.State, te.Error = StateFailed, e.err.Error()
		case ended != 0:
			te.State = StateDone
		case started != 0:
			te.State = StateStarted
		default:
			te.State = StateQueued
		}
		f.Entries = append(f.Entries, te)
	}
	return f
}

// FileName is the name of the file rank writes for communicator id.
func FileName(id string, rank int) string { return fmt.Sprintf("%s.rank%d.json", id, rank) }

// Write writes the record into dir (made if missing) as FileName(id,
// rank), replacing an earlier one, and returns the file's path.
func (r *Recorder) Write(dir, reason string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("trace: no directory to write to (set GPUCOMM_TRACE_DIR): %w", ErrInvalidArgument)
	}
	b, err := json.MarshalIndent(r.Snapshot(reason), "", " ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("trace: %w", err)
	}
	path := filepath.Join(dir, FileName(r.id, r.rank))
	tmp, err := os.CreateTemp(dir, ".trace-*")
	if err != nil {
		return "", fmt.Errorf("trace: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("trace: %w", err)
	}
	return path, nil
}

// The recorders of this process, for WriteTraces: weak, so a communicator
// the program dropped is not kept alive by its record.
var (
	recordersMu sync.Mutex
	recorders   []weak.Pointer[Recorder]
	commCounts  = map[string]int{} // communicators made, by backend, size and rank
)

// TraceSettings are where recording stands for the communicators made next.
type TraceSettings struct {
	On     bool
	Dir    string // where records are written
	Signal string // the signal that makes every rank write, as GPUCOMM_TRACE_SIGNAL names it
}

// TraceFromEnv reads GPUCOMM_TRACE_DIR and GPUCOMM_TRACE_SIGNAL: either
// turns recording on; records go to the directory, else to gpucomm-trace
// in the working directory (what gpucomm info says of them).
func TraceFromEnv() TraceSettings {
	s := TraceSettings{Dir: strings.TrimSpace(os.Getenv("GPUCOMM_TRACE_DIR")), Signal: strings.TrimSpace(os.Getenv("GPUCOMM_TRACE_SIGNAL"))}
	s.On = s.Dir != "" || s.Signal != ""
	if s.On && s.Dir == "" {
		s.Dir = "gpucomm-trace"
	}
	return s
}

// newRecorder makes the recorder of a communicator, or nil when recording
// is off. A bad GPUCOMM_TRACE_SIGNAL is reported on standard error once and
// leaves recording on without a signal.
func newRecorder(cfg FrontConfig, streamEvents bool) *Recorder {
	s := TraceFromEnv()
	if !s.On {
		return nil
	}
	key := fmt.Sprintf("%s-n%d", cfg.Backend, cfg.Size)
	r := &Recorder{backend: cfg.Backend, rank: cfg.Rank, size: cfg.Size, dir: s.Dir, streamEvents: streamEvents,
		ring: make([]traceEntry, TraceDepth)}
	recordersMu.Lock()
	k := key + "/" + strconv.Itoa(cfg.Rank)
	r.id = fmt.Sprintf("%s-c%d", key, commCounts[k])
	commCounts[k]++
	live := recorders[:0]
	for _, w := range recorders {
		if w.Value() != nil {
			live = append(live, w)
		}
	}
	recorders = append(live, weak.Make(r))
	recordersMu.Unlock()
	if s.Signal != "" {
		watchSignal(s.Signal)
	}
	return r
}

// WriteTraces makes every communicator of this process that records write
// its record into its trace directory (GPUCOMM_TRACE_DIR when it was made),
// giving reason in the files, and returns the paths written. With recording
// off it writes nothing and returns no error.
func WriteTraces(reason string) ([]string, error) {
	recordersMu.Lock()
	var rs []*Recorder
	for _, w := range recorders {
		if r := w.Value(); r != nil {
			rs = append(rs, r)
		}
	}
	recordersMu.Unlock()
	var paths []string
	var errs []error
	for _, r := range rs {
		p, err := r.Write(r.dir, reason)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		paths = append(paths, p)
	}
	return paths, errors.Join(errs...)
}

// Recorder is the communicator's flight recorder, nil when recording was
// off when it was made.
func (f *Front) Recorder() *Recorder { return f.rec }

// ID is the communicator's name in trace files.
func (r *Recorder) ID() string { return r.id }
