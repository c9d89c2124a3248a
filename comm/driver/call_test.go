package driver

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// The calls of Send, Recv and GroupP2P carry what Validate checks, and
// GroupCall's list is the backend's own copy.
func TestPointToPointCalls(t *testing.T) {
	dev := devmem.NewHostDevice()
	buf, err := dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	call, ps := SendCall(buf, 8, Float64, 3, nil)
	if call.Operation != OpSend || call.Send != buf || call.Count != 8 || call.DType != Float64 || call.Root != 3 ||
		len(ps) != 1 || ps[0] != SendTo(3, buf, 8, Float64) {
		t.Errorf("SendCall: %+v, %+v", call, ps)
	}
	call, ps = RecvCall(buf, 4, Int32, 1, nil)
	if call.Operation != OpRecv || call.Recv != buf || call.Count != 4 || call.DType != Int32 || call.Root != 1 ||
		len(ps) != 1 || ps[0] != RecvFrom(1, buf, 4, Int32) {
		t.Errorf("RecvCall: %+v, %+v", call, ps)
	}
	ops := []P2P{SendTo(1, buf, 2, Uint8), RecvFrom(2, buf, 2, Uint8)}
	call, ps = GroupCall(ops, nil)
	ops[0].Peer = 9 // the caller reuses its slice
	if call.Operation != OpGroupP2P || len(ps) != 2 || ps[0].Peer != 1 || call.P2P[0].Peer != 1 || ps[1] != RecvFrom(2, buf, 2, Uint8) {
		t.Errorf("GroupCall: %+v, %+v; want its own copy of the transfers", call, ps)
	}
}

// In place: which overlaps of send and recv each collective accepts, on
// both ranks of two (root 0), with one buffer handed twice, a slice of it
// at the same start and a slice at another start. Validate takes the first
// without slicing (the hot path of an in-place AllReduce); the verdicts are
// checkInPlace's.
func TestValidateInPlace(t *testing.T) {
	dev := devmem.NewHostDevice()
	buf, err := dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	head, _ := buf.Slice(0, 32)
	later, _ := buf.Slice(4, 32)
	const ok = ""
	for _, c := range []struct {
		op           Operation
		recv         devmem.Buffer
		rank0, rank1 string // "" accepted, else what the error says
	}{
		{OpAllReduce, buf, ok, ok},
		{OpAllReduce, head, ok, ok},
		{OpAllReduce, later, "overlap without being the same buffer", "overlap without being the same buffer"},
		{OpReduce, buf, ok, ok}, // rank 1 is no root: its recv is not used
		{OpReduce, later, "overlap without being the same buffer", ok},
		{OpBroadcast, buf, ok, ok},
		{OpBroadcast, later, "overlap without being the same buffer", ok}, // rank 1 sends nothing
		{OpAllGather, buf, ok, "must be this rank's block at byte 16"},
		{OpReduceScatter, buf, ok, "must be this rank's block at byte 16"},
		{OpAllToAll, buf, "AllToAll cannot run in place", "AllToAll cannot run in place"},
		{OpGather, buf, ok, ok},
		{OpScatter, buf, ok, ok},
	} {
		for rank, want := range []string{c.rank0, c.rank1} {
			call := Call{Operation: c.op, Send: buf, Recv: c.recv, Count: 4, DType: Float32, Op: Sum}
			err := call.Validate(rank, 2, dev)
			switch {
			case want == ok && err != nil:
				t.Errorf("%v rank %d, recv at %d of %d bytes: %v; want it accepted", c.op, rank, c.recv.Addr()-buf.Addr(), c.recv.Len(), err)
			case want != ok && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), want)):
				t.Errorf("%v rank %d, recv at %d of %d bytes: %v; want ErrInvalidArgument saying %q", c.op, rank, c.recv.Addr()-buf.Addr(), c.recv.Len(), err, want)
			}
		}
	}
}

