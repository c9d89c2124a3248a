package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// Name is the backend's registered name.
const Name = "local"

func init() {
	comm.Register(Name, driver.Driver{
		Open: func(o comm.Options) (driver.Conn, error) {
			if err := CheckDevice(o.Device); err != nil {
				return nil, err
			}
			cs, err := newGroup(1, o)
			if err != nil {
				return nil, err
			}
			return cs[0], nil
		},
		Probe: func() comm.Verdict {
			return comm.Verdict{Usable: true, Reason: "in-process ranks on host devices; always available"}
		},
		InProcess: true,
	})
}

// CheckDevice says whether the local backend can run on the device spec
// names: "", "auto" and "host" give host devices; a GPU ("cuda", "cuda:N")
// is an error wrapping comm.ErrUnsupported and anything else one wrapping
// comm.ErrInvalidArgument, so that GPUCOMM_DEVICE=cuda never runs on the
// host device without a word.
func CheckDevice(spec string) error {
	if err := devmem.CheckSpec(spec); err != nil {
		return driver.Wrap(Name, "Open", -1, err)
	}
	if devmem.IsGPUSpec(spec) {
		return driver.Errorf(Name, "Open", -1, comm.ErrUnsupported,
			"device %q: the local backend runs on simulated host devices only; use device host or auto, or an MPI backend (mpi, cudaaware, nccl) for GPUs", spec)
	}
	return nil
}

// CheckDeviceSetting is CheckDevice of the device a program asks for: spec
// when it is not empty (a -device flag), else GPUCOMM_DEVICE, which the
// error then names. Programs that make groups with NewGroup call it first.
func CheckDeviceSetting(spec string) error {
	if spec != "" {
		return CheckDevice(spec)
	}
	v := os.Getenv("GPUCOMM_DEVICE")
	if err := CheckDevice(v); err != nil {
		return fmt.Errorf("GPUCOMM_DEVICE=%s: %w", v, err)
	}
	return nil
}

// NewGroup makes n communicators that talk to each other in this process,
// rank r at index r, each on a fresh host device. Options give the timeout
// (GPUCOMM_TIMEOUT by default); NewGroup refuses the options comm.Open
// refuses (a nil option, a negative timeout, a chunk size out of range)
// with an error wrapping comm.ErrInvalidArgument. A device given as an
// option must be a host device (CheckDevice); GPUCOMM_DEVICE, which
// chooses the device of the communicators a job opens (comm.Open), is
// checked for its spelling only, so that in-process test groups run under
// GPUCOMM_DEVICE=cuda too.
func NewGroup(n int, opts ...comm.Option) ([]comm.Communicator, error) {
	o, err := comm.DefaultOptions()
	if err != nil {
		return nil, err
	}
	o.Device = ""
	if err := comm.ApplyOptions(&o, opts...); err != nil {
		return nil, err
	}
	if err := CheckDevice(o.Device); err != nil {
		return nil, err
	}
	if err := checkOptions(o); err != nil {
		return nil, err
	}
	return newGroup(n, o)
}

// checkOptions refuses what comm.Open refuses of options on their own
// (comm.CheckOptions: a device spec that names no device,
// a negative timeout and a pipelining chunk outside MinChunkBytes to
// MaxChunkBytes, 0 being the default), with an error wrapping
// comm.ErrInvalidArgument: a group never takes options a job's Open would
// not. The local backend moves no chunks, but a program tried on local
// groups then opens the same options on the MPI backends.
func checkOptions(o comm.Options) error {
	return driver.Wrap(Name, "NewGroup", -1, comm.CheckOptions(o))
}

// MaxRanks is the most ranks one group holds: each is a goroutine and a
// device of this process, and a group of millions (a mistyped -np) took
// the machine's memory for minutes before anything said why.
const MaxRanks = 1 << 16

