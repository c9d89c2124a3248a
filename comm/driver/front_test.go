package driver

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// testEngine is an Engine that keeps the calls Front hands it: what Front
// lets through, and in what form, is what these tests check.
type testEngine struct {
	closed bool
	limit  error // Limit's answer
	fail   error // Run's answer
	calls  []Call
}

func (e *testEngine) Usable() error {
	if e.closed {
		return ErrClosed
	}
	return nil
}

func (e *testEngine) Run(call Call) error {
	e.calls = append(e.calls, call)
	return e.fail
}

type limitedEngine struct{ *testEngine }

func (e limitedEngine) Limit(Call) error { return e.limit }

func newTestFront(t *testing.T, skipEmpty bool, eng Engine) (Front, devmem.Buffer) {
	t.Helper()
	dev := devmem.NewHostDevice()
	buf, err := dev.Alloc(4 * 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Free() })
	return NewFront(FrontConfig{Backend: "test", Rank: 1, Size: 4, Device: dev, SkipEmpty: skipEmpty}, eng), buf
}

// A call Front refuses never reaches the engine, and its error is an
// *Error naming backend, operation and rank over the right sentinel.
func TestFrontRefusesBeforeTheEngine(t *testing.T) {
	eng := &testEngine{}
	f, buf := newTestFront(t, true, eng)
	other, err := devmem.NewHostDevice().Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	cases := []struct {
		name     string
		do       func() error
		sentinel error
		op       string
	}{
		{"bad dtype", func() error { return f.AllReduce(buf, buf, 4, DType(99), Sum, nil) }, ErrInvalidArgument, "AllReduce"},
		{"bad op", func() error { return f.Reduce(buf, buf, 4, Float32, Op(0), 0, nil) }, ErrInvalidArgument, "Reduce"},
		{"negative count", func() error { return f.AllGather(buf, buf, -1, Float32, nil) }, ErrInvalidArgument, "AllGather"},
		{"root out of range", func() error { return f.Broadcast(buf, buf, 4, Float32, 4, nil) }, ErrInvalidArgument, "Broadcast"},
		{"recv too small", func() error { return f.AllGather(buf, buf, 64, Float32, nil) }, ErrInvalidArgument, "AllGather"},
		{"buffer on another device", func() error { return f.AllReduce(other, other, 4, Float32, Sum, nil) }, ErrInvalidArgument, "AllReduce"},
		{"peer is self", func() error { return f.Send(buf, 4, Float32, 1, nil) }, ErrInvalidArgument, "Send"},
		{"peer out of range", func() error { return f.Recv(buf, 4, Float32, 7, nil) }, ErrInvalidArgument, "Recv"},
	}
	for _, c := range cases {
		err := c.do()
		var e *Error
		if !errors.Is(err, c.sentinel) || !errors.As(err, &e) || e.Backend != "test" || e.Rank != 1 || e.Op != c.op {
			t.Errorf("%s: %v (%#v); want an *Error of test rank 1 %s wrapping %v", c.name, err, e, c.op, c.sentinel)
		}
	}
	if len(eng.calls) != 0 {
		t.Errorf("the engine ran %d refused calls: %+v", len(eng.calls), eng.calls)
	}
	eng.closed = true
	if err := f.Barrier(nil); !errors.Is(err, ErrClosed) || strings.Count(err.Error(), "closed") != 1 {
		t.Errorf("Barrier on a closed engine: %v; want ErrClosed, said once", err)
	}
	limited := limitedEngine{&testEngine{limit: errors.New("too many elements for MPI: " + ErrInvalidArgument.Error())}}
	g, gbuf := newTestFront(t, true, limited)
	if err := g.AllReduce(gbuf, gbuf, 4, Float32, Sum, nil); err == nil || len(limited.calls) != 0 {
		t.Errorf("a call the engine's Limit refuses: %v, %d runs; want an error and none", err, len(limited.calls))
	}
}

