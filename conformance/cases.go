package conformance

import (
	"fmt"
	"slices"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// allCases lists every case in the order they run.
func allCases() []testCase {
	cs := []testCase{identityCase}
	for _, op := range collectives {
		cs = append(cs, gridCase(op))
	}
	cs = append(cs, countsCase, rootsCase, streamCase, sendRecvCase, groupP2PCase, splitCase, badInputCase, closedCase)
	cs = append(cs, nodeSharedCase, sendThenCloseCase, freedHandleCase, viewOverlapCase)
	cs = append(cs, primeCases()...)
	return append(cs, largeCases()...)
}

// int32s is the native bytes of v.
func int32s(v ...int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		store(b, 4, i, uint64(uint32(x)))
	}
	return b
}

// identityCase checks what each rank says of itself against what the
// others see: an AllGather of (rank, size) must list every rank once.
var identityCase = testCase{name: "Identity", body: func(r *rank) {
	c := r.c
	p, me := c.Size(), c.Rank()
	if p < 1 || me < 0 || me >= p {
		r.failf("rank %d of size %d", me, p)
	}
	if ls, lr := c.LocalSize(), c.LocalRank(); ls < 1 || ls > p || lr < 0 || lr >= ls {
		r.failf("local rank %d of local size %d in a group of %d", lr, ls, p)
	}
	if c.Backend() == "" {
		r.failf("Backend() is empty")
	}
	sb := r.newBuf("send", int32s(int32(me), int32(p)))
	rb := r.newBuf("recv", poisoned(8*p))
	r.ok("AllGather of ranks", c.AllGather(r.view(sb, 0, 8), r.view(rb, 0, 8*p), 2, comm.Int32, nil))
	for j := range p {
		rb.expect(8*j, int32s(int32(j), int32(p)))
	}
	r.verify("AllGather of (rank, size)", rb)
	r.free(sb, rb)
	r.ok("Barrier", c.Barrier(nil))
	s := r.stream()
	r.ok("Barrier on a stream", c.Barrier(s))
	r.finish("Barrier on a stream", s)
}}

// gatedBackend queues stream work without ever waiting on the host for
// earlier work, so the stream case may hold its stream shut until every
// operation is queued: one that does not wait for earlier work then reads
// poison, deterministically. Backends that may synchronise inside a call
// (host-staged MPI) would deadlock on the gate, so only this one gets it;
// on GPUs kernels are asynchronous anyway.
const gatedBackend = "local"

// streamCase queues a chain of operations on one stream, each reading what
// the one before wrote, and synchronises only at the end.
var streamCase = testCase{name: "Stream", body: func(r *rank) {
	c := r.c
	p, me := c.Size(), c.Rank()
	right, left := (me+1)%p, (me+p-1)%p
	const n, es = 257, 4
	call := r.next()
	x := func(j int) []byte { return r.input(call, j, "", randomBytes(n*es)) }
	xs := r.newBuf("x", x(me))
	a := r.newBuf("a", poisoned(n*es))
	g := r.newBuf("g", poisoned(p*n*es))
	h := r.newBuf("h", poisoned(n*es))
	k := r.newBuf("k", poisoned(n*es))
	m := r.newBuf("m", poisoned(n*es))
	out := r.newBuf("out", poisoned(n*es))
	v := func(b *dbuf, size int) devmem.Buffer { return r.view(b, 0, size) }

	s := r.stream()
	var gate chan struct{}
	if s != nil && c.Backend() == gatedBackend && c.Device().Kind() == devmem.Host {
		gate = make(chan struct{})
		r.ok("HostFunc gate", s.HostFunc(func() error { <-gate; return nil }))
	}
	r.ok("Copy x to a", devmem.Copy(v(a, n*es), v(xs, n*es), s))
	r.ok("AllGather a to g", c.AllGather(v(a, n*es), v(g, p*n*es), n, comm.Int32, s))
	r.ok("ReduceScatter g to h", c.ReduceScatter(v(g, p*n*es), v(h, n*es), n, comm.Int32, comm.Sum, s))
	r.ok("Broadcast h to k", c.Broadcast(v(h, n*es), v(k, n*es), n, comm.Int32, p-1, s))
	r.ok("AllReduce k in place", c.AllReduce(v(k, n*es), v(k, n*es), n, comm.Int32, comm.Sum, s))
	r.ok("GroupP2P k to m", c.GroupP2P([]comm.P2P{
		comm.SendTo(right, v(k, n*es), n, comm.Int32),
		comm.RecvFrom(left, v(m, n*es), n, comm.Int32),
	}, s))
	r.ok("Copy m to out", devmem.Copy(v(out, n*es), v(m, n*es), s))
	if gate != nil {
		close(gate)
	}
	r.finish("stream of 7 operations", s)

	// g = x_0..x_{p-1}; h = p·x_me; k = p·(p·x_{p-1}), in int32 arithmetic; m = out = k.
	scale := func(b []byte, f int32) []byte {
		o := make([]byte, len(b))
		for i := range n {
			store(o, es, i, uint64(uint32(int32(uint32(load(b, es, i)))*f)))
		}
		return o
	}
	a.expect(0, x(me))
	for j := range p {
		g.expect(j*n*es, x(j))
	}
	h.expect(0, scale(x(me), int32(p)))
	final := scale(scale(x(p-1), int32(p)), int32(p))
	for _, b := range []*dbuf{k, m, out} {
		b.expect(0, final)
	}
	for _, b := range []*dbuf{xs, a, g, h, k, m, out} {
		r.verify("stream of AllGather, ReduceScatter, Broadcast, AllReduce, GroupP2P", b)
	}
	r.free(xs, a, g, h, k, m, out)
}}