func newGroup(n int, o comm.Options) ([]comm.Communicator, error) {
	if n < 1 || n > MaxRanks {
		return nil, driver.Errorf(Name, "NewGroup", 0, comm.ErrInvalidArgument, "group of %d ranks (want 1 to %d)", n, MaxRanks)
	}
	devs := make([]*devmem.Device, n)
	for i := range devs {
		devs[i] = devmem.NewHostDevice()
	}
	return makeGroup(devs, o.Timeout, &job{aborted: make(chan struct{})}), nil
}

func makeGroup(devs []*devmem.Device, timeout time.Duration, j *job) []comm.Communicator {
	g := &group{n: len(devs), devs: devs, timeout: timeout, job: j, rounds: map[uint64]*round{}, links: map[[2]int]*link{},
		gone: make([]bool, len(devs)), goneCh: make(chan struct{}), closing: make([]chan struct{}, len(devs))}
	for i := range g.closing {
		g.closing[i] = make(chan struct{})
	}
	cs := make([]comm.Communicator, len(devs))
	for i, d := range devs {
		c := &Comm{g: g, rank: i, dev: d}
		c.opsDone = sync.NewCond(&c.mu)
		// The ranks of a group always meet, even for nothing: that is how
		// it finds a count that differs between them.
		c.front = driver.NewFront(driver.FrontConfig{Backend: Name, Rank: i, Size: len(devs), Device: d}, frontEngine{c})
		cs[i] = c
	}
	return cs
}

// job is what the groups of one NewGroup share, those Split from it
// included: whether a rank aborted it.
type job struct {
	once    sync.Once
	err     error         // why, written before aborted is closed
	aborted chan struct{} // closed by the first Abort
}

// abort fails the job's waiting and later operations with err (the first
// Abort's; later ones change nothing).
func (j *job) abort(err error) {
	j.once.Do(func() {
		j.err = err
		close(j.aborted)
	})
}

// abortErr is why the job was aborted; nil while it has not been.
func (j *job) abortErr() error {
	select {
	case <-j.aborted:
		return j.err
	default:
		return nil
	}
}

// group is what the ranks of one communicator share.
type group struct {
	n       int
	devs    []*devmem.Device
	timeout time.Duration
	job     *job
	mu      sync.Mutex
	rounds  map[uint64]*round // the k-th collective, while ranks meet in it
	links   map[[2]int]*link  // messages from rank a to rank b, in order
	// gone[r] is set once rank r's Close has waited for its operations:
	// it will never join a collective or send again. goneCh is closed and
	// replaced each time a rank goes, to wake the ranks waiting.
	gone   []bool
	goneCh chan struct{}
	// closing[r] is closed when rank r's Close begins: its waits stop.
	closing []chan struct{}
}

// round is one collective: every rank's call and input.
type round struct {
	calls   []driver.Call
	inputs  [][]byte
	arrived []bool
	count   int
	left    int
	done    chan struct{}
	err     error
	result  any // what the last rank computed for all (Split)
}

// Comm is one rank of a local group: a communicator comes from NewGroup,
// comm.Open or Split. A nil *Comm, or a Comm made otherwise (a zero
// Comm{}), is no communicator: each of its calls returns an error wrapping
// comm.ErrInvalidArgument, having done nothing; its Rank and LocalRank are
// -1, its Size and LocalSize 0, its Device nil, and its Abort does
// nothing.
type Comm struct {
	front  driver.Front // every data method, once the call is checked
	g      *group
	rank   int
	dev    *devmem.Device
	seq    atomic.Uint64
	closed atomic.Bool
	// mu guards ops, this rank's operations begun and not yet ended (queued
	// on a stream or running), which Close waits for; opsDone is
	// broadcast when ops falls to 0.
	mu      sync.Mutex
	ops     int
	opsDone *sync.Cond
}

var _ comm.Communicator = (*Comm)(nil)

// made says whether c is a communicator NewGroup, comm.Open or Split made.
func (c *Comm) made() bool { return c != nil && c.g != nil }

