package local_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// poison is what receive buffers hold before a call: a value no test sends.
const poison = int32(-99999)

// int32s is a buffer of c's device holding v.
func int32s(t *testing.T, c comm.Communicator, v []int32) devmem.Slice[int32] {
	t.Helper()
	return holding(t, c, v)
}

// poisoned is a buffer of n elements of poison.
func poisoned(t *testing.T, c comm.Communicator, n int) devmem.Slice[int32] {
	t.Helper()
	v := make([]int32, n)
	for i := range v {
		v[i] = poison
	}
	return int32s(t, c, v)
}

// randInt32s is n values of rng, none of them poison.
func randInt32s(rng *rand.Rand, n int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = rng.Int32N(1 << 30)
	}
	return v
}

// wantHolds checks s element by element against want.
func wantHolds(t *testing.T, what string, s devmem.Slice[int32], want []int32) {
	t.Helper()
	got, err := s.ToHost(nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: element %d is %d, want %d (all: %v, want %v)", what, i, got[i], want[i], got, want)
			return
		}
	}
}

func unchanged(n int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = poison
	}
	return v
}

// A GroupP2P whose first receive is too short for its message fails with
// ErrMismatch, writes neither buffer, and consumes both messages it matched:
// the next Recv gets the next message sent (it got the group's second,
// stale one, with no error), and the sender's calls all succeed.
func TestGroupP2PMismatchConsumesEveryMatchedMessage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cs := newGroup(t, 2)
	first, second, third := randInt32s(rng, 4), randInt32s(rng, 4), randInt32s(rng, 4)
	if err := cs[0].GroupP2P([]comm.P2P{comm.SendSlice(1, int32s(t, cs[0], first)), comm.SendSlice(1, int32s(t, cs[0], second))}, nil); err != nil {
		t.Fatalf("rank 0's GroupP2P of two sends: %v", err)
	}
	if err := comm.Send(cs[0], int32s(t, cs[0], third), 1, nil); err != nil {
		t.Fatalf("rank 0's Send after it: %v", err)
	}
	a, b := poisoned(t, cs[1], 4), poisoned(t, cs[1], 4)
	a3, err := a.Sub(0, 3)
	if err != nil {
		t.Fatal(err)
	}
	err = cs[1].GroupP2P([]comm.P2P{comm.RecvSlice(0, a3), comm.RecvSlice(0, b)}, nil)
	wantError(t, err, comm.ErrMismatch, 1, "receive of 3 int32 from rank 0 met a send of 4 int32", "consumed the messages they matched and wrote nothing")
	wantHolds(t, "the short receive's buffer after the failed group", a, unchanged(4))
	wantHolds(t, "the second receive's buffer after the failed group", b, unchanged(4))
	d := poisoned(t, cs[1], 4)
	if err := comm.Recv(cs[1], d, 0, nil); err != nil {
		t.Fatalf("the Recv after the failed group: %v", err)
	}
	wantHolds(t, "the Recv after the failed group (rank 0's third message)", d, third)
}

// A GroupP2P whose second receive mismatches leaves the first receive's
// buffer as it was (it was written although the call failed), and the
// messages stay in step.
func TestGroupP2PMismatchWritesNoBuffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cs := newGroup(t, 2)
	x, y, z := randInt32s(rng, 4), randInt32s(rng, 4), randInt32s(rng, 5)
	if err := cs[0].GroupP2P([]comm.P2P{comm.SendSlice(1, int32s(t, cs[0], x)), comm.SendSlice(1, int32s(t, cs[0], y))}, nil); err != nil {
		t.Fatal(err)
	}
	a, b := poisoned(t, cs[1], 4), poisoned(t, cs[1], 4)
	b3, err := b.Sub(0, 3)
	if err != nil {
		t.Fatal(err)
	}
	err = cs[1].GroupP2P([]comm.P2P{comm.RecvSlice(0, a), comm.RecvSlice(0, b3)}, nil)
	wantError(t, err, comm.ErrMismatch, 1, "receive of 3 int32 from rank 0 met a send of 4 int32")
	wantHolds(t, "the first receive's buffer (matched, right size) after the failed group", a, unchanged(4))
	wantHolds(t, "the mismatched receive's buffer", b, unchanged(4))
	if err := comm.Send(cs[0], int32s(t, cs[0], z), 1, nil); err != nil {
		t.Fatal(err)
	}
	d := poisoned(t, cs[1], 5)
	if err := comm.Recv(cs[1], d, 0, nil); err != nil {
		t.Fatalf("the Recv after the failed group: %v", err)
	}
	wantHolds(t, "the Recv after the failed group", d, z)
}

