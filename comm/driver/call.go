package driver

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpucomm/gpucomm/devmem"
)

// Operation names a Communicator method.
type Operation int

// Operations of a Communicator.
const (
	OpAllReduce Operation = iota + 1
	OpReduce
	OpBroadcast
	OpAllGather
	OpReduceScatter
	OpAllToAll
	OpGather
	OpScatter
	OpSend
	OpRecv
	OpGroupP2P
	OpBarrier
	OpSplit
)

var operationNames = [...]string{"", "AllReduce", "Reduce", "Broadcast", "AllGather", "ReduceScatter",
	"AllToAll", "Gather", "Scatter", "Send", "Recv", "GroupP2P", "Barrier", "Split"}

func (o Operation) String() string {
	if o < OpAllReduce || o > OpSplit {
		return "Operation(" + strconv.Itoa(int(o)) + ")"
	}
	return operationNames[o]
}

// Call is one call of a Communicator method with its arguments. Backends
// build one to check arguments (Validate) and to compare what the ranks
// called (Signature).
type Call struct {
	Operation Operation
	Send      devmem.Buffer
	Recv      devmem.Buffer
	Count     int
	DType     DType
	Op        Op  // reductions only
	Root      int // rooted collectives; the peer of Send and Recv
	P2P       []P2P
	Stream    *devmem.Stream
}

// Rooted reports whether the operation has a root.
func (c Call) Rooted() bool {
	switch c.Operation {
	case OpReduce, OpBroadcast, OpGather, OpScatter:
		return true
	}
	return false
}

// Reduces reports whether the operation takes an Op.
func (c Call) Reduces() bool {
	switch c.Operation {
	case OpAllReduce, OpReduce, OpReduceScatter:
		return true
	}
	return false
}

// Signature is what every rank's call of a collective must agree on, and
// how errors and traces name a call: "AllReduce(count=4 dtype=float32
// op=sum)"; "Barrier()" and "Split()", which take no count or element
// type; "GroupP2P(transfers=2)", whose transfers each have their own.
func (c Call) Signature() string {
	var root *int
	if c.Rooted() {
		root = &c.Root
	}
	reduce := ""
	if c.Reduces() {
		reduce = c.Op.String()
	}
	return signature(c.Operation.String(), c.Count, c.DType.String(), reduce, root, len(c.P2P))
}

// countsElements reports whether the operation named name moves count
// elements of one element type: not Barrier or Split, which move none,
// nor GroupP2P, whose transfers each have their own count and type. An
// unknown name is taken to move them.
func countsElements(name string) bool {
	switch name {
	case OpBarrier.String(), OpSplit.String(), OpGroupP2P.String():
		return false
	}
	return true
}

// signature formats Call's and TraceEntry's Signature from the operation's
// name, count, element type, reduction ("" for none), root (nil for none)
// and number of transfers (GroupP2P's), each shown only where the
// operation has it. A GroupP2P of no transfers, or one rebuilt without its
// list, is "GroupP2P()".
func signature(name string, count int, dtype, reduce string, root *int, transfers int) string {
	switch {
	case name == OpGroupP2P.String() && transfers > 0:
		return name + "(transfers=" + strconv.Itoa(transfers) + ")"
	case !countsElements(name):
		return name + "()"
	}
	s := fmt.Sprintf("%s(count=%d dtype=%s", name, count, dtype)
	if reduce != "" {
		s += " op=" + reduce
	}
	if root != nil {
		s += " root=" + strconv.Itoa(*root)
	}
	return s + ")"
}