// SameGroup reports whether a and b are ranks of one group (of one
// NewGroup, or of one Split's colour): false when either is not a made
// *local.Comm. Code handed communicators to run together (bench.RunGroup)
// checks with it, since ranks of two groups would wait for each other for
// good.
func SameGroup(a, b comm.Communicator) bool {
	la, ok := a.(*Comm)
	lb, ok2 := b.(*Comm)
	return ok && ok2 && la.made() && lb.made() && la.g == lb.g
}

// notMade is the error of operation op of a nil or zero Comm.
func notMade(op string) error {
	return driver.Errorf(Name, op, -1, comm.ErrInvalidArgument,
		"a nil or zero *local.Comm is no communicator; make one with local.NewGroup, comm.Open or Split")
}

func (c *Comm) Rank() int {
	if !c.made() {
		return -1
	}
	return c.rank
}

func (c *Comm) Size() int {
	if !c.made() {
		return 0
	}
	return c.g.n
}

func (c *Comm) LocalRank() int  { return c.Rank() }
func (c *Comm) LocalSize() int  { return c.Size() }
func (c *Comm) Backend() string { return Name }

func (c *Comm) Device() *devmem.Device {
	if !c.made() {
		return nil
	}
	return c.dev
}

// The data methods are Front's (driver.Front), after the check that c is a
// communicator at all.

func (c *Comm) AllReduce(send, recv devmem.Buffer, count int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	if !c.made() {
		return notMade("AllReduce")
	}
	return c.front.AllReduce(send, recv, count, dt, op, s)
}

func (c *Comm) Reduce(send, recv devmem.Buffer, count int, dt comm.DType, op comm.Op, root int, s *devmem.Stream) error {
	if !c.made() {
		return notMade("Reduce")
	}
	return c.front.Reduce(send, recv, count, dt, op, root, s)
}

func (c *Comm) Broadcast(send, recv devmem.Buffer, count int, dt comm.DType, root int, s *devmem.Stream) error {
	if !c.made() {
		return notMade("Broadcast")
	}
	return c.front.Broadcast(send, recv, count, dt, root, s)
}

func (c *Comm) AllGather(send, recv devmem.Buffer, count int, dt comm.DType, s *devmem.Stream) error {
	if !c.made() {
		return notMade("AllGather")
	}
	return c.front.AllGather(send, recv, count, dt, s)
}

func (c *Comm) ReduceScatter(send, recv devmem.Buffer, count int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	if !c.made() {
		return notMade("ReduceScatter")
	}
	return c.front.ReduceScatter(send, recv, count, dt, op, s)
}

func (c *Comm) AllToAll(send, recv devmem.Buffer, count int, dt comm.DType, s *devmem.Stream) error {
	if !c.made() {
		return notMade("AllToAll")
	}
	return c.front.AllToAll(send, recv, count, dt, s)
}

func (c *Comm) Gather(send, recv devmem.Buffer, count int, dt comm.DType, root int, s *devmem.Stream) error {
	if !c.made() {
		return notMade("Gather")
	}
	return c.front.Gather(send, recv, count, dt, root, s)
}

func (c *Comm) Scatter(send, recv devmem.Buffer, count int, dt comm.DType, root int, s *devmem.Stream) error {
	if !c.made() {
		return notMade("Scatter")
	}
	return c.front.Scatter(send, recv, count, dt, root, s)
}

func (c *Comm) Barrier(s *devmem.Stream) error {
	if !c.made() {
		return notMade("Barrier")
	}
	return c.front.Barrier(s)
}

func (c *Comm) Send(buf devmem.Buffer, count int, dt comm.DType, peer int, s *devmem.Stream) error {
	if !c.made() {
		return notMade("Send")
	}
	return c.front.Send(buf, count, dt, peer, s)
}

func (c *Comm) Recv(buf devmem.Buffer, count int, dt comm.DType, peer int, s *devmem.Stream) error {
	if !c.made() {
		return notMade("Recv")
	}
	return c.front.Recv(buf, count, dt, peer, s)
}

