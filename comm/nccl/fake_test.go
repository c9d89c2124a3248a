package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

// The fakes below stand in for MPI and NCCL so that everything between them
// (the bootstrap, the argument checks, the plans, the watchdog) runs here,
// with several ranks in one process, on host devices.

// ---- MPI: a boot over the in-process backend ----

type fakeBoot struct {
	c       comm.Communicator
	aborted atomic.Int32 // abortJob's calls
}

// fakeWorld is n boots that talk to each other, rank r at index r.
func fakeWorld(n int) ([]boot, error) {
	cs, err := local.NewGroup(n)
	if err != nil {
		return nil, err
	}
	bs := make([]boot, n)
	for i, c := range cs {
		bs[i] = &fakeBoot{c: c}
	}
	return bs, nil
}

func (b *fakeBoot) rank() int { return b.c.Rank() }
func (b *fakeBoot) size() int { return b.c.Size() }

// exchange runs a collective of the local backend on a host buffer of n
// bytes that holds in at byte at, and returns the buffer's bytes afterwards.
func (b *fakeBoot) exchange(in []byte, at, n int, op func(buf devmem.Buffer) error) ([]byte, error) {
	buf, err := b.c.Device().Alloc(max(n, 1))
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	host, _ := buf.Bytes()
	copy(host[at:], in)
	if err := op(buf); err != nil {
		return nil, err
	}
	return append([]byte(nil), host[:n]...), nil
}

func (b *fakeBoot) allgather(p []byte) ([][]byte, error) {
	p8 := binary.LittleEndian.AppendUint64(nil, uint64(len(p)))
	size, me := b.size(), b.rank()
	// In place: this rank's input sits at its own block, as AllGather wants.
	lens, err := b.exchange(p8, 8*me, 8*size, func(buf devmem.Buffer) error {
		v, _ := buf.Slice(8*me, 8)
		return b.c.AllGather(v, buf, 8, comm.Uint8, nil)
	})
	if err != nil {
		return nil, err
	}
	longest := 0
	for r := range size {
		longest = max(longest, int(binary.LittleEndian.Uint64(lens[8*r:])))
	}
	all, err := b.exchange(p, longest*me, longest*size, func(buf devmem.Buffer) error {
		if longest == 0 {
			return nil
		}
		v, _ := buf.Slice(longest*me, longest)
		return b.c.AllGather(v, buf, longest, comm.Uint8, nil)
	})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, size)
	for r := range out {
		out[r] = all[r*longest : r*longest+int(binary.LittleEndian.Uint64(lens[8*r:]))]
	}
	return out, nil
}

func (b *fakeBoot) bcast(p []byte, root int) ([]byte, error) {
	n8, err := b.exchange(binary.LittleEndian.AppendUint64(nil, uint64(len(p))), 0, 8, func(buf devmem.Buffer) error {
		return b.c.Broadcast(buf, buf, 8, comm.Uint8, root, nil)
	})
	if err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint64(n8))
	return b.exchange(p, 0, n, func(buf devmem.Buffer) error {
		return b.c.Broadcast(buf, buf, n, comm.Uint8, root, nil)
	})
}

func (b *fakeBoot) split(color, key int) (boot, error) {
	sub, err := b.c.Split(color, key)
	if err != nil || sub == nil {
		return nil, err
	}
	return &fakeBoot{c: sub}, nil
}

func (b *fakeBoot) localRankSize() (int, int, error) { return b.c.Rank(), b.c.Size(), nil }

func (b *fakeBoot) free(bool) error { return b.c.Close() }

// abortJob stands in for MPI_Abort: it counts the call and aborts the
// in-process group, so that the other ranks' boot calls fail.
func (b *fakeBoot) abortJob() {
	b.aborted.Add(1)
	comm.Abort(b.c, errors.New("fake MPI_Abort"))
}

// ---- NCCL: engines that meet in this process ----

// fakeNet is one test's NCCL: the communicators it made, and what it saw.
type fakeNet struct {
	mu      sync.Mutex
	groups  map[[128]byte]*fakeGroup
	nextID  uint64
	misuses []string

	calls  atomic.Int64 // uniqueID and initRank: NCCL calls before a communicator exists
	ops    atomic.Int64 // operations queued on engines
	aborts atomic.Int64
	avgs   sync.Map // comm.DType -> *atomic.Int64: reductions with Avg that reached the engines
}

