package conformance

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// Every rank makes the same bad calls, each bad on every rank (a buffer only
// the root reads is never the bad one), so a backend that checks arguments
// before it communicates rejects them all without any rank waiting.

var badInputCase = testCase{name: "BadInput", body: (*rank).badInputs}

var closedCase = testCase{name: "Closed", body: (*rank).closedCalls}

// args are the arguments of one call of any Communicator method.
type args struct {
	op         driver.Operation
	send, recv devmem.Buffer
	count      int
	dt         comm.DType
	red        comm.Op
	root       int // the peer of Send and Recv
	stream     *devmem.Stream
	p2p        []comm.P2P
}

func (a args) call(c comm.Communicator) error {
	switch a.op {
	case driver.OpSend:
		return c.Send(a.send, a.count, a.dt, a.root, a.stream)
	case driver.OpRecv:
		return c.Recv(a.recv, a.count, a.dt, a.root, a.stream)
	case driver.OpGroupP2P:
		return c.GroupP2P(a.p2p, a.stream)
	case driver.OpBarrier:
		return c.Barrier(a.stream)
	}
	return invoke(c, a.op, a.send, a.recv, a.count, a.dt, a.red, a.root, a.stream)
}

// rejects checks that err wraps want inside a *comm.Error naming this rank.
func (r *rank) rejects(what string, want, err error) {
	var ce *comm.Error
	switch {
	case err == nil:
		r.failf("%s: accepted; want an error wrapping %q", what, want)
	case !errors.Is(err, want):
		r.failf("%s: %v; want an error wrapping %q", what, err, want)
	case !errors.As(err, &ce):
		r.failf("%s: %v is a %T, not a *comm.Error", what, err, err)
	case ce.Backend != r.c.Backend() || ce.Rank != r.c.Rank():
		r.failf("%s: error names backend %q rank %d; want %q rank %d", what, ce.Backend, ce.Rank, r.c.Backend(), r.c.Rank())
	}
}

// try makes a call that must fail with want and change none of bufs.
func (r *rank) try(what string, want error, a args, bufs ...*dbuf) {
	r.rejects(what, want, a.call(r.c))
	for _, b := range bufs {
		if got := r.verify(what+" (must change nothing)", b); got != nil {
			b.want = got // report each change once, not again at every later call
		}
	}
}

// fullLengths are the elements of send and recv a rank passes to op when
// count is n, and whether only the root checks them.
func fullLengths(op driver.Operation, p, n int) (send, recv int, sendRootOnly, recvRootOnly bool) {
	return collSpec{op: op, count: n, root: -1}.lengths(p, 0)
}