// GroupP2P is Communicator's GroupP2P. A call whose receive met a send of
// another count or dtype fails with ErrMismatch, as a Recv does: no receive
// buffer of the call is written, and every message its receives matched is
// consumed (as an MPI receive consumes the message it matched when it
// fails), so the next receive from a rank gets the next message it sent.
// A call whose receive gets no message (timeout, abort, a Close) consumes
// none: the messages its other receives took stay queued, first, and no
// buffer is written. Its sends, eager, reach their ranks whatever becomes
// of its receives; its transfers to this rank itself move nothing when it
// fails.
func (c *Comm) GroupP2P(ops []comm.P2P, s *devmem.Stream) error {
	if !c.made() {
		return notMade("GroupP2P")
	}
	return c.front.GroupP2P(ops, s)
}

// Close marks the communicator closed: later calls, and this rank's calls
// still queued on a stream when they come to run, return ErrClosed, and
// the calls of this rank waiting for another rank stop waiting and return
// ErrClosed too (a collective this rank joined still ends for the others).
// Close then waits for this rank's calls that are moving data, so that none
// writes after it returns, and tells the other ranks that this one is gone:
// one waiting for it in a collective it never joined, or for a message it
// never sent, fails with ErrPeerClosed naming it, where it would wait for
// ever. Close never waits for another rank, and may be called from a
// stream's host function.
func (c *Comm) Close() error {
	if !c.made() {
		return notMade("Close")
	}
	c.mu.Lock()
	if !c.closed.CompareAndSwap(false, true) {
		c.mu.Unlock()
		return driver.Errorf(Name, "Close", c.rank, comm.ErrClosed, "closed twice")
	}
	close(c.g.closing[c.rank])
	for c.ops > 0 {
		c.opsDone.Wait()
	}
	c.mu.Unlock()
	c.g.mu.Lock()
	c.g.gone[c.rank] = true
	close(c.g.goneCh)
	c.g.goneCh = make(chan struct{})
	c.g.mu.Unlock()
	return nil
}

// begin counts a call of this rank as running, unless the communicator is
// closed; end counts it ended.
func (c *Comm) begin(op driver.Operation) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return c.fail(op, comm.ErrClosed, "communicator is closed")
	}
	c.ops++
	return nil
}

func (c *Comm) end() {
	c.mu.Lock()
	c.ops--
	if c.ops == 0 {
		c.opsDone.Broadcast()
	}
	c.mu.Unlock()
}

// queue runs task on s (now for a nil stream) as one call of this rank,
// counted as running while the task runs; a task that comes to run once
// the communicator is closed returns ErrClosed instead.
func (c *Comm) queue(op driver.Operation, s *devmem.Stream, task func() error) error {
	return s.HostFunc(func() error {
		if err := c.begin(op); err != nil {
			return err
		}
		defer c.end()
		return task()
	})
}

// usable refuses every call once the communicator is closed or its job
// aborted.
func (c *Comm) usable() error {
	if c.closed.Load() {
		return comm.ErrClosed
	}
	return c.g.job.abortErr()
}

// Abort gives up on the job (comm.Aborter): every rank's waiting and later
// operations, in this group and every group of the same NewGroup, fail
// with an error wrapping comm.ErrAborted and reason that names this rank
// (its rank in this communicator's group, and the group's size).
// The first Abort of a job decides the error; the communicators still need
// their Close.
func (c *Comm) Abort(reason error) {
	if !c.made() {
		return
	}
	if reason == nil {
		reason = errors.New("no reason given")
	}
	c.g.job.abort(fmt.Errorf("rank %d of %d aborted the job: %w (%w)", c.rank, c.g.n, reason, comm.ErrAborted))
}

// dispatch runs a call Front checked: a collective as one round of the group,
// transfers on the links between ranks.
func (c *Comm) dispatch(call driver.Call) error { return c.dispatchFlight(call, driver.Flight{}) }

