package local_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

// A nil *local.Comm and a zero local.Comm{} are no communicators: every
// call returns an error wrapping ErrInvalidArgument and leaves the buffers
// it was given as they were; Rank and LocalRank are -1, Size and LocalSize
// 0, Device nil; Abort does nothing (each dereferenced nil and panicked).
func TestNilAndZeroCommAreNoCommunicator(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	dev := devmem.NewHostDevice()
	const n = 8
	data := make([]int32, 2*n)
	for i := range data {
		data[i] = rng.Int32()
	}
	for _, tc := range []struct {
		name string
		c    *local.Comm
	}{{"nil *local.Comm", nil}, {"zero local.Comm{}", &local.Comm{}}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			send, err := devmem.AllocSlice[int32](dev, 2*n)
			if err == nil {
				err = send.CopyFrom(data, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer send.Free()
			recv := poisonedOn(t, dev, 2*n)
			sb, rb := send.Buffer(), recv.Buffer()
			calls := map[string]func() error{
				"AllReduce":     func() error { return c.AllReduce(sb, rb, n, comm.Int32, comm.Sum, nil) },
				"Reduce":        func() error { return c.Reduce(sb, rb, n, comm.Int32, comm.Sum, 0, nil) },
				"Broadcast":     func() error { return c.Broadcast(sb, rb, n, comm.Int32, 0, nil) },
				"AllGather":     func() error { return c.AllGather(sb, rb, 1, comm.Int32, nil) },
				"ReduceScatter": func() error { return c.ReduceScatter(sb, rb, 1, comm.Int32, comm.Sum, nil) },
				"AllToAll":      func() error { return c.AllToAll(sb, rb, 1, comm.Int32, nil) },
				"Gather":        func() error { return c.Gather(sb, rb, 1, comm.Int32, 0, nil) },
				"Scatter":       func() error { return c.Scatter(sb, rb, 1, comm.Int32, 0, nil) },
				"Send":          func() error { return c.Send(sb, n, comm.Int32, 0, nil) },
				"Recv":          func() error { return c.Recv(rb, n, comm.Int32, 0, nil) },
				"GroupP2P": func() error {
					return c.GroupP2P([]comm.P2P{comm.SendTo(0, sb, n, comm.Int32), comm.RecvFrom(0, rb, n, comm.Int32)}, nil)
				},
				"Barrier": func() error { return c.Barrier(nil) },
				"Split": func() error {
					sub, err := c.Split(0, 0)
					if sub != nil {
						t.Errorf("Split returned a communicator, %v", sub)
					}
					return err
				},
				"Close": c.Close,
			}
			for name, call := range calls {
				err := noPanic(t, name, call)
				var ce *comm.Error
				if !errors.Is(err, comm.ErrInvalidArgument) || !errors.As(err, &ce) || ce.Backend != local.Name || !strings.Contains(err.Error(), "no communicator") {
					t.Errorf("%s: %v; want a local *comm.Error wrapping ErrInvalidArgument that says it is no communicator", name, err)
				}
				if err != nil && (!strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "rank -1")) {
					t.Errorf("%s: %q does not name the call, or names rank -1", name, err)
				}
				wantHolds(t, name+": recv after the call", recv, unchanged(2*n))
				wantHolds(t, name+": send after the call", send, data)
			}
			noPanic(t, "Rank", func() error {
				if r, s, lr, ls, d := c.Rank(), c.Size(), c.LocalRank(), c.LocalSize(), c.Device(); r != -1 || s != 0 || lr != -1 || ls != 0 || d != nil {
					t.Errorf("Rank %d Size %d LocalRank %d LocalSize %d Device %v; want -1 0 -1 0 nil", r, s, lr, ls, d)
				}
				if b := c.Backend(); b != local.Name {
					t.Errorf("Backend %q", b)
				}
				return nil
			})
			noPanic(t, "Abort", func() error {
				if !comm.Abort(c, errors.New("x")) {
					t.Errorf("comm.Abort found no Abort")
				}
				return nil
			})
		})
	}
	// The communicators NewGroup makes are still themselves.
	cs := newGroup(t, 2)
	if cs[1].Rank() != 1 || cs[1].Size() != 2 || cs[1].Device() == nil {
		t.Errorf("rank %d of %d on %v", cs[1].Rank(), cs[1].Size(), cs[1].Device())
	}
}

// noPanic runs f, turning a panic into a test error.
func noPanic(t *testing.T, what string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panicked: %v", what, p)
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}

// poisonedOn is n elements of poison on dev.
func poisonedOn(t *testing.T, dev *devmem.Device, n int) devmem.Slice[int32] {
	t.Helper()
	s, err := devmem.AllocSlice[int32](dev, n)
	if err == nil {
		err = s.CopyFrom(unchanged(n), nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Free() })
	return s
}

// SameGroup tells the ranks of one group from those of another group, of
// another Split colour, or no communicator at all.
func TestSameGroupTellsGroupsApart(t *testing.T) {
	a, err := local.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := local.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	subs := make([]comm.Communicator, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range a {
		wg.Go(func() { subs[r], errs[r] = a[r].Split(r, 0) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]struct {
		x, y comm.Communicator
		want bool
	}{
		"ranks of one group":    {a[0], a[1], true},
		"a rank and itself":     {a[1], a[1], true},
		"ranks of two groups":   {a[0], b[1], false},
		"two Split colours":     {subs[0], subs[1], false},
		"a Split and its world": {subs[0], a[0], false},
		"a nil *Comm":           {(*local.Comm)(nil), a[0], false},
		"a zero Comm":           {&local.Comm{}, &local.Comm{}, false},
		"no communicator":       {nil, a[0], false},
	} {
		if got := local.SameGroup(c.x, c.y); got != c.want {
			t.Errorf("%s: SameGroup = %v, want %v", name, got, c.want)
		}
	}
}