// The zero-count rule: with SkipEmpty a collective of nothing returns at
// once; without it (Debug: the ranks must meet to compare signatures) it
// reaches the engine. A Barrier and transfers always reach it.
func TestFrontZeroCountRule(t *testing.T) {
	for _, skip := range []bool{true, false} {
		eng := &testEngine{}
		f, buf := newTestFront(t, skip, eng)
		if err := f.AllReduce(buf, buf, 0, Float32, Sum, nil); err != nil {
			t.Fatal(err)
		}
		if err := f.Gather(buf, buf, 0, Int8, 0, nil); err != nil {
			t.Fatal(err)
		}
		if err := f.Barrier(nil); err != nil {
			t.Fatal(err)
		}
		if err := f.Send(buf, 0, Float32, 2, nil); err != nil {
			t.Fatal(err)
		}
		var ops []Operation
		for _, c := range eng.calls {
			ops = append(ops, c.Operation)
		}
		want := []Operation{OpBarrier, OpSend}
		if !skip {
			want = []Operation{OpAllReduce, OpGather, OpBarrier, OpSend}
		}
		if len(ops) != len(want) {
			t.Fatalf("SkipEmpty=%v: the engine ran %v, want %v", skip, ops, want)
		}
		for i := range ops {
			if ops[i] != want[i] {
				t.Errorf("SkipEmpty=%v: the engine ran %v, want %v", skip, ops, want)
				break
			}
		}
	}
}

// What the engine gets is the call as made; GroupP2P's list is the
// engine's own copy; an engine's error comes back as an *Error of the
// operation, wrapping the engine's cause.
func TestFrontHandsTheCallAndWrapsTheEnginesError(t *testing.T) {
	eng := &testEngine{}
	f, buf := newTestFront(t, true, eng)
	if err := f.Reduce(buf, buf, 8, Int32, Max, 3, nil); err != nil {
		t.Fatal(err)
	}
	got := eng.calls[0]
	if got.Operation != OpReduce || got.Count != 8 || got.DType != Int32 || got.Op != Max || got.Root != 3 || !got.Send.Same(buf) || !got.Recv.Same(buf) {
		t.Errorf("the engine got %+v", got)
	}
	tail, err := buf.Slice(16, 2) // a receive may not share the send's bytes
	if err != nil {
		t.Fatal(err)
	}
	ops := []P2P{SendTo(0, buf, 2, Uint8), RecvFrom(2, tail, 2, Uint8)}
	if err := f.GroupP2P(ops, nil); err != nil {
		t.Fatal(err)
	}
	ops[0].Peer = 3 // the caller reuses its slice
	if g := eng.calls[1].P2P; len(g) != 2 || g[0].Peer != 0 || g[1] != RecvFrom(2, tail, 2, Uint8) {
		t.Errorf("GroupP2P handed %+v; want its own copy of the transfers", g)
	}
	var one [1]P2P
	if tr := Transfers(Call{Operation: OpRecv, Recv: buf, Count: 5, DType: Float64, Root: 2}, &one); len(tr) != 1 || tr[0] != RecvFrom(2, buf, 5, Float64) {
		t.Errorf("Transfers of a Recv: %+v", tr)
	}
	recv, err := f.dev.Alloc(buf.Len())
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Free()
	cause := errors.New("the wire broke")
	eng.fail = cause
	err = f.AllToAll(buf, recv, 4, Float32, nil)
	var e *Error
	if !errors.Is(err, cause) || !errors.As(err, &e) || e.Op != "AllToAll" || e.Backend != "test" || e.Rank != 1 {
		t.Errorf("an engine failure came back as %v; want an *Error of test rank 1 AllToAll wrapping it", err)
	}
}

// CompareSignatures names every rank that called something else, and
// wraps ErrMismatch; equal signatures pass.
func TestCompareSignatures(t *testing.T) {
	call := Call{Operation: OpAllReduce, Count: 4, DType: Float32, Op: Sum}
	same := []byte(call.Signature())
	if err := CompareSignatures(call, [][]byte{same, same, same}); err != nil {
		t.Errorf("equal signatures: %v", err)
	}
	other := Call{Operation: OpAllReduce, Count: 5, DType: Float32, Op: Sum}
	err := CompareSignatures(call, [][]byte{same, []byte(other.Signature()), same, []byte("Barrier()")})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "rank 1 called AllReduce(count=5") || !strings.Contains(err.Error(), "rank 3 called Barrier()") || strings.Contains(err.Error(), "rank 2") {
		t.Errorf("%v; want ErrMismatch naming ranks 1 and 3 only", err)
	}
}