// dispatchFlight is dispatch reporting to the flight recorder when the call's stream
// reaches it and when it ends.
func (c *Comm) dispatchFlight(call driver.Call, fl driver.Flight) error {
	switch call.Operation {
	case driver.OpSend, driver.OpRecv, driver.OpGroupP2P:
		var one [1]comm.P2P
		return c.p2p(call, driver.Transfers(call, &one), fl)
	}
	return c.collective(call, fl)
}

func (c *Comm) fail(op driver.Operation, sentinel error, format string, args ...any) error {
	return driver.Errorf(Name, op.String(), c.rank, sentinel, format, args...)
}

// collective queues the call on its stream as one round of the group.
func (c *Comm) collective(call driver.Call, fl driver.Flight) error {
	seq := c.seq.Add(1)
	return c.queue(call.Operation, call.Stream, func() error {
		fl.Started()
		err := driver.Wrap(Name, call.Operation.String(), c.rank, c.run(seq, call))
		fl.Ended(err)
		return err
	})
}

// bytesOf is the host view of a buffer (host devices always have one).
func bytesOf(b devmem.Buffer, n int) []byte {
	if n == 0 {
		return nil
	}
	v, _ := b.Bytes()
	return v[:n]
}

func (c *Comm) run(seq uint64, call driver.Call) error {
	n, size := call.Count*call.DType.Size(), c.g.n
	var in []byte
	switch call.Operation {
	case driver.OpAllReduce, driver.OpReduce, driver.OpAllGather, driver.OpGather:
		in = clone(bytesOf(call.Send, n))
	case driver.OpReduceScatter, driver.OpAllToAll:
		in = clone(bytesOf(call.Send, size*n))
	case driver.OpBroadcast:
		if c.rank == call.Root {
			in = clone(bytesOf(call.Send, n))
		}
	case driver.OpScatter:
		if c.rank == call.Root {
			in = clone(bytesOf(call.Send, size*n))
		}
	}
	r, err := c.g.meet(seq, c.rank, call, in, nil)
	if err != nil {
		return err
	}
	defer c.g.leave(seq, r)
	block := func(b []byte, j int) []byte { return b[j*n : (j+1)*n] }
	switch call.Operation {
	case driver.OpAllReduce:
		return reduceAll(call, r.inputs, bytesOf(call.Recv, n), nil)
	case driver.OpReduce:
		if c.rank == call.Root {
			return reduceAll(call, r.inputs, bytesOf(call.Recv, n), nil)
		}
	case driver.OpReduceScatter:
		return reduceAll(call, r.inputs, bytesOf(call.Recv, n), func(b []byte) []byte { return block(b, c.rank) })
	case driver.OpBroadcast:
		copy(bytesOf(call.Recv, n), r.inputs[call.Root])
	case driver.OpAllGather:
		out := bytesOf(call.Recv, size*n)
		for j, v := range r.inputs {
			copy(block(out, j), v)
		}
	case driver.OpGather:
		if c.rank == call.Root {
			out := bytesOf(call.Recv, size*n)
			for j, v := range r.inputs {
				copy(block(out, j), v)
			}
		}
	case driver.OpScatter:
		copy(bytesOf(call.Recv, n), block(r.inputs[call.Root], c.rank))
	case driver.OpAllToAll:
		out := bytesOf(call.Recv, size*n)
		for j, v := range r.inputs {
			copy(block(out, j), block(v, c.rank))
		}
	}
	return nil
}