// avgCalls is how many reductions of dt with Avg reached the engines.
func (n *fakeNet) avgCalls(dt comm.DType) int64 {
	v, ok := n.avgs.Load(dt)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func newFakeNet() *fakeNet { return &fakeNet{groups: map[[128]byte]*fakeGroup{}} }

// misuse records a call NCCL would crash or hang on; tests assert none.
func (n *fakeNet) misuse(format string, args ...any) {
	n.mu.Lock()
	n.misuses = append(n.misuses, fmt.Sprintf(format, args...))
	n.mu.Unlock()
}

func (n *fakeNet) checkClean(t *testing.T) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.misuses {
		t.Errorf("NCCL misused: %s", m)
	}
}

// fakeLib is one rank's view of the fake NCCL, with faults to inject.
type fakeLib struct {
	net        *fakeNet
	badDevice  error    // checkDevice fails with it
	badID      error    // uniqueID fails with it
	device     [16]byte // when not zero, every device has this identity
	noSplit    bool     // the engines lack ncclCommSplit
	hangOps    bool     // the engines' calls block on the host until aborted
	asyncAfter int64    // the engines report an async error once this many ops were queued (0: never)
	version    int      // ncclGetVersion's code; 0 is fakeVersion
	fixedAvg   bool     // Avg of float64 is right at every count, unlike NCCL 2.28's
}

// fakeVersion is the release the fake claims by default: 2.28.3, whose
// float64 average the fake gets wrong as it does (see avgFault).
const fakeVersion = 22803

func (l *fakeLib) load() error      { return nil }
func (l *fakeLib) describe() string { return "fake NCCL" }

func (l *fakeLib) versionCode() int {
	if l.version == 0 {
		return fakeVersion
	}
	return l.version
}

// avgFault does to a reduction's result what NCCL 2.28.3 did on an H200:
// an average of more than a million float64 leaves garbage (about
// -2.5e-127) in its last 3 elements. Unless the fake is fixedAvg.
func (l *fakeLib) avgFault(out []byte, n int, dt comm.DType, op comm.Op) {
	if l.fixedAvg || op != comm.Avg || dt != comm.Float64 || n <= 1_000_000 || len(out) < n*8 {
		return
	}
	for i := n - 3; i < n; i++ {
		binary.NativeEndian.PutUint64(out[8*i:], math.Float64bits(-2.5e-127))
	}
}