// A GroupP2P's receive may share no byte with its sends; sends may share
// theirs, and receives theirs, and each entry is judged on the bytes it
// moves.
func TestValidateGroupOverlap(t *testing.T) {
	dev := devmem.NewHostDevice()
	buf, err := dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	other, err := dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	at := func(off, n int) devmem.Buffer {
		b, err := buf.Slice(off, n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name string
		ops  []P2P
		says string // "" accepted
	}{
		{"two sends of one buffer", []P2P{SendTo(1, buf, 16, Float32), SendTo(2, buf, 16, Float32), RecvFrom(1, other, 16, Float32)}, ""},
		{"receive beside its send", []P2P{SendTo(1, at(0, 32), 8, Float32), RecvFrom(1, at(32, 32), 8, Float32)}, ""},
		{"receive past the bytes a send moves", []P2P{SendTo(1, buf, 4, Float32), RecvFrom(1, at(16, 16), 4, Float32)}, ""},
		{"an empty receive", []P2P{SendTo(1, buf, 4, Float32), RecvFrom(1, buf, 0, Float32)}, ""},
		{"exchange in place", []P2P{SendTo(1, buf, 4, Float32), RecvFrom(1, buf, 4, Float32)},
			"entry 0 (send of 4 float32 to rank 1) and entry 1 (receive of 4 float32 from rank 1) overlap"},
		{"a receive one byte into a send", []P2P{SendTo(2, at(0, 8), 8, Uint8), RecvFrom(1, at(7, 8), 8, Uint8)},
			"entry 0 (send of 8 uint8 to rank 2) and entry 1 (receive of 8 uint8 from rank 1) overlap"},
		{"two receives into one buffer (a bandwidth window)", []P2P{RecvFrom(1, other, 2, Int64), SendTo(1, buf, 2, Int64), RecvFrom(2, other, 2, Int64)}, ""},
		{"a receive into a later send", []P2P{RecvFrom(1, other, 2, Int64), SendTo(2, buf, 2, Int64), SendTo(1, other, 1, Int64)},
			"entry 0 (receive of 2 int64 from rank 1) and entry 2 (send of 1 int64 to rank 1) overlap"},
	} {
		err := Call{Operation: OpGroupP2P, P2P: c.ops}.Validate(0, 3, dev)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", c.name, err)
		case c.says != "" && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%s: %v; want ErrInvalidArgument saying %q", c.name, err, c.says)
		}
	}
}

// Transfers to the rank itself pair up in the group, the k-th send to self
// with the k-th receive from self, on count and dtype; a receive without
// its send (it waited for ever) or a send without its receive is refused.
func TestValidateSelfPairs(t *testing.T) {
	dev := devmem.NewHostDevice()
	var bufs [4]devmem.Buffer
	for i := range bufs {
		b, err := dev.Alloc(64)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		bufs[i] = b
	}
	a, b, c, d := bufs[0], bufs[1], bufs[2], bufs[3]
	for _, tc := range []struct {
		name string
		ops  []P2P
		says string // "" accepted
	}{
		{"a pair", []P2P{RecvFrom(1, b, 4, Float32), SendTo(1, a, 4, Float32)}, ""},
		{"two pairs among other ranks' transfers", []P2P{SendTo(1, a, 4, Float32), RecvFrom(0, d, 8, Uint8), SendTo(2, a, 2, Int64), SendTo(1, c, 8, Uint8), RecvFrom(1, b, 4, Float32), RecvFrom(1, d, 8, Uint8), SendTo(0, c, 2, Int64)}, ""},
		{"others' transfers only", []P2P{SendTo(2, a, 4, Float32), RecvFrom(2, b, 4, Float32)}, ""},
		{"a receive from itself alone", []P2P{SendTo(2, a, 4, Float32), RecvFrom(1, b, 4, Float32)},
			"0 sends to this rank itself and 1 receives from itself"},
		{"a send to itself alone", []P2P{SendTo(1, a, 4, Float32), RecvFrom(2, b, 4, Float32)},
			"1 sends to this rank itself and 0 receives from itself"},
		{"two receives, one send", []P2P{SendTo(1, a, 4, Float32), RecvFrom(1, b, 4, Float32), RecvFrom(1, c, 4, Float32)},
			"1 sends to this rank itself and 2 receives from itself"},
		{"a pair of two counts", []P2P{SendTo(1, a, 4, Float32), RecvFrom(1, b, 3, Float32)},
			"entry 0 (send of 4 float32 to rank 1) pairs with entry 1 (receive of 3 float32 from rank 1)"},
		{"a pair of two dtypes of one size", []P2P{RecvFrom(1, b, 4, Int32), SendTo(1, a, 4, Float32)},
			"entry 1 (send of 4 float32 to rank 1) pairs with entry 0 (receive of 4 int32 from rank 1)"},
		{"pairs in the wrong order", []P2P{SendTo(1, a, 4, Float32), SendTo(1, c, 2, Int64), RecvFrom(1, d, 2, Int64), RecvFrom(1, b, 4, Float32)},
			"entry 0 (send of 4 float32 to rank 1) pairs with entry 2 (receive of 2 int64 from rank 1)"},
	} {
		err := Call{Operation: OpGroupP2P, P2P: tc.ops}.Validate(1, 3, dev)
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", tc.name, err)
		case tc.says != "" && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%s: %v; want ErrInvalidArgument saying %q", tc.name, err, tc.says)
		}
	}
}