// Validate checks the call's arguments for a rank of a communicator of the
// given size whose buffers must live on dev. It touches no memory.
func (c Call) Validate(rank, size int, dev *devmem.Device) error {
	if err := c.Stream.Check(dev); err != nil {
		return err
	}
	switch c.Operation {
	case OpBarrier, OpSplit:
		return nil
	case OpGroupP2P:
		for i, p := range c.P2P {
			if err := checkP2P(p, rank, size, dev, true); err != nil {
				return fmt.Errorf("entry %d: %w", i, err)
			}
		}
		if err := checkSelfPairs(c.P2P, rank); err != nil {
			return err
		}
		return checkGroupOverlap(c.P2P)
	case OpSend, OpRecv:
		kind, buf := SendKind, c.Send
		if c.Operation == OpRecv {
			kind, buf = RecvKind, c.Recv
		}
		return checkP2P(P2P{Kind: kind, Buf: buf, Count: c.Count, DType: c.DType, Peer: c.Root}, rank, size, dev, false)
	}
	if c.Operation < OpAllReduce || c.Operation > OpSplit {
		return fmt.Errorf("unknown operation %d: %w", int(c.Operation), ErrInvalidArgument)
	}
	if !c.DType.Valid() {
		return fmt.Errorf("dtype %v is not an element type: %w", c.DType, ErrInvalidArgument)
	}
	if c.Count < 0 {
		return fmt.Errorf("count %d is negative: %w", c.Count, ErrInvalidArgument)
	}
	if c.Reduces() && !c.Op.Valid() {
		return fmt.Errorf("op %v is not a reduction: %w", c.Op, ErrInvalidArgument)
	}
	if c.Rooted() && (c.Root < 0 || c.Root >= size) {
		return fmt.Errorf("root %d is not a rank of a %d-rank communicator: %w", c.Root, size, ErrInvalidArgument)
	}
	n := c.Count * c.DType.Size()
	if c.Count > 0 && (n/c.Count != c.DType.Size() || n > math.MaxInt/max(size, 1)) {
		return fmt.Errorf("count %d of %v over %d ranks overflows: %w", c.Count, c.DType, size, ErrInvalidArgument)
	}
	root := rank == c.Root
	var sendN, recvN int // bytes needed; -1 when the buffer is not used here
	inPlaceBlock := -1   // where send may sit inside recv (or recv inside send)
	switch c.Operation {
	case OpAllReduce:
		sendN, recvN = n, n
	case OpReduce:
		sendN, recvN = n, -1
		if root {
			recvN = n
		}
	case OpBroadcast:
		sendN, recvN = -1, n
		if root {
			sendN = n
		}
	case OpAllGather:
		sendN, recvN, inPlaceBlock = n, size*n, rank*n
	case OpReduceScatter:
		sendN, recvN, inPlaceBlock = size*n, n, rank*n
	case OpAllToAll:
		sendN, recvN = size*n, size*n
	case OpGather:
		sendN, recvN = n, -1
		if root {
			recvN, inPlaceBlock = size*n, rank*n
		}
	case OpScatter:
		sendN, recvN = -1, n
		if root {
			sendN, inPlaceBlock = size*n, rank*n
		}
	}
	if sendN >= 0 {
		if err := checkBuf("send", c.Send, dev, sendN); err != nil {
			return err
		}
	}
	if recvN >= 0 {
		if err := checkBuf("recv", c.Recv, dev, recvN); err != nil {
			return err
		}
	}
	if sendN > 0 && recvN > 0 && c.Send.Overlaps(c.Recv) {
		if inPlaceBlock < 0 && c.Operation != OpAllToAll && c.Send.Same(c.Recv) {
			return nil // in place, one buffer handed twice: checkInPlace's first rule, taken without its slices
		}
		return checkInPlace(c, sendN, recvN, inPlaceBlock)
	}
	return nil
}

// checkInPlace accepts the overlaps an operation allows: the same bytes, or
// the smaller buffer being this rank's block of the larger.
func checkInPlace(c Call, sendN, recvN, block int) error {
	small, large := c.Send, c.Recv
	if sendN > recvN {
		small, large = c.Recv, c.Send
	}
	switch {
	case c.Operation == OpAllToAll:
		return fmt.Errorf("send and recv overlap; AllToAll cannot run in place: %w", ErrInvalidArgument)
	case block < 0 && sameStart(c.Send, 0, c.Recv):
		return nil
	case block >= 0 && sameStart(large, block, small):
		return nil
	case block >= 0:
		return fmt.Errorf("send and recv overlap; in place, the %d-byte buffer must be this rank's block at byte %d of the other: %w",
			min(sendN, recvN), block, ErrInvalidArgument)
	}
	return fmt.Errorf("send and recv overlap without being the same buffer: %w", ErrInvalidArgument)
}

// sameStart reports whether small starts at byte off of large in the same
// Buffer: in place means one buffer handed twice, not two names (an IPC
// view, say) for the same memory, which backends would treat as two.
func sameStart(large devmem.Buffer, off int, small devmem.Buffer) bool {
	n := min(large.Len()-off, small.Len())
	if n <= 0 {
		return false
	}
	l, err1 := large.Slice(off, n)
	s, err2 := small.Slice(0, n)
	return err1 == nil && err2 == nil && l.Same(s)
}

