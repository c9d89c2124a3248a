package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// Cases of memory shared between the processes of a node (node-shared
// buffers, IPC handles and views) and of a message outliving its sender's
// communicator.

var (
	nodeSharedCase    = testCase{name: "NodeShared", body: (*rank).nodeShared}
	sendThenCloseCase = testCase{name: "SendThenClose", minRanks: 2, body: (*rank).sendThenClose}
	freedHandleCase   = testCase{name: "IPC/FreedHandle", body: (*rank).freedHandle}
	viewOverlapCase   = testCase{name: "IPC/ViewOverlap", body: (*rank).viewOverlap}
)

// nodeOf returns a communicator of the ranks of this rank's node, split
// from c by host name whether or not c spans several nodes, and how to let
// go of it; every rank of c calls it.
func (r *rank) nodeOf() (comm.Communicator, func(), bool) {
	c := r.c
	node, err := comm.SplitNode(c)
	if !r.ok("SplitNode", err) || node == nil {
		return nil, nil, false
	}
	return node, func() { r.ok("Close of the node's communicator", node.Close()) }, true
}

// nodeShared makes two node-shared buffers, alive at once, and has the
// backend move data between them: an AllGather of every rank's part of u
// into its part of v, then a GroupP2P ring and a Send/Recv from u's parts
// into more of v. Every rank then reads both whole buffers element by
// element: each must hold what its ranks wrote and received.
func (r *rank) nodeShared() {
	node, done, ok := r.nodeOf()
	if !ok {
		return
	}
	defer done()
	if node.Size() != r.c.LocalSize() {
		r.failf("SplitNode gave %d ranks; the communicator says its node has %d (LocalSize)", node.Size(), r.c.LocalSize())
	}
	const n, es = 1021, 8 // elements of u a rank; float64
	const nb = n * es
	q, me := node.Size(), node.Rank()
	right, left := (me+1)%q, (me+q-1)%q
	vPart := (q + 2) * n // gathered u, the ring's block, the Send/Recv block
	call := r.next()
	in := func(j int) []byte { return r.input(call, j, "", randomBytes(nb)) }
	nc := comm.NodeComm(node)

	const what = "two node-shared buffers alive at once"
	u, err := devmem.NewNodeShared(nc, n, es)
	if !r.ok(what+": NewNodeShared of u", err) {
		return // NewNodeShared fails on every rank or on none
	}
	defer func() { r.ok(what+": Close of u", u.Close()) }()
	v, err := devmem.NewNodeShared(nc, int64(vPart), es)
	if !r.ok(what+": NewNodeShared of v, with u still open", err) {
		return
	}
	defer func() { r.ok(what+": Close of v", v.Close()) }()

	part := func(b devmem.Buffer, at, size int) devmem.Buffer {
		s, err := b.Slice(at, size)
		r.ok("view", err)
		return s
	}
	r.ok(what+": write this rank's part of u", devmem.CopyFromHost(u.Mine(), in(me), nil))
	r.ok(what+": poison this rank's part of v", devmem.CopyFromHost(v.Mine(), poisoned(vPart*es), nil))
	r.ok(what+": Barrier of u", u.Barrier())

	r.ok(what+": AllGather from u's part into v's", node.AllGather(u.Mine(), part(v.Mine(), 0, q*nb), n, comm.Float64, nil))
	r.ok(what+": GroupP2P ring from u's parts into v's", node.GroupP2P([]comm.P2P{
		comm.SendTo(right, u.Mine(), n, comm.Float64),
		comm.RecvFrom(left, part(v.Mine(), q*nb, nb), n, comm.Float64),
	}, nil))
	from, to := q-1, 0
	if q > 1 {
		switch me {
		case from:
			r.ok(what+": Send from u's part", node.Send(u.Mine(), n, comm.Float64, to, nil))
		case to:
			r.ok(what+": Recv into v's part", node.Recv(part(v.Mine(), (q+1)*nb, nb), n, comm.Float64, from, nil))
		}
	}
	r.ok(what+": Barrier of v", v.Barrier())

	// Every rank reads every rank's parts, written through other mappings.
	check := func(name string, b devmem.Buffer, want []byte) {
		got := make([]byte, len(want))
		if !r.ok(what+": read back "+name, devmem.CopyToHost(got, b, nil)) {
			return
		}
		if d := diffBytes(got, want, nil, len(want)); d != "" {
			r.failf("%s: %s, read by node rank %d, %s", what, name, me, d)
		}
	}
	wantU := make([]byte, 0, q*nb)
	for j := range q {
		wantU = append(wantU, in(j)...)
	}
	check("u", u.All(), wantU)
	wantV := make([]byte, 0, q*vPart*es)
	for j := range q {
		wantV = append(wantV, wantU...)         // the AllGather
		wantV = append(wantV, in((j+q-1)%q)...) // the ring
		if q > 1 && j == to {
			wantV = append(wantV, in(from)...) // the Send/Recv
		} else {
			wantV = append(wantV, poisoned(nb)...)
		}
	}
	check("v", v.All(), wantV)
	r.ok(what+": Barrier before Close", node.Barrier(nil)) // no rank closes while another reads
}