// BenchmarkValidateGroupP2P is Validate's cost for a halo exchange's group
// (two sends and two receives, slices of one grid) and for a bandwidth
// window of 64 receives into one buffer.
func BenchmarkValidateGroupP2P(b *testing.B) {
	dev := devmem.NewHostDevice()
	grid, err := dev.Alloc(1 << 16)
	if err != nil {
		b.Fatal(err)
	}
	defer grid.Free()
	row := func(i int) devmem.Buffer { s, _ := grid.Slice(i*1024, 1024); return s }
	halo := []P2P{SendTo(1, row(1), 256, Float32), SendTo(2, row(62), 256, Float32), RecvFrom(1, row(0), 256, Float32), RecvFrom(2, row(63), 256, Float32)}
	window := make([]P2P, 64)
	for i := range window {
		window[i] = RecvFrom(1, row(0), 256, Float32)
	}
	for _, c := range []struct {
		name string
		ops  []P2P
	}{{"halo", halo}, {"window64", window}} {
		b.Run(c.name, func(b *testing.B) {
			call := Call{Operation: OpGroupP2P, P2P: c.ops}
			for b.Loop() {
				if err := call.Validate(0, 3, dev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Split's arguments are judged alike on every backend, and the refusals
// the ranks exchanged name each rank that cannot split.
func TestSplitRefusal(t *testing.T) {
	for _, c := range []struct {
		color, key int
		says       string
	}{
		{0, 0, ""}, {-1, 5, ""}, {1<<31 - 1, -1 << 31, ""},
		{-2, 0, "color -2: want >= 0 or comm.Undefined"},
		{1 << 31, 0, "color 2147483648 does not fit MPI's int"},
		{0, -1<<31 - 1, "key -2147483649 does not fit MPI's int"},
	} {
		if got := SplitRefusal(c.color, c.key); got != c.says {
			t.Errorf("SplitRefusal(%d, %d) = %q, want %q", c.color, c.key, got, c.says)
		}
	}
	if err := SplitRefusals([][]byte{nil, {}, nil}); err != nil {
		t.Errorf("no refusal: %v", err)
	}
	err := SplitRefusals([][]byte{nil, []byte("color -2: x"), nil, []byte("key 9: y")})
	if !errors.Is(err, ErrInvalidArgument) || err.Error() != "rank 1: color -2: x; rank 3: key 9: y: invalid argument" {
		t.Errorf("two refusals: %v", err)
	}
}