// sawAvg counts a reduction with op that reached an engine.
func (l *fakeLib) sawAvg(dt comm.DType, op comm.Op) {
	if op != comm.Avg {
		return
	}
	v, _ := l.net.avgs.LoadOrStore(dt, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (l *fakeLib) checkDevice(d *devmem.Device) error { return l.badDevice }

func (l *fakeLib) deviceID(d *devmem.Device) [16]byte {
	if l.device != [16]byte{} {
		return l.device
	}
	return d.UUID()
}

func (l *fakeLib) uniqueID() ([128]byte, error) {
	l.net.calls.Add(1)
	if l.badID != nil {
		return [128]byte{}, l.badID
	}
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	l.net.nextID++
	var id [128]byte
	binary.LittleEndian.PutUint64(id[:], l.net.nextID)
	return id, nil
}

func (l *fakeLib) initRank(d *devmem.Device, nranks, rank int, id [128]byte) (engine, error) {
	l.net.calls.Add(1)
	l.net.mu.Lock()
	g := l.net.groups[id]
	if g == nil {
		g = newFakeGroup(nranks)
		l.net.groups[id] = g
	}
	l.net.mu.Unlock()
	if g.n != nranks || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("fake ncclCommInitRank: rank %d of %d in a group of %d: %w", rank, nranks, g.n, comm.ErrInvalidArgument)
	}
	e := &fakeEngine{lib: l, g: g, rank: rank, aborted: make(chan struct{})}
	g.join()
	return e, nil
}

// fakeGroup is what the ranks of one fake communicator share.
type fakeGroup struct {
	n      int
	mu     sync.Mutex
	joined int
	full   chan struct{}
	rounds map[uint64]*fakeRound
	links  map[[2]int]*fakeLink
}

func newFakeGroup(n int) *fakeGroup {
	return &fakeGroup{n: n, full: make(chan struct{}), rounds: map[uint64]*fakeRound{}, links: map[[2]int]*fakeLink{}}
}

// join blocks until every rank has joined, as ncclCommInitRank does.
func (g *fakeGroup) join() {
	g.mu.Lock()
	g.joined++
	if g.joined == g.n {
		close(g.full)
	}
	g.mu.Unlock()
	<-g.full
}

type fakeRound struct {
	sigs   []string
	inputs [][]byte
	count  int
	left   int
	done   chan struct{}
	result any
}

var errFakeAborted = errors.New("fake NCCL: communicator aborted")

// meet waits until every rank has brought its input to round seq, or the
// caller's communicator is aborted; finish runs once, on the last to come.
func (g *fakeGroup) meet(seq uint64, rank int, sig string, in []byte, abort <-chan struct{}, finish func(*fakeRound)) (*fakeRound, error) {
	g.mu.Lock()
	r := g.rounds[seq]
	if r == nil {
		r = &fakeRound{sigs: make([]string, g.n), inputs: make([][]byte, g.n), left: g.n, done: make(chan struct{})}
		g.rounds[seq] = r
	}
	r.sigs[rank], r.inputs[rank] = sig, in
	r.count++
	if r.count == g.n {
		if finish != nil {
			finish(r)
		}
		close(r.done)
	}
	g.mu.Unlock()
	select {
	case <-r.done:
	case <-abort:
		return nil, errFakeAborted
	}
	g.mu.Lock()
	r.left--
	if r.left == 0 {
		delete(g.rounds, seq)
	}
	g.mu.Unlock()
	for i, s := range r.sigs {
		if s != r.sigs[0] {
			return nil, fmt.Errorf("fake NCCL: rank 0 called %s, rank %d %s: %w", r.sigs[0], i, s, comm.ErrMismatch)
		}
	}
	return r, nil
}

type fakeLink struct {
	queue [][]byte
	ready chan struct{} // closed and replaced when a message arrives
}

func (g *fakeGroup) link(from, to int) *fakeLink {
	l := g.links[[2]int{from, to}]
	if l == nil {
		l = &fakeLink{ready: make(chan struct{})}
		g.links[[2]int{from, to}] = l
	}
	return l
}

func (g *fakeGroup) put(from, to int, m []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.link(from, to)
	l.queue = append(l.queue, m)
	close(l.ready)
	l.ready = make(chan struct{})
}

func (g *fakeGroup) take(from, to int, abort <-chan struct{}) ([]byte, error) {
	for {
		g.mu.Lock()
		l := g.link(from, to)
		if len(l.queue) > 0 {
			m := l.queue[0]
			l.queue = l.queue[1:]
			g.mu.Unlock()
			return m, nil
		}
		ready := l.ready
		g.mu.Unlock()
		select {
		case <-ready:
		case <-abort:
			return nil, errFakeAborted
		}
	}
}

// fakeEngine is one rank of a fake communicator.
type fakeEngine struct {
	lib       *fakeLib
	g         *fakeGroup
	rank      int
	seq       uint64 // the next collective; engine calls never overlap
	splits    uint64
	aborted   chan struct{}
	abortOnce sync.Once
	gone      atomic.Bool
	queued    atomic.Int64
}

// use checks a call on the handle: NCCL after abort or destroy is a crash.
func (e *fakeEngine) use(what string) {
	if e.gone.Load() {
		e.lib.net.misuse("rank %d: %s on a communicator that was aborted or destroyed", e.rank, what)
	}
}

func hostBytes(b devmem.Buffer, n int) []byte {
	if n == 0 || b.IsZero() {
		return nil
	}
	v, _ := b.Bytes()
	return v[:n]
}

// enqueue queues fn on s as a collective: it meets the other ranks' calls
// of the same round when s reaches it, as an NCCL kernel would.
func (e *fakeEngine) enqueue(what string, s *devmem.Stream, in func() []byte, out func(inputs [][]byte) error) error {
	e.use(what)
	e.lib.net.ops.Add(1)
	e.queued.Add(1)
	if e.lib.hangOps {
		<-e.aborted // stuck on the host, as NCCL is while it connects to a peer that never comes
		return errFakeAborted
	}
	seq := e.seq
	e.seq++
	return s.HostFunc(func() error {
		r, err := e.g.meet(seq, e.rank, what, in(), e.aborted, nil)
		if err != nil {
			return err
		}
		return out(r.inputs)
	})
}

// reduceInto folds every rank's block into out in rank order, as the local
// backend does; Avg divides at the end, truncating integers as NCCL does.
func reduceInto(out []byte, inputs [][]byte, off, n int, dt comm.DType, op comm.Op) error {
	acc := append([]byte(nil), inputs[0][off:off+n]...)
	for _, in := range inputs[1:] {
		if err := driver.ReduceInto(dt, op, acc, in[off:off+n]); err != nil {
			return err
		}
	}
	if op == comm.Avg {
		if err := driver.DivideInto(dt, acc, len(inputs)); err != nil {
			return err
		}
	}
	copy(out, acc)
	return nil
}

func (e *fakeEngine) allReduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	nb := n * dt.Size()
	e.lib.sawAvg(dt, op)
	return e.enqueue(fmt.Sprintf("AllReduce(%d %v %v)", n, dt, op), s,
		func() []byte { return append([]byte(nil), hostBytes(send, nb)...) },
		func(in [][]byte) error {
			err := reduceInto(hostBytes(recv, nb), in, 0, nb, dt, op)
			e.lib.avgFault(hostBytes(recv, nb), n, dt, op)
			return err
		})
}