// sendThenClose: rank 0 sends messages to the last rank on no stream and
// on a stream, and closes its communicator as soon as the sends are
// complete; the receiver posts its receives only 500 ms later. A completed
// send is delivered whatever its sender does next, as MPI promises.
func (r *rank) sendThenClose() {
	c := r.c
	p, me := c.Size(), c.Rank()
	from, to := 0, p-1
	msgs := []struct {
		dt     comm.DType
		n      int
		stream bool
	}{{comm.Int8, 5, false}, {comm.Float64, 50_000, false}, {comm.Uint32, 100_003, true}} // 5 B, 400 KB, 400 KB
	call := r.next()
	data := func(i int) []byte {
		return r.input(call, from, fmt.Sprint(i), randomBytes(msgs[i].n*msgs[i].dt.Size()))
	}
	const what = "a completed Send is received after its sender closed"
	switch me {
	case from:
		for i, m := range msgs {
			b := r.newBuf("send", data(i))
			s := r.streamIf(m.stream)
			w := fmt.Sprintf("%s: Send of message %d (%d %v)", what, i, m.n, m.dt)
			r.ok(w, c.Send(r.view(b, 0, len(data(i))), m.n, m.dt, to, s))
			r.finish(w, s)
			r.verify(w, b)
			r.free(b)
		}
		r.ok(what+": Close right after the sends", c.Close())
		r.closed = true
	case to:
		time.Sleep(500 * time.Millisecond)
		for i, m := range msgs {
			b := r.newBuf("recv", poisoned(len(data(i))))
			s := r.streamIf(m.stream)
			w := fmt.Sprintf("%s: Recv of message %d (%d %v) 500 ms after the Send", what, i, m.n, m.dt)
			r.ok(w, c.Recv(r.view(b, 0, len(data(i))), m.n, m.dt, from, s))
			r.finish(w, s)
			b.expect(0, data(i))
			r.verify(w, b)
			r.free(b)
		}
	}
}

// freedHandle: rank 0 exports a buffer, frees it, and sends the handle to
// every rank; opening it must fail with ErrBadHandle everywhere, in the
// exporting process and in the others, and map nothing.
func (r *rank) freedHandle() {
	c := r.c
	const what = "a handle of freed memory is refused with ErrBadHandle"
	msg := make([]byte, devmem.HandleSize)
	if c.Rank() == 0 {
		if b, err := c.Device().Alloc(4096); r.ok(what+": Alloc", err) {
			h, err := b.Export()
			r.ok(what+": Export", err)
			r.ok(what+": Free after Export", b.Free())
			if raw, err := h.MarshalBinary(); r.ok(what+": MarshalBinary", err) {
				copy(msg, raw)
			}
		}
	}
	buf := r.newBuf("handle", msg)
	buf.expectAny(0, len(msg)) // rank 0's handle, unknown elsewhere; the guard is checked
	r.ok(what+": Broadcast of the handle", c.Broadcast(r.view(buf, 0, len(msg)), r.view(buf, 0, len(msg)), len(msg), comm.Uint8, 0, nil))
	got := r.verify(what+": the handle as broadcast", buf)
	r.free(buf)
	if got == nil {
		return
	}
	var h devmem.IPCHandle
	if !r.ok(what+": UnmarshalBinary", h.UnmarshalBinary(got[:devmem.HandleSize])) {
		return
	}
	before := c.Device().Stats()
	v, err := c.Device().OpenIPC(h)
	switch {
	case err == nil:
		r.failf("%s: rank %d opened %v, exported by rank 0 and freed before the open", what, c.Rank(), h)
		r.ok(what+": CloseIPC", v.CloseIPC())
	case !errors.Is(err, devmem.ErrBadHandle):
		r.failf("%s: got %v", what, err)
	}
	if after := c.Device().Stats(); after != before {
		r.failf("%s: the refused open left something behind: before %+v, after %+v", what, before, after)
	}
}

// viewOverlap: AllReduce whose recv is an IPC view (OpenIPC of send's own
// handle) of send's own memory, whole or shifted by one element, overlaps
// send as surely as a slice of it does: it must be refused with
// ErrInvalidArgument and change nothing.
func (r *rank) viewOverlap() {
	c := r.c
	const n, es, dt = 1021, 4, comm.Float32
	const nb = n * es
	call := r.next()
	a := r.newBuf("send", r.input(call, c.Rank(), "", randomBytes(2*nb)))
	h, err := r.view(a, 0, 2*nb).Export()
	if !r.ok("Export of send", err) {
		r.free(a)
		return
	}
	view, err := c.Device().OpenIPC(h)
	if !r.ok("OpenIPC of send's own handle", err) {
		r.free(a)
		return
	}
	for _, t := range []struct {
		what string
		at   int
	}{{"recv an IPC view of the same bytes as send", 0}, {"recv an IPC view of send shifted by one element", es}} {
		recv, err := view.Slice(t.at, nb)
		r.ok("view", err)
		x := args{op: driver.OpAllReduce, send: r.view(a, 0, nb), recv: recv, count: n, dt: dt, red: comm.Sum}
		r.try("AllReduce with "+t.what+" (overlap through a view must be refused)", comm.ErrInvalidArgument, x, a)
	}
	r.ok("CloseIPC", view.CloseIPC())
	r.free(a)
}