func (r *rank) badInputs() {
	c := r.c
	p, me := c.Size(), c.Rank()
	right, left := (me+1)%p, (me+p-1)%p
	const n, es, dt = 8, 4, comm.Int32
	nb := n * es
	call := r.next()
	own := func(j int) []byte { return r.input(call, j, "", randomBytes(p*nb)) }
	a := r.newBuf("a", own(me))
	b := r.newBuf("b", poisoned(p*nb))
	other := devmem.NewHostDevice()
	o := r.newBufOn(other, "buffer on another device", poisoned(p*nb))
	bufs := []*dbuf{a, b, o}
	A := func(size int) devmem.Buffer { return r.view(a, 0, size) }
	B := func(size int) devmem.Buffer { return r.view(b, 0, size) }
	O := func(size int) devmem.Buffer { return r.view(o, 0, size) }
	var freed devmem.Buffer
	if f, err := devmem.AllocSlice[byte](c.Device(), p*nb); r.ok("alloc", err) {
		freed = f.Buffer()
		r.ok("free", f.Free())
	}
	otherStream, err := other.NewStream()
	r.ok("NewStream on another device", err)
	dead := r.stream()
	if dead != nil {
		r.ok("Destroy", dead.Destroy())
	}
	inv := comm.ErrInvalidArgument

	// Each buffer a call checks on every rank, made bad four ways, in an
	// order every rank shares.
	type badBuf struct {
		why string
		buf devmem.Buffer
	}
	badBufs := func(size int, good devmem.Buffer) []badBuf {
		small, err := good.Slice(0, size-1)
		r.ok("view", err)
		return []badBuf{{"too small", small}, {"on another device", O(size)}, {"freed", freed}, {"absent", devmem.Buffer{}}}
	}
	for _, op := range collectives {
		sendN, recvN, sendRootOnly, recvRootOnly := fullLengths(op, p, n)
		good := args{op: op, send: A(sendN * es), recv: B(recvN * es), count: n, dt: dt, red: comm.Sum, root: p - 1}
		with := func(what string, change func(*args)) {
			x := good
			change(&x)
			r.try(fmt.Sprintf("%v with %s", op, what), inv, x, bufs...)
		}
		with("count -1", func(x *args) { x.count = -1 })
		// Bytes of one block that overflow, and bytes of p blocks that
		// wrap (to 0 for p = 4): both must be refused, not sliced.
		with("count MaxInt/2", func(x *args) { x.count = math.MaxInt / 2 })
		with("count 2^60", func(x *args) { x.count = 1 << 60 })
		for _, d := range []comm.DType{0, -1, comm.Float64 + 1} {
			with(fmt.Sprintf("dtype %d", int(d)), func(x *args) { x.dt = d })
		}
		if reduces(op) {
			for _, red := range []comm.Op{0, -1, comm.Avg + 1} {
				with(fmt.Sprintf("op %d", int(red)), func(x *args) { x.red = red })
			}
		}
		if rooted(op) {
			for _, root := range []int{-1, p} {
				with(fmt.Sprintf("root %d", root), func(x *args) { x.root = root })
			}
		}
		with("a stream of another device", func(x *args) { x.stream = otherStream })
		with("a destroyed stream", func(x *args) { x.stream = dead })
		if !sendRootOnly {
			for _, bad := range badBufs(sendN*es, good.send) {
				with("send "+bad.why, func(x *args) { x.send = bad.buf })
			}
		}
		if !recvRootOnly {
			for _, bad := range badBufs(recvN*es, good.recv) {
				with("recv "+bad.why, func(x *args) { x.recv = bad.buf })
			}
		}
		// Overlaps no operation allows: a shift of one element, a block
		// other than this rank's, or AllToAll in place.
		shifted := func(d *dbuf, size int) devmem.Buffer { return r.view(d, es, size) }
		switch op {
		case driver.OpAllReduce:
			with("recv overlapping send", func(x *args) { x.recv = shifted(a, nb) })
		case driver.OpAllGather:
			with("send inside recv off its block", func(x *args) { x.send = shifted(b, nb) })
		case driver.OpReduceScatter:
			with("recv inside send off its block", func(x *args) { x.recv = shifted(a, nb) })
		case driver.OpAllToAll:
			with("recv the same as send", func(x *args) { x.recv = x.send })
		}
	}

	for _, op := range []driver.Operation{driver.OpSend, driver.OpRecv} {
		// Matched on every rank, so that if a backend wrongly accepts one
		// the transfers still pair up and the case fails instead of hanging.
		good := args{op: op, send: A(nb), recv: B(nb), count: n, dt: dt, root: right}
		if op == driver.OpRecv {
			good.root = left
		}
		with := func(what string, change func(*args)) {
			x := good
			change(&x)
			r.try(fmt.Sprintf("%v with %s", op, what), inv, x, bufs...)
		}
		with("count -1", func(x *args) { x.count = -1 })
		for _, d := range []comm.DType{0, comm.Float64 + 1} {
			with(fmt.Sprintf("dtype %d", int(d)), func(x *args) { x.dt = d })
		}
		for _, peer := range []int{-1, p, me} {
			with(fmt.Sprintf("peer %d", peer), func(x *args) { x.root = peer })
		}
		with("a stream of another device", func(x *args) { x.stream = otherStream })
		with("a destroyed stream", func(x *args) { x.stream = dead })
		for _, bad := range badBufs(nb, A(nb)) {
			with("buffer "+bad.why, func(x *args) { x.send, x.recv = bad.buf, bad.buf })
		}
	}

	entries := func() []comm.P2P {
		return []comm.P2P{comm.SendTo(right, A(nb), n, dt), comm.RecvFrom(left, B(nb), n, dt)}
	}
	for i, kind := range []string{"send", "receive"} {
		with := func(what string, change func(*comm.P2P)) {
			e := entries()
			change(&e[i])
			r.try(fmt.Sprintf("GroupP2P with a %s entry of %s", kind, what), inv, args{op: driver.OpGroupP2P, p2p: e}, bufs...)
		}
		with("count -1", func(e *comm.P2P) { e.Count = -1 })
		with("dtype 0", func(e *comm.P2P) { e.DType = 0 })
		for _, peer := range []int{-1, p} {
			with(fmt.Sprintf("peer %d", peer), func(e *comm.P2P) { e.Peer = peer })
		}
		for _, k := range []comm.P2PKind{0, comm.RecvKind + 1} {
			with(fmt.Sprintf("kind %d", int(k)), func(e *comm.P2P) { e.Kind = k })
		}
		for _, bad := range badBufs(nb, A(nb)) {
			with("buffer "+bad.why, func(e *comm.P2P) { e.Buf = bad.buf })
		}
	}
	// A receive that shares bytes with a send of its group: the group's
	// order is not set, so each would return nil with wrong data.
	// Matched on every rank, as above.
	for _, g := range []struct {
		what string
		ops  []comm.P2P
	}{
		{"an exchange in place (send and receive of one buffer)",
			[]comm.P2P{comm.SendTo(right, A(nb), n, dt), comm.RecvFrom(left, A(nb), n, dt)}},
		{"a receive one element into its send",
			[]comm.P2P{comm.SendTo(right, A(nb), n, dt), comm.RecvFrom(left, r.view(a, es, nb), n, dt)}},
		{"a receive into its second send",
			[]comm.P2P{comm.SendTo(left, B(nb), n, dt), comm.RecvFrom(left, A(nb), n, dt), comm.SendTo(right, A(nb), n, dt)}},
		// Transfers to the rank itself pair up inside the group: a receive
		// from self with no send would wait for ever (nothing else can
		// send it), a send to self with no receive leave a message behind.
		{"a receive from itself without its send",
			[]comm.P2P{comm.SendTo(right, A(nb), n, dt), comm.RecvFrom(left, B(nb), n, dt), comm.RecvFrom(me, B(nb), n, dt)}},
		{"a send to itself without its receive",
			[]comm.P2P{comm.SendTo(right, A(nb), n, dt), comm.RecvFrom(left, B(nb), n, dt), comm.SendTo(me, A(nb), n, dt)}},
		{"a send to itself of another count than its receive",
			[]comm.P2P{comm.SendTo(me, A(nb), n, dt), comm.RecvFrom(me, B(nb), n-1, dt)}},
	} {
		r.try("GroupP2P with "+g.what, inv, args{op: driver.OpGroupP2P, p2p: g.ops}, bufs...)
	}
	for i, s := range []*devmem.Stream{otherStream, dead} {
		what := []string{"a stream of another device", "a destroyed stream"}[i]
		r.try("GroupP2P with "+what, inv, args{op: driver.OpGroupP2P, p2p: entries(), stream: s}, bufs...)
		r.try("Barrier with "+what, inv, args{op: driver.OpBarrier, stream: s}, bufs...)
	}
	sub, err := c.Split(-2, 0)
	r.rejects("Split with color -2", inv, err)
	if sub != nil {
		r.failf("Split with color -2 returned a communicator")
		sub.Close()
	}
	// One rank's bad color fails every rank's Split, naming it, where the
	// others would wait for it.
	color := 0
	if me == p-1 {
		color = -3
	}
	sub, err = c.Split(color, me)
	what := fmt.Sprintf("Split beside rank %d's color -3", p-1)
	r.rejects(what, inv, err)
	if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("rank %d: color -3", p-1)) {
		r.failf("%s: %v does not name rank %d's color", what, err, p-1)
	}
	if sub != nil {
		r.failf("%s returned a communicator", what)
		sub.Close()
	}

	// A rejected send left queued would be received here instead.
	r.ok("GroupP2P after the bad calls", c.GroupP2P(entries(), nil))
	b.expect(0, own(left)[:nb])
	r.verify("GroupP2P after the bad calls", b)
	r.ok("Barrier after the bad calls", c.Barrier(nil))

	// Drain the other stream first: work a faulty backend queued there
	// must not outlive the buffers it uses.
	if otherStream != nil {
		r.ok("Destroy", otherStream.Destroy())
	}
	r.free(a, b, o)
	if st := other.Stats(); st != (devmem.Stats{}) {
		r.failf("the other device leaked: %+v", st)
	}
}