func (e *fakeEngine) reduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, root int, s *devmem.Stream) error {
	nb := n * dt.Size()
	if e.rank != root && !recv.IsZero() {
		e.lib.net.misuse("rank %d: Reduce got a receive buffer on a rank that is not the root", e.rank)
	}
	e.lib.sawAvg(dt, op)
	return e.enqueue(fmt.Sprintf("Reduce(%d %v %v root %d)", n, dt, op, root), s,
		func() []byte { return append([]byte(nil), hostBytes(send, nb)...) },
		func(in [][]byte) error {
			if e.rank != root {
				return nil
			}
			err := reduceInto(hostBytes(recv, nb), in, 0, nb, dt, op)
			e.lib.avgFault(hostBytes(recv, nb), n, dt, op)
			return err
		})
}

func (e *fakeEngine) broadcast(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	nb := n * dt.Size()
	return e.enqueue(fmt.Sprintf("Broadcast(%d %v root %d)", n, dt, root), s,
		func() []byte { return append([]byte(nil), hostBytes(send, nb)...) },
		func(in [][]byte) error { copy(hostBytes(recv, nb), in[root]); return nil })
}

func (e *fakeEngine) allGather(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	nb := n * dt.Size()
	return e.enqueue(fmt.Sprintf("AllGather(%d %v)", n, dt), s,
		func() []byte { return append([]byte(nil), hostBytes(send, nb)...) },
		func(in [][]byte) error {
			out := hostBytes(recv, nb*e.g.n)
			for r, b := range in {
				copy(out[r*nb:], b)
			}
			return nil
		})
}

func (e *fakeEngine) reduceScatter(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	nb := n * dt.Size()
	e.lib.sawAvg(dt, op)
	return e.enqueue(fmt.Sprintf("ReduceScatter(%d %v %v)", n, dt, op), s,
		func() []byte { return append([]byte(nil), hostBytes(send, nb*e.g.n)...) },
		func(in [][]byte) error {
			err := reduceInto(hostBytes(recv, nb), in, e.rank*nb, nb, dt, op)
			e.lib.avgFault(hostBytes(recv, nb), n, dt, op)
			return err
		})
}

// group sends eagerly, then receives, when s reaches it.
func (e *fakeEngine) group(ops []comm.P2P, s *devmem.Stream) error {
	e.use("group")
	e.lib.net.ops.Add(1)
	e.queued.Add(1)
	for _, p := range ops {
		if p.Peer == e.rank {
			e.lib.net.misuse("rank %d: a transfer to self reached NCCL, which refuses unpaired ones", e.rank)
		}
		if p.Count == 0 {
			e.lib.net.misuse("rank %d: an empty transfer reached NCCL", e.rank)
		}
	}
	if e.lib.hangOps {
		<-e.aborted
		return errFakeAborted
	}
	return s.HostFunc(func() error {
		for _, p := range ops {
			if p.Kind == comm.SendKind {
				e.g.put(e.rank, p.Peer, append([]byte(nil), hostBytes(p.Buf, p.Count*p.DType.Size())...))
			}
		}
		for _, p := range ops {
			if p.Kind != comm.RecvKind {
				continue
			}
			m, err := e.g.take(p.Peer, e.rank, e.aborted)
			if err != nil {
				return err
			}
			if len(m) != p.Count*p.DType.Size() {
				return fmt.Errorf("fake NCCL: receive of %d bytes from rank %d met a send of %d: %w", p.Count*p.DType.Size(), p.Peer, len(m), comm.ErrMismatch)
			}
			copy(hostBytes(p.Buf, len(m)), m)
		}
		return nil
	})
}