// sendRecvCase moves data between pairs: a ring, messages of several types
// kept in order between two ranks other than 0, and a stream-ordered pair.
var sendRecvCase = testCase{name: "SendRecv", minRanks: 2, body: func(r *rank) {
	c := r.c
	p, me := c.Size(), c.Rank()
	r.ring(comm.Float32, 1021)
	r.ring(comm.Int8, 1)

	msgs := []struct {
		dt comm.DType
		n  int
	}{{comm.Int8, 1}, {comm.Float64, 1021}, {comm.Int32, 0}, {comm.BFloat16, 7}}
	from, to := p-1, p-2
	call := r.next()
	for i, msg := range msgs {
		nb := msg.n * msg.dt.Size()
		data := r.input(call, from, fmt.Sprint(i), randomBytes(nb))
		what := fmt.Sprintf("message %d (%d %v) from rank %d to %d", i, msg.n, msg.dt, from, to)
		switch {
		case me == from && msg.n == 0:
			r.ok(what+": Send", c.Send(devmem.Buffer{}, 0, msg.dt, to, nil))
		case me == to && msg.n == 0:
			r.ok(what+": Recv", c.Recv(devmem.Buffer{}, 0, msg.dt, from, nil))
		case me == from:
			b := r.newBuf("send", data)
			r.ok(what+": Send", c.Send(r.view(b, 0, nb), msg.n, msg.dt, to, nil))
			r.verify(what, b)
			r.free(b)
		case me == to:
			b := r.newBuf("recv", poisoned(nb))
			r.ok(what+": Recv", c.Recv(r.view(b, 0, nb), msg.n, msg.dt, from, nil))
			b.expect(0, data)
			r.verify(what, b)
			r.free(b)
		}
	}

	// Rank 0 sends what a stream copy wrote; rank p-1 copies what it
	// received; neither waits on the host in between.
	const n, es = 333, 8
	from, to = 0, p-1
	call = r.next()
	data := r.input(call, from, "", randomBytes(n*es))
	what := fmt.Sprintf("stream-ordered Copy, Send, Recv, Copy of %d uint64 from rank %d to %d", n, from, to)
	if me == from || me == to {
		s := r.stream()
		var stage *dbuf
		if me == from {
			stage = r.newBuf("stage", data)
		} else {
			stage = r.newBuf("out", poisoned(n*es))
		}
		buf := r.newBuf("buf", poisoned(n*es))
		if me == from {
			r.ok(what+": Copy", devmem.Copy(r.view(buf, 0, n*es), r.view(stage, 0, n*es), s))
			r.ok(what+": Send", c.Send(r.view(buf, 0, n*es), n, comm.Uint64, to, s))
		} else {
			r.ok(what+": Recv", c.Recv(r.view(buf, 0, n*es), n, comm.Uint64, from, s))
			r.ok(what+": Copy", devmem.Copy(r.view(stage, 0, n*es), r.view(buf, 0, n*es), s))
		}
		r.finish(what, s)
		buf.expect(0, data)
		stage.expect(0, data)
		r.verify(what, buf)
		r.verify(what, stage)
		r.free(buf, stage)
	}
}}

// groupP2PCase is a halo exchange: every rank sends to and receives from
// both neighbours in one GroupP2P (itself, in a group of one).
var groupP2PCase = testCase{name: "GroupP2P", body: func(r *rank) {
	for _, t := range []struct {
		dt     comm.DType
		n      int
		stream bool
	}{{comm.Float32, 1021, false}, {comm.Uint64, 1, true}, {comm.Int8, 0, true}} {
		r.halo(t.dt, t.n, t.stream)
	}
}}