// closedCalls closes the communicator, then calls every method: each must
// fail with ErrClosed and change no memory.
func (r *rank) closedCalls() {
	c := r.c
	p, me := c.Size(), c.Rank()
	right, left := (me+1)%p, (me+p-1)%p
	const n, es, dt = 8, 4, comm.Int32
	nb := n * es
	call := r.next()
	a := r.newBuf("a", r.input(call, me, "", randomBytes(p*nb)))
	b := r.newBuf("b", poisoned(p*nb))
	r.ok("Close", c.Close())
	r.closed = true
	closed := comm.ErrClosed
	for _, op := range collectives {
		sendN, recvN, _, _ := fullLengths(op, p, n)
		x := args{op: op, send: r.view(a, 0, sendN*es), recv: r.view(b, 0, recvN*es), count: n, dt: dt, red: comm.Sum, root: 0}
		r.try(op.String()+" after Close", closed, x, a, b)
	}
	if p > 1 {
		r.try("Send after Close", closed, args{op: driver.OpSend, send: r.view(a, 0, nb), count: n, dt: dt, root: right}, a, b)
		r.try("Recv after Close", closed, args{op: driver.OpRecv, recv: r.view(b, 0, nb), count: n, dt: dt, root: left}, a, b)
	}
	p2p := []comm.P2P{comm.SendTo(right, r.view(a, 0, nb), n, dt), comm.RecvFrom(left, r.view(b, 0, nb), n, dt)}
	r.try("GroupP2P after Close", closed, args{op: driver.OpGroupP2P, p2p: p2p}, a, b)
	r.try("Barrier after Close", closed, args{op: driver.OpBarrier}, a, b)
	sub, err := c.Split(0, 0)
	r.rejects("Split after Close", closed, err)
	if sub != nil {
		r.failf("Split after Close returned a communicator")
		sub.Close()
	}
	r.free(a, b)
}