func checkBuf(what string, b devmem.Buffer, dev *devmem.Device, n int) error {
	if n == 0 && b.IsZero() {
		return nil
	}
	return b.Check(what, dev, n)
}

func checkP2P(p P2P, rank, size int, dev *devmem.Device, grouped bool) error {
	if p.Kind != SendKind && p.Kind != RecvKind {
		return fmt.Errorf("P2P kind %d is neither send nor receive: %w", int(p.Kind), ErrInvalidArgument)
	}
	if !p.DType.Valid() {
		return fmt.Errorf("dtype %v is not an element type: %w", p.DType, ErrInvalidArgument)
	}
	if p.Count < 0 {
		return fmt.Errorf("count %d is negative: %w", p.Count, ErrInvalidArgument)
	}
	if p.Peer < 0 || p.Peer >= size {
		return fmt.Errorf("peer %d is not a rank of a %d-rank communicator: %w", p.Peer, size, ErrInvalidArgument)
	}
	if p.Peer == rank && !grouped {
		return fmt.Errorf("peer %d is this rank; a transfer to self must be inside GroupP2P: %w", p.Peer, ErrInvalidArgument)
	}
	if p.Count > math.MaxInt/p.DType.Size() {
		return fmt.Errorf("count %d of %v overflows: %w", p.Count, p.DType, ErrInvalidArgument)
	}
	what := "send"
	if p.Kind == RecvKind {
		what = "recv"
	}
	return checkBuf(what, p.Buf, dev, p.Count*p.DType.Size())
}

// checkSelfPairs refuses a GroupP2P whose transfers to this rank itself do
// not pair up: the k-th send to self goes to the k-th receive from self,
// of the same count and dtype. Only this rank could meet a receive from
// itself, and it is inside this call, so an unpaired one would wait for
// ever (under MPI, so would a send too large to go eagerly), and one
// paired across calls would work on one backend and hang on another
// (NCCL refuses it).
func checkSelfPairs(ops []P2P, rank int) error {
	var sends, recvs int
	for _, p := range ops {
		if p.Peer == rank {
			if p.Kind == SendKind {
				sends++
			} else {
				recvs++
			}
		}
	}
	if sends != recvs {
		return fmt.Errorf("%d sends to this rank itself and %d receives from itself: each send to self needs its receive in the same GroupP2P: %w",
			sends, recvs, ErrInvalidArgument)
	}
	if sends == 0 {
		return nil
	}
	si, ri := 0, 0
	for k := 0; k < sends; k++ {
		for ops[si].Peer != rank || ops[si].Kind != SendKind {
			si++
		}
		for ops[ri].Peer != rank || ops[ri].Kind != RecvKind {
			ri++
		}
		if snd, rcv := ops[si], ops[ri]; snd.Count != rcv.Count || snd.DType != rcv.DType {
			return fmt.Errorf("entry %d (%s) pairs with entry %d (%s): the k-th send to self goes to the k-th receive from self, "+
				"and the two must agree on count and dtype: %w", si, describe(snd), ri, describe(rcv), ErrInvalidArgument)
		}
		si++
		ri++
	}
	return nil
}

// checkGroupOverlap refuses a GroupP2P one of whose receives writes bytes
// that one of its sends reads: the transfers of a group run in no set
// order (the backends post every receive before, or while, the sends
// read), so such a call, an exchange in place among them, would return
// nil with wrong data. Sends may share bytes, and so may receives (a
// bandwidth test's window of receives into one buffer, as osu_bw posts
// them): the buffer then holds one of the messages, which one not set.
// Each entry is judged on the bytes it moves (Count elements from the
// start of Buf); ops were checked one by one (checkP2P) before.
func checkGroupOverlap(ops []P2P) error {
	// A group of sends only, or of receives only (a bandwidth test's
	// window), has no pair to judge: the common cases pay one pass.
	var sends, recvs bool
	for _, p := range ops {
		sends = sends || p.Kind == SendKind && p.Count > 0
		recvs = recvs || p.Kind == RecvKind && p.Count > 0
	}
	if !sends || !recvs {
		return nil
	}
	for i, p := range ops {
		if p.Kind != RecvKind || p.Count == 0 {
			continue
		}
		for j, q := range ops {
			if q.Kind != SendKind || q.Count == 0 || !p.Buf.Overlaps(q.Buf) {
				continue
			}
			a, errA := p.Buf.Slice(0, p.Count*p.DType.Size())
			b, errB := q.Buf.Slice(0, q.Count*q.DType.Size())
			if errA != nil || errB != nil || !a.Overlaps(b) {
				continue
			}
			return fmt.Errorf("entry %d (%s) and entry %d (%s) overlap: a GroupP2P's receive may not share bytes with its sends, "+
				"whose order is not set (exchange through a second buffer): %w", min(i, j), describe(ops[min(i, j)]), max(i, j), describe(ops[max(i, j)]), ErrInvalidArgument)
		}
	}
	return nil
}

