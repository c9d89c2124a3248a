package conformance

import (
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// collSpec is one collective call, the same on every rank.
type collSpec struct {
	op      driver.Operation
	dt      comm.DType
	red     comm.Op // reductions only
	count   int
	root    int  // rooted collectives only
	inPlace bool // send and recv share memory, as the operation allows
	stream  bool // queued on a stream, then synchronised
	zero    bool // count 0 given the zero Buffer everywhere
	// sendAt and recvAt are the elements of poison before the views of send
	// and recv in their allocations (in place: sendAt, for the one buffer),
	// so that buffers not aligned to more than their element are tried.
	sendAt, recvAt int
}

func (s collSpec) String() string {
	str := fmt.Sprintf("%v %v", s.op, s.dt)
	if reduces(s.op) {
		str += " " + s.red.String()
	}
	str += fmt.Sprintf(" count=%d", s.count)
	if rooted(s.op) {
		str += fmt.Sprintf(" root=%d", s.root)
	}
	if s.inPlace {
		str += " in-place"
	}
	if s.stream {
		str += " on a stream"
	}
	if s.zero {
		str += " zero buffers"
	}
	switch {
	case s.inPlace && s.sendAt > 0:
		str += fmt.Sprintf(" at element %d", s.sendAt)
	case !s.inPlace && (s.sendAt > 0 || s.recvAt > 0):
		str += fmt.Sprintf(" at elements %d (send) and %d (recv)", s.sendAt, s.recvAt)
	}
	return str
}

func reduces(op driver.Operation) bool {
	return op == driver.OpAllReduce || op == driver.OpReduce || op == driver.OpReduceScatter
}

func rooted(op driver.Operation) bool {
	return op == driver.OpReduce || op == driver.OpBroadcast || op == driver.OpGather || op == driver.OpScatter
}

// collectives lists the collectives that move data.
var collectives = []driver.Operation{driver.OpAllReduce, driver.OpReduce, driver.OpReduceScatter,
	driver.OpBroadcast, driver.OpAllGather, driver.OpAllToAll, driver.OpGather, driver.OpScatter}

// lengths are the elements each rank's send and recv hold, and whether this
// rank's send or recv is one the operation ignores here.
func (s collSpec) lengths(p, me int) (send, recv int, sendIgnored, recvIgnored bool) {
	n, root := s.count, me == s.root
	switch s.op {
	case driver.OpAllReduce:
		return n, n, false, false
	case driver.OpReduce:
		return n, n, false, !root
	case driver.OpBroadcast:
		return n, n, !root, false
	case driver.OpAllGather:
		return n, p * n, false, false
	case driver.OpReduceScatter:
		return p * n, n, false, false
	case driver.OpAllToAll:
		return p * n, p * n, false, false
	case driver.OpGather:
		return n, p * n, false, !root
	}
	return p * n, n, !root, false // Scatter
}

// inputLen is the elements of every rank's generated input.
func (s collSpec) inputLen(p int) int {
	switch s.op {
	case driver.OpReduceScatter, driver.OpAllToAll, driver.OpScatter:
		return p * s.count
	}
	return s.count
}

// collective makes the call s on this rank with fresh, poisoned buffers and
// checks every byte of them afterwards.
func (r *rank) collective(s collSpec) {
	c := r.c
	p, me, es, n := c.Size(), c.Rank(), s.dt.Size(), s.count
	call := r.next()
	in := func(j int) []byte {
		fill := randomBytes(s.inputLen(p) * es)
		if reduces(s.op) {
			fill = reductionInput(s.dt, s.red, s.inputLen(p))
		}
		return r.input(call, j, "", fill)
	}
	block := func(b []byte, j int) []byte { return b[j*n*es : (j+1)*n*es] }
	sendLen, recvLen, sendIgnored, recvIgnored := s.lengths(p, me)

	// Lay out the buffers: one shared allocation in place, else one each,
	// with the zero Buffer for half of the ignored ones.
	// Offsets are in bytes from the start of each allocation, whose first
	// sendAt (recvAt) elements are poison that must stay.
	var sb, rb *dbuf
	base := s.sendAt * es // in place: where the one buffer's view starts
	sOff, rOff := 0, 0
	switch {
	case s.zero:
	case s.inPlace:
		size := max(sendLen, recvLen)
		if sendIgnored || recvIgnored {
			size, sendLen, recvLen = n, n, n
		}
		sOff, rOff = base, base
		switch {
		case s.op == driver.OpAllGather:
			sOff += me * n * es
		case s.op == driver.OpGather && !recvIgnored:
			sOff += me * n * es
		case s.op == driver.OpReduceScatter:
			rOff += me * n * es
		case s.op == driver.OpScatter && !sendIgnored:
			rOff += me * n * es
		}
		content := poisoned(base + size*es)
		if !sendIgnored {
			copy(content[sOff:], in(me))
		}
		sb = r.newBuf("in-place buffer", content)
		rb = sb
	default:
		sOff, rOff = s.sendAt*es, s.recvAt*es
		if !sendIgnored || me%2 == 0 {
			content := poisoned(sOff + sendLen*es)
			copy(content[sOff:], in(me)[:sendLen*es])
			sb = r.newBuf("send", content)
		}
		if !recvIgnored || me%2 == 0 {
			rb = r.newBuf("recv", poisoned(rOff+recvLen*es))
		}
	}
	send := r.view(sb, sOff, sendLen*es)
	recv := r.view(rb, rOff, recvLen*es)

	st := r.streamIf(s.stream)
	err := invoke(c, s.op, send, recv, n, s.dt, s.red, s.root, st)
	what := s.String()
	r.ok(what, err)
	r.finish(what, st)

	// What recv must hold; everything else must be as it was.
	terms := func(pick func([]byte) []byte) [][]byte {
		t := make([][]byte, p)
		for j := range t {
			t[j] = pick(in(j))
		}
		return t
	}
	whole := func(b []byte) []byte { return b }
	switch {
	case rb == nil:
	case s.op == driver.OpAllReduce:
		rb.expectReduced(rOff, s.dt, s.red, terms(whole))
	case s.op == driver.OpReduce:
		if !recvIgnored {
			rb.expectReduced(rOff, s.dt, s.red, terms(whole))
		}
	case s.op == driver.OpReduceScatter:
		rb.expectReduced(rOff, s.dt, s.red, terms(func(b []byte) []byte { return block(b, me) }))
		if s.inPlace {
			// The rest of an in-place send is the backend's to use.
			rb.expectAny(base, me*n*es)
			rb.expectAny(rOff+n*es, (p-me-1)*n*es)
		}
	case s.op == driver.OpBroadcast:
		rb.expect(rOff, in(s.root))
	case s.op == driver.OpAllGather:
		for j := range p {
			rb.expect(rOff+j*n*es, in(j))
		}
	case s.op == driver.OpAllToAll:
		for j := range p {
			rb.expect(rOff+j*n*es, block(in(j), me))
		}
	case s.op == driver.OpGather:
		if !recvIgnored {
			for j := range p {
				rb.expect(rOff+j*n*es, in(j))
			}
		}
	case s.op == driver.OpScatter:
		rb.expect(rOff, block(in(s.root), me))
	}
	r.verify(what, rb)
	if sb != rb {
		r.verify(what, sb)
		r.free(sb)
	}
	r.free(rb)
	r.release(call)
}

// invoke calls the collective op with the arguments it takes.
func invoke(c comm.Communicator, op driver.Operation, send, recv devmem.Buffer, n int, dt comm.DType, red comm.Op, root int, st *devmem.Stream) error {
	switch op {
	case driver.OpAllReduce:
		return c.AllReduce(send, recv, n, dt, red, st)
	case driver.OpReduce:
		return c.Reduce(send, recv, n, dt, red, root, st)
	case driver.OpBroadcast:
		return c.Broadcast(send, recv, n, dt, root, st)
	case driver.OpAllGather:
		return c.AllGather(send, recv, n, dt, st)
	case driver.OpReduceScatter:
		return c.ReduceScatter(send, recv, n, dt, red, st)
	case driver.OpAllToAll:
		return c.AllToAll(send, recv, n, dt, st)
	case driver.OpGather:
		return c.Gather(send, recv, n, dt, root, st)
	case driver.OpScatter:
		return c.Scatter(send, recv, n, dt, root, st)
	}
	return fmt.Errorf("conformance: %v is not a collective", op)
}

// gridCase runs one operation over every element type, reduction and in
// place setting, with roots taking every rank in turn.
func gridCase(op driver.Operation) testCase {
	return testCase{name: "Grid/" + op.String(), body: func(r *rank) {
		counts := []int{13}
		if !r.env.short {
			counts = []int{1, 13, 1021}
		}
		reds := []comm.Op{0}
		if reduces(op) {
			reds = comm.Ops()
		}
		places := []bool{false, true}
		if op == driver.OpAllToAll {
			places = places[:1]
		}
		k := 0
		for _, dt := range comm.DTypes() {
			for _, red := range reds {
				for _, inPlace := range places {
					for _, n := range counts {
						r.collective(collSpec{op: op, dt: dt, red: red, count: n, root: k % r.c.Size(), inPlace: inPlace})
						k++
					}
				}
			}
		}
	}}
}

// countsCase runs every collective at counts 0 (with and without buffers), 1
// and a prime, on a stream, rooted at the last rank.
var countsCase = testCase{name: "Counts", body: func(r *rank) {
	for _, op := range collectives {
		for i, n := range []int{0, 0, 1, 1021} {
			r.collective(collSpec{op: op, dt: comm.Float32, red: comm.Sum, count: n, root: r.c.Size() - 1, stream: true, zero: i == 0})
		}
	}
}}

// rootsCase runs every rooted collective from every root, in place from
// every other one.
var rootsCase = testCase{name: "Roots", body: func(r *rank) {
	for _, op := range collectives {
		if !rooted(op) {
			continue
		}
		for root := range r.c.Size() {
			r.collective(collSpec{op: op, dt: comm.Int64, red: comm.Max, count: 5, root: root, inPlace: root%2 == 1})
		}
	}
}}

// mib4 is 4 MiB, the size of the large cases.
const mib4 = 4 << 20

func largeCases() []testCase {
	return []testCase{
		{name: "Large/AllReduce", large: true, body: func(r *rank) {
			r.collective(collSpec{op: driver.OpAllReduce, dt: comm.Float32, red: comm.Sum, count: mib4 / 4, stream: true})
		}},
		{name: "Large/Broadcast", large: true, body: func(r *rank) {
			r.collective(collSpec{op: driver.OpBroadcast, dt: comm.Uint8, count: mib4 + 3, root: r.c.Size() - 1})
		}},
		{name: "Large/AllGather", large: true, body: func(r *rank) {
			r.collective(collSpec{op: driver.OpAllGather, dt: comm.Int32, count: mib4 / 4})
		}},
		{name: "Large/SendRecv", large: true, minRanks: 2, body: func(r *rank) {
			r.ring(comm.Float64, mib4/8+1)
		}},
	}
}

// ring sends n elements to the next rank and receives from the previous
// one, even ranks sending first so that blocking sends cannot deadlock.
func (r *rank) ring(dt comm.DType, n int) {
	c := r.c
	p, me, es := c.Size(), c.Rank(), dt.Size()
	right, left := (me+1)%p, (me+p-1)%p
	call := r.next()
	in := func(j int) []byte { return r.input(call, j, "", randomBytes(n*es)) }
	sb := r.newBuf("send", in(me))
	rb := r.newBuf("recv", poisoned(n*es))
	send, recv := r.view(sb, 0, n*es), r.view(rb, 0, n*es)
	what := fmt.Sprintf("ring of %d %v", n, dt)
	if me%2 == 0 {
		r.ok(what+": Send", c.Send(send, n, dt, right, nil))
		r.ok(what+": Recv", c.Recv(recv, n, dt, left, nil))
	} else {
		r.ok(what+": Recv", c.Recv(recv, n, dt, left, nil))
		r.ok(what+": Send", c.Send(send, n, dt, right, nil))
	}
	rb.expect(0, in(left))
	r.verify(what, sb)
	r.verify(what, rb)
	r.free(sb, rb)
}