// reduceAll folds every rank's input in rank order into out.
func reduceAll(call driver.Call, inputs [][]byte, out []byte, pick func([]byte) []byte) error {
	if pick == nil {
		pick = func(b []byte) []byte { return b }
	}
	acc := clone(pick(inputs[0]))
	for _, v := range inputs[1:] {
		if err := driver.ReduceInto(call.DType, call.Op, acc, pick(v)); err != nil {
			return err
		}
	}
	if call.Op == comm.Avg {
		if err := driver.DivideInto(call.DType, acc, len(inputs)); err != nil {
			return err
		}
	}
	copy(out, acc)
	return nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// meet waits until every rank has reached collective seq, then returns the
// round. finish, when given, runs once, on the last rank to arrive.
func (g *group) meet(seq uint64, rank int, call driver.Call, in []byte, finish func(*round)) (*round, error) {
	g.mu.Lock()
	r := g.rounds[seq]
	if r == nil {
		r = &round{calls: make([]driver.Call, g.n), inputs: make([][]byte, g.n), arrived: make([]bool, g.n), left: g.n, done: make(chan struct{})}
		g.rounds[seq] = r
	}
	r.calls[rank], r.inputs[rank], r.arrived[rank] = call, in, true
	r.count++
	if r.count == g.n {
		r.err = mismatch(r.calls)
		if r.err == nil && finish != nil {
			finish(r)
		}
		close(r.done)
	}
	g.mu.Unlock()
	if err := g.wait(rank, r.done, func() string { return g.missing(r) }, func() error { return g.goneFrom(r) }); err != nil {
		return nil, fmt.Errorf("%v: %w", call.Signature(), err)
	}
	if r.err != nil {
		g.leave(seq, r)
		return nil, r.err
	}
	return r, nil
}

// leave lets the round go once every rank has read it.
func (g *group) leave(seq uint64, r *round) {
	g.mu.Lock()
	r.left--
	if r.left == 0 {
		delete(g.rounds, seq)
	}
	g.mu.Unlock()
}

func (g *group) missing(r *round) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ranks []string
	for i, ok := range r.arrived {
		if !ok {
			ranks = append(ranks, fmt.Sprint(i))
		}
	}
	return "ranks that never arrived: " + strings.Join(ranks, ", ")
}

// wait waits, for rank, for done, or until the timeout passes, a rank
// aborts the job, rank's own Close begins, or hopeless, asked each time a
// rank of the group goes (Close), says why done can never come, whichever
// is first; done wins when it is already closed.
func (g *group) wait(rank int, done <-chan struct{}, why func() string, hopeless func() error) error {
	select {
	case <-done:
		return nil
	default:
	}
	var expired <-chan time.Time
	if g.timeout > 0 {
		t := time.NewTimer(g.timeout)
		defer t.Stop()
		expired = t.C
	}
	for {
		g.mu.Lock()
		goneCh := g.goneCh
		g.mu.Unlock()
		if err := hopeless(); err != nil {
			select {
			case <-done: // it came after all
				return nil
			default:
				return err
			}
		}
		select {
		case <-done:
			return nil
		case <-g.job.aborted:
			return g.job.err
		case <-g.closing[rank]:
			return fmt.Errorf("this rank closed its communicator while the call waited (%s): %w", why(), comm.ErrClosed)
		case <-expired:
			return fmt.Errorf("no progress after %v; %s: %w", g.timeout, why(), comm.ErrTimeout)
		case <-goneCh:
		}
	}
}

// goneFrom says which ranks that round r still waits for have closed
// their communicators; nil when none has.
func (g *group) goneFrom(r *round) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ranks []string
	for i, ok := range r.arrived {
		if !ok && g.gone[i] {
			ranks = append(ranks, fmt.Sprint(i))
		}
	}
	if ranks == nil {
		return nil
	}
	return fmt.Errorf("ranks that closed their communicators without joining it: %s: %w", strings.Join(ranks, ", "), ErrPeerClosed)
}

// ErrPeerClosed is wrapped by the error of a call that waited for a rank
// that closed its communicator without joining the collective or sending
// the message; it wraps comm.ErrClosed.
var ErrPeerClosed = fmt.Errorf("a rank it waited for closed its communicator: %w", comm.ErrClosed)