// describe names a P2P entry in an error: "receive of 4 float32 from rank 1".
func describe(p P2P) string {
	if p.Kind == SendKind {
		return fmt.Sprintf("send of %d %v to rank %d", p.Count, p.DType, p.Peer)
	}
	return fmt.Sprintf("receive of %d %v from rank %d", p.Count, p.DType, p.Peer)
}

// P2PKind says whether a P2P entry sends or receives.
type P2PKind int

const (
	// SendKind sends Buf to Peer.
	SendKind P2PKind = iota + 1
	// RecvKind receives from Peer into Buf.
	RecvKind
)

// P2P is one transfer of a GroupP2P.
type P2P struct {
	Kind  P2PKind
	Buf   devmem.Buffer
	Count int
	DType DType
	Peer  int
}

// SendTo is a P2P entry that sends count elements of buf to peer.
func SendTo(peer int, buf devmem.Buffer, count int, dt DType) P2P {
	return P2P{Kind: SendKind, Buf: buf, Count: count, DType: dt, Peer: peer}
}

// RecvFrom is a P2P entry that receives count elements from peer into buf.
func RecvFrom(peer int, buf devmem.Buffer, count int, dt DType) P2P {
	return P2P{Kind: RecvKind, Buf: buf, Count: count, DType: dt, Peer: peer}
}

// SendCall, RecvCall and GroupCall are the Call (for Validate and errors)
// and the transfer list of a Send, a Recv and a GroupP2P, for backends that
// run every point-to-point operation as a group. GroupCall copies ops: the
// caller may reuse its slice as soon as GroupP2P returns.
func SendCall(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) (Call, []P2P) {
	return Call{Operation: OpSend, Send: buf, Count: count, DType: dt, Root: peer, Stream: s},
		[]P2P{SendTo(peer, buf, count, dt)}
}

// RecvCall: see SendCall.
func RecvCall(buf devmem.Buffer, count int, dt DType, peer int, s *devmem.Stream) (Call, []P2P) {
	return Call{Operation: OpRecv, Recv: buf, Count: count, DType: dt, Root: peer, Stream: s},
		[]P2P{RecvFrom(peer, buf, count, dt)}
}

// GroupCall: see SendCall.
func GroupCall(ops []P2P, s *devmem.Stream) (Call, []P2P) {
	ops = append([]P2P(nil), ops...)
	return Call{Operation: OpGroupP2P, P2P: ops, Stream: s}, ops
}

// SplitRefusal says why a rank cannot split on color and key (a color
// below 0 other than -1, comm.Undefined; a color or key that MPI's and
// NCCL's int cannot hold); "" when it can. Every backend judges Split's
// arguments by it.
func SplitRefusal(color, key int) string {
	switch {
	case color < 0 && color != -1:
		return fmt.Sprintf("color %d: want >= 0 or comm.Undefined", color)
	case color > math.MaxInt32:
		return fmt.Sprintf("color %d does not fit MPI's int", color)
	case key > math.MaxInt32 || key < math.MinInt32:
		return fmt.Sprintf("key %d does not fit MPI's int", key)
	}
	return ""
}

// SplitRefusals is the error every rank of a Split returns when some rank
// cannot split (why[r] is rank r's SplitRefusal, empty where it can): one
// wrapping ErrInvalidArgument naming each such rank and why; nil when every
// rank can. The ranks exchange their refusals first, so that one rank's bad
// color fails them all instead of leaving the others in the split.
func SplitRefusals(why [][]byte) error {
	var bad []string
	for r, w := range why {
		if len(w) > 0 {
			bad = append(bad, fmt.Sprintf("rank %d: %s", r, w))
		}
	}
	if bad == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", strings.Join(bad, "; "), ErrInvalidArgument)
}
