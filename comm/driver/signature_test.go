package driver

import (
	"errors"
	"strings"
	"testing"
)

// meaningless is what a signature must not show: the zero count and
// element type of an operation that takes neither.
func meaningless(sig string) bool {
	return strings.Contains(sig, "count=0") || strings.Contains(sig, "DType(") || strings.Contains(sig, "dtype=)")
}

// A signature shows the fields the operation takes, and no others: Barrier
// and Split take no count or element type, and a GroupP2P's transfers each
// have their own, so it shows how many it holds.
func TestSignatureShowsOnlyWhatTheOperationTakes(t *testing.T) {
	_, a, b := hostBufs(t, 64)
	group, _ := GroupCall([]P2P{SendTo(1, a, 4, Float32), RecvFrom(1, b, 4, Float32)}, nil)
	send, _ := SendCall(a, 7, Uint8, 2, nil)
	for _, c := range []struct {
		call Call
		want string
	}{
		{Call{Operation: OpBarrier}, "Barrier()"},
		{Call{Operation: OpSplit}, "Split()"},
		{group, "GroupP2P(transfers=2)"},
		{Call{Operation: OpGroupP2P}, "GroupP2P()"},
		{Call{Operation: OpAllReduce, Count: 4, DType: Float32, Op: Sum}, "AllReduce(count=4 dtype=float32 op=sum)"},
		{Call{Operation: OpReduce, Count: 0, DType: Int32, Op: Max, Root: 1}, "Reduce(count=0 dtype=int32 op=max root=1)"},
		{Call{Operation: OpAllGather, Count: 3, DType: Float64}, "AllGather(count=3 dtype=float64)"},
		{send, "Send(count=7 dtype=uint8)"},
	} {
		if got := c.call.Signature(); got != c.want {
			t.Errorf("%v's signature is %q, want %q", c.call.Operation, got, c.want)
		}
	}
}

// The error of a mismatch names what each rank called without the fields
// its operation does not take.
func TestMismatchNamesABarrierWithoutCountOrType(t *testing.T) {
	call := Call{Operation: OpAllReduce, Count: 5, DType: Float32, Op: Sum}
	same := []byte(call.Signature())
	err := CompareSignatures(call, [][]byte{same, []byte(Call{Operation: OpBarrier}.Signature())})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "rank 1 called Barrier():") || meaningless(err.Error()) {
		t.Errorf("CompareSignatures = %v, want ErrMismatch saying rank 1 called Barrier()", err)
	}
}

// A trace entry's signature is its call's, for every kind of operation, so
// that "gpucomm trace" and the errors name a call alike; the entry itself
// holds no element type for operations that take none.
func TestTraceSignatureIsTheCallsSignature(t *testing.T) {
	traceOn(t)
	dev, a, b := hostBufs(t, 64)
	f := NewFront(FrontConfig{Backend: "fake", Rank: 0, Size: 2, Device: dev}, &fakeEngine{})
	group := []P2P{SendTo(1, a, 4, Float32), RecvFrom(1, b, 4, Float32), SendTo(1, a, 2, Int32)}
	calls := []Call{
		{Operation: OpBarrier},
		{Operation: OpGroupP2P, P2P: group},
		{Operation: OpSend, Send: a, Count: 3, DType: Int64, Root: 1},
		{Operation: OpAllReduce, Send: a, Recv: b, Count: 8, DType: Float32, Op: Min},
		{Operation: OpBroadcast, Send: a, Recv: b, Count: 2, DType: Int32, Root: 1},
	}
	for _, c := range calls {
		if err := f.Do(c); err != nil {
			t.Fatalf("%v: %v", c.Operation, err)
		}
	}
	rec := f.Recorder().Snapshot("test")
	if len(rec.Entries) != len(calls) {
		t.Fatalf("%d entries, want %d", len(rec.Entries), len(calls))
	}
	for i, c := range calls {
		e := rec.Entries[i]
		if got, want := e.Signature(), c.Signature(); got != want || meaningless(got) {
			t.Errorf("entry %d (%s): signature %q, want its call's %q", i, e.Op, got, want)
		}
		if takes := c.Operation != OpBarrier && c.Operation != OpGroupP2P; takes != (e.DType != "") {
			t.Errorf("entry %d (%s) has dtype %q", i, e.Op, e.DType)
		}
	}
	if got := rec.Entries[1].Signature(); got != "GroupP2P(transfers=3)" {
		t.Errorf("a GroupP2P of 3 transfers is traced as %q", got)
	}
}