func (e *fakeEngine) canSplit() bool { return !e.lib.noSplit }

// split meets the other ranks on the host, as ncclCommSplit does; the last
// to come makes the new groups.
func (e *fakeEngine) split(color, key int) (engine, error) {
	e.use("split")
	if e.lib.noSplit {
		e.lib.net.misuse("rank %d: ncclCommSplit called on an NCCL without it", e.rank)
	}
	seq := 1<<62 + e.splits
	e.splits++
	type member struct{ color, key, rank int }
	in := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(int64(color))), uint64(int64(key)))
	r, err := e.g.meet(seq, e.rank, "split", in, e.aborted, func(r *fakeRound) {
		var ms []member
		for rank, b := range r.inputs {
			ms = append(ms, member{int(int64(binary.LittleEndian.Uint64(b))), int(int64(binary.LittleEndian.Uint64(b[8:]))), rank})
		}
		sort.Slice(ms, func(i, j int) bool {
			a, b := ms[i], ms[j]
			if a.color != b.color {
				return a.color < b.color
			}
			if a.key != b.key {
				return a.key < b.key
			}
			return a.rank < b.rank
		})
		byRank := make([]*fakeEngine, len(r.inputs))
		for i := 0; i < len(ms); {
			j := i
			for j < len(ms) && ms[j].color == ms[i].color {
				j++
			}
			if ms[i].color != noColor {
				g := newFakeGroup(j - i)
				for k, m := range ms[i:j] {
					byRank[m.rank] = &fakeEngine{lib: e.lib, g: g, rank: k, aborted: make(chan struct{})}
				}
			}
			i = j
		}
		r.result = byRank
	})
	if err != nil {
		return nil, err
	}
	if mine := r.result.([]*fakeEngine)[e.rank]; mine != nil {
		mine.lib = e.lib // the last rank to come made it with its own
		return mine, nil
	}
	return nil, nil
}

func (e *fakeEngine) asyncError() error {
	e.use("asyncError")
	if n := e.lib.asyncAfter; n > 0 && e.queued.Load() >= n {
		return errors.New("fake NCCL: a peer went away")
	}
	return nil
}

func (e *fakeEngine) abort() error {
	if e.gone.Load() {
		e.lib.net.misuse("rank %d: abort of a communicator already aborted or destroyed", e.rank)
	}
	e.gone.Store(true)
	e.lib.net.aborts.Add(1)
	e.abortOnce.Do(func() { close(e.aborted) })
	return nil
}

func (e *fakeEngine) finalize() error {
	e.use("finalize")
	return nil
}

func (e *fakeEngine) destroy() error {
	e.use("destroy")
	e.gone.Store(true)
	e.abortOnce.Do(func() { close(e.aborted) }) // nothing of it may still wait
	return nil
}

// ---- opening fake communicators ----

// openFake opens n ranks over fake MPI and NCCL, each with libs(r) (nil:
// a plain fakeLib), and returns every rank's communicator and error.
func openFake(t testing.TB, net *fakeNet, n int, o comm.Options, libs func(rank int) *fakeLib) ([]*Comm, []error) {
	t.Helper()
	boots, err := fakeWorld(n)
	if err != nil {
		t.Fatal(err)
	}
	if o.Device == "" {
		o.Device = "host"
	}
	cs := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		lib := &fakeLib{net: net}
		if libs != nil {
			if l := libs(r); l != nil {
				lib = l
				lib.net = net
			}
		}
		wg.Go(func() { cs[r], errs[r] = open(o, func() (boot, error) { return boots[r], nil }, lib) })
	}
	wg.Wait()
	return cs, errs
}

// mustOpenFake is openFake for tests in which every rank must open.
func mustOpenFake(t testing.TB, net *fakeNet, n int, o comm.Options, libs func(rank int) *fakeLib) []*Comm {
	t.Helper()
	cs, errs := openFake(t, net, n, o, libs)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Open: %v", r, err)
		}
	}
	return cs
}

// closeAll closes every rank at once, as every rank of a job would.
func closeAll(t testing.TB, cs []*Comm) {
	t.Helper()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = c.Close() })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
	}
}