// Three ranks, running at once: rank 1's group sends to rank 0 and
// receives from 0 (a dtype of the same size: a mismatch on local) and from
// 2 (right). Rank 0's receive of rank 1's message and both senders' calls
// succeed; rank 1's group fails, writes nothing and consumes both
// messages, so the next exchange, in the same pattern, is right.
func TestGroupP2PMismatchAmongThreeRanksKeepsTheSendersInStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cs := newGroup(t, 3, comm.WithTimeout(10*time.Second))
	const n = 6
	var from0, from1, from2 [2][]int32
	for k := range 2 {
		from0[k], from1[k], from2[k] = randInt32s(rng, n), randInt32s(rng, n), randInt32s(rng, n)
	}
	for k := range 2 {
		got0, got1a, got1b := poisoned(t, cs[0], n), poisoned(t, cs[1], n), poisoned(t, cs[1], n)
		send0, send1, send2 := int32s(t, cs[0], from0[k]), int32s(t, cs[1], from1[k]), int32s(t, cs[2], from2[k])
		errs := each(cs, []int{0, 1, 2}, func(c comm.Communicator) error {
			switch c.Rank() {
			case 0:
				return c.GroupP2P([]comm.P2P{comm.SendSlice(1, send0), comm.RecvSlice(1, got0)}, nil)
			case 1:
				recv0 := comm.RecvSlice(0, got1a)
				if k == 0 {
					recv0.DType = comm.Float32 // same size, another dtype
				}
				return c.GroupP2P([]comm.P2P{comm.SendSlice(0, send1), recv0, comm.RecvSlice(2, got1b)}, nil)
			}
			return comm.Send(c, send2, 1, nil)
		})
		for _, r := range []int{0, 2} {
			if errs[r] != nil {
				t.Errorf("exchange %d: rank %d: %v", k, r, errs[r])
			}
		}
		wantHolds(t, "rank 0's receive from rank 1", got0, from1[k])
		if k == 0 {
			wantError(t, errs[1], comm.ErrMismatch, 1, "receive of 6 float32 from rank 0 met a send of 6 int32")
			wantHolds(t, "rank 1's receive from rank 0 in the failed group", got1a, unchanged(n))
			wantHolds(t, "rank 1's receive from rank 2 in the failed group", got1b, unchanged(n))
			continue
		}
		if errs[1] != nil {
			t.Fatalf("exchange after the failed one: rank 1: %v", errs[1])
		}
		wantHolds(t, "rank 1's receive from rank 0 after the failed group", got1a, from0[k])
		wantHolds(t, "rank 1's receive from rank 2 after the failed group", got1b, from2[k])
	}
}

// A GroupP2P whose receive gets no message (a timeout) consumes nothing
// and writes nothing: the message another of its receives took goes back,
// and its send to itself is not left queued for a later group. Retried
// once the late rank has sent, the same group gets every message right.
func TestGroupP2PThatTimesOutConsumesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cs := newGroup(t, 3, comm.WithTimeout(50*time.Millisecond))
	const n = 5
	x, y, s1, s2 := randInt32s(rng, n), randInt32s(rng, n), randInt32s(rng, n), randInt32s(rng, n)
	if err := comm.Send(cs[0], int32s(t, cs[0], x), 1, nil); err != nil {
		t.Fatal(err)
	}
	a, b, self := poisoned(t, cs[1], n), poisoned(t, cs[1], n), poisoned(t, cs[1], n)
	ops := func(s []int32) []comm.P2P {
		return []comm.P2P{comm.SendSlice(1, int32s(t, cs[1], s)), comm.RecvSlice(0, a), comm.RecvSlice(2, b), comm.RecvSlice(1, self)}
	}
	wantError(t, cs[1].GroupP2P(ops(s1), nil), comm.ErrTimeout, 1, "receive of 5 int32 from rank 2", "rank 2 never sent")
	wantHolds(t, "the receive from rank 0 (its message came) in the group that timed out", a, unchanged(n))
	wantHolds(t, "the receive from rank 2 in the group that timed out", b, unchanged(n))
	wantHolds(t, "the receive from self in the group that timed out", self, unchanged(n))

	if err := comm.Send(cs[2], int32s(t, cs[2], y), 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := cs[1].GroupP2P(ops(s2), nil); err != nil {
		t.Fatalf("the group retried: %v", err)
	}
	wantHolds(t, "the retried group's receive from rank 0", a, x)
	wantHolds(t, "the retried group's receive from rank 2", b, y)
	wantHolds(t, "the retried group's receive from self (its own send, not the failed group's)", self, s2)
	if slices.Equal(s1, s2) {
		t.Fatal("the two sends to self are equal: the test cannot tell them apart")
	}
}