func (r *rank) halo(dt comm.DType, n int, onStream bool) {
	c := r.c
	p, me, es := c.Size(), c.Rank(), dt.Size()
	right, left := (me+1)%p, (me+p-1)%p
	call := r.next()
	in := func(j int, tag string) []byte { return r.input(call, j, tag, randomBytes(n*es)) }
	toR, toL := r.newBuf("to right", in(me, "R")), r.newBuf("to left", in(me, "L"))
	fromL, fromR := r.newBuf("from left", poisoned(n*es)), r.newBuf("from right", poisoned(n*es))
	s := r.streamIf(onStream)
	what := fmt.Sprintf("GroupP2P halo exchange of %d %v", n, dt)
	if onStream {
		what += " on a stream"
	}
	// Two sends to one peer (p = 2, or p = 1) arrive in the order sent.
	r.ok(what, c.GroupP2P([]comm.P2P{
		comm.SendTo(right, r.view(toR, 0, n*es), n, dt),
		comm.SendTo(left, r.view(toL, 0, n*es), n, dt),
		comm.RecvFrom(left, r.view(fromL, 0, n*es), n, dt),
		comm.RecvFrom(right, r.view(fromR, 0, n*es), n, dt),
	}, s))
	r.finish(what, s)
	fromL.expect(0, in(left, "R"))
	fromR.expect(0, in(right, "L"))
	for _, b := range []*dbuf{toR, toL, fromL, fromR} {
		r.verify(what, b)
	}
	r.free(toR, toL, fromL, fromR)
}

// splitCase splits by parity with keys reversed, by halves, and with one
// rank left out, and runs collectives on the pieces.
var splitCase = testCase{name: "Split", body: func(r *rank) {
	c := r.c
	p, me := c.Size(), c.Rank()
	var members []int
	for j := p - 1; j >= 0; j-- {
		if j%2 == me%2 {
			members = append(members, j)
		}
	}
	sub, err := c.Split(me%2, p-me)
	r.checkSub("Split(rank%2, size-rank)", sub, err, members)

	members = members[:0]
	for j := range p {
		if j/2 == me/2 {
			members = append(members, j)
		}
	}
	sub, err = c.Split(me/2, 0)
	r.checkSub("Split(rank/2, 0)", sub, err, members)

	color := 3
	if me == 0 {
		color = comm.Undefined
	}
	sub, err = c.Split(color, me)
	if me == 0 {
		if err != nil || sub != nil {
			r.failf("Split(Undefined, 0) gave %v, %v; want nil, nil", sub, err)
			if sub != nil {
				sub.Close()
			}
		}
		return
	}
	members = members[:0]
	for j := 1; j < p; j++ {
		members = append(members, j)
	}
	r.checkSub("Split(3, rank) with rank 0 Undefined", sub, err, members)
}}

// checkSub checks that sub numbers its members (old ranks, in new rank
// order) as it should, runs an AllReduce and an AllGather of old ranks on
// it, and closes it.
func (r *rank) checkSub(what string, sub comm.Communicator, err error, members []int) {
	if err != nil || sub == nil {
		r.failf("%s: got %v, %v; want a communicator", what, sub, err)
		return
	}
	defer func() { r.ok(what+": Close", sub.Close()) }()
	me := r.c.Rank()
	want := slices.Index(members, me)
	if sub.Rank() != want || sub.Size() != len(members) || sub.Backend() != r.c.Backend() {
		r.failf("%s: rank %d of %d on %q; want rank %d of %d (members %v) on %q",
			what, sub.Rank(), sub.Size(), sub.Backend(), want, len(members), members, r.c.Backend())
	}
	if sub.Device() == nil {
		r.failf("%s: subcommunicator has no device", what)
		return
	}
	// A rank of its own for the subcommunicator; its inputs are named apart.
	sr := &rank{c: sub, env: &caseEnv{name: r.env.name + "/" + what, short: r.env.short, held: 1}}
	q := len(members)
	sum := 0
	for _, m := range members {
		sum += m
	}
	sb := sr.newBuf("send", int32s(int32(me), 1))
	rb := sr.newBuf("recv", poisoned(8))
	sr.ok("AllReduce", sub.AllReduce(sr.view(sb, 0, 8), sr.view(rb, 0, 8), 2, comm.Int32, comm.Sum, nil))
	rb.expect(0, int32s(int32(sum), int32(q)))
	sr.verify("AllReduce of old ranks", rb)
	sr.free(rb)
	rb = sr.newBuf("recv", poisoned(8*q))
	sr.ok("AllGather", sub.AllGather(sr.view(sb, 0, 8), sr.view(rb, 0, 8*q), 2, comm.Int32, nil))
	for j, m := range members {
		rb.expect(8*j, int32s(int32(m), 1))
	}
	sr.verify("AllGather of old ranks", rb)
	sr.free(sb, rb)
	sr.ok("Barrier", sub.Barrier(nil))
	for _, f := range sr.fails {
		r.failf("%s: %s", what, f)
	}
}