// isGone reports whether rank r has closed its communicator.
func (g *group) isGone(r int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gone[r]
}

// mismatch names the ranks whose call differs from rank 0's.
func mismatch(calls []driver.Call) error {
	want := calls[0].Signature()
	var bad []string
	for i, c := range calls[1:] {
		if got := c.Signature(); got != want {
			bad = append(bad, fmt.Sprintf("rank %d called %s", i+1, got))
		}
	}
	if bad == nil {
		return nil
	}
	return fmt.Errorf("rank 0 called %s but %s: %w", want, strings.Join(bad, "; "), comm.ErrMismatch)
}

// Split is collective over the group and runs now, not on a stream.
func (c *Comm) Split(color, key int) (comm.Communicator, error) {
	if !c.made() {
		return nil, notMade("Split")
	}
	call := driver.Call{Operation: driver.OpSplit}
	if err := c.front.Check(call); err != nil {
		return nil, err
	}
	// A bad color or key (as the MPI backends judge them) still joins the
	// round, so that every rank fails, naming it, where the others would
	// wait for it.
	in := []byte(fmt.Sprintf("%d %d", color, key))
	if why := driver.SplitRefusal(color, key); why != "" {
		in = []byte("bad " + why)
	}
	if err := c.begin(driver.OpSplit); err != nil {
		return nil, err
	}
	defer c.end()
	seq := c.seq.Add(1)
	type member struct{ color, key, rank int }
	type result map[int][]comm.Communicator // new communicators by old rank's color, in new-rank order
	var members []member
	finish := func(r *round) {
		why := make([][]byte, len(r.inputs))
		for rank, b := range r.inputs {
			if w, ok := bytes.CutPrefix(b, []byte("bad ")); ok {
				why[rank] = w
			}
		}
		if err := driver.SplitRefusals(why); err != nil {
			r.result = err
			return
		}
		members = members[:0]
		for rank, b := range r.inputs {
			var m member
			fmt.Sscanf(string(b), "%d %d", &m.color, &m.key)
			m.rank = rank
			members = append(members, m)
		}
		sort.Slice(members, func(i, j int) bool {
			a, b := members[i], members[j]
			if a.color != b.color {
				return a.color < b.color
			}
			if a.key != b.key {
				return a.key < b.key
			}
			return a.rank < b.rank
		})
		out := result{}
		for i := 0; i < len(members); {
			j := i
			for j < len(members) && members[j].color == members[i].color {
				j++
			}
			if members[i].color != comm.Undefined {
				devs := make([]*devmem.Device, 0, j-i)
				for _, m := range members[i:j] {
					devs = append(devs, c.g.devs[m.rank])
				}
				cs := makeGroup(devs, c.g.timeout, c.g.job)
				byRank := make([]comm.Communicator, c.g.n)
				for k, m := range members[i:j] {
					byRank[m.rank] = cs[k]
				}
				out[members[i].color] = byRank
			}
			i = j
		}
		r.result = out
	}
	r, err := c.g.meet(seq, c.rank, call, in, finish)
	if err != nil {
		return nil, driver.Wrap(Name, "Split", c.rank, err)
	}
	defer c.g.leave(seq, r)
	if err, ok := r.result.(error); ok {
		return nil, driver.Wrap(Name, "Split", c.rank, err)
	}
	if color == comm.Undefined {
		return nil, nil
	}
	return r.result.(result)[color][c.rank], nil
}

// frontEngine is the communicator as driver.Front's Engine: the methods Front
// calls stay off the communicator's own exported API, so that no program
// can run a call past Front's checks.
type frontEngine struct{ c *Comm }

func (e frontEngine) Usable() error              { return e.c.usable() }
func (e frontEngine) Run(call driver.Call) error { return e.c.dispatch(call) }
func (e frontEngine) RunFlight(call driver.Call, fl driver.Flight) error {
	return e.c.dispatchFlight(call, fl)
}

var _ comm.Aborter = (*Comm)(nil)
