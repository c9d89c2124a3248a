package local_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/conformance"
	"github.com/gpucomm/gpucomm/devmem"
)

func group(n int) conformance.NewGroup {
	return func() ([]comm.Communicator, error) { return local.NewGroup(n) }
}

func TestConformance(t *testing.T) { conformance.Run(t, group(4)) }

// Uneven and degenerate sizes: one rank (every peer is itself), two (left
// and right neighbours coincide) and three (no pairing of ranks).
func TestConformanceOtherSizes(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			conformance.RunConfig(t, group(n), conformance.Config{Short: true})
		})
	}
}

func newGroup(t *testing.T, n int, opts ...comm.Option) []comm.Communicator {
	t.Helper()
	cs, err := local.NewGroup(n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

// each runs f for the given ranks at once and returns their errors.
func each(cs []comm.Communicator, ranks []int, f func(c comm.Communicator) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { errs[r] = f(cs[r]) })
	}
	wg.Wait()
	return errs
}

func float32s(t *testing.T, c comm.Communicator, v ...float32) devmem.Slice[float32] {
	t.Helper()
	return holding(t, c, v)
}

// holding is a buffer of c's device holding v, freed when t ends.
func holding[T any](t *testing.T, c comm.Communicator, v []T) devmem.Slice[T] {
	t.Helper()
	s, err := devmem.AllocSlice[T](c.Device(), len(v))
	if err == nil {
		err = s.CopyFrom(v, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Free() })
	return s
}

func wantError(t *testing.T, err error, sentinel error, rank int, parts ...string) {
	t.Helper()
	var ce *comm.Error
	if !errors.Is(err, sentinel) || !errors.As(err, &ce) || ce.Backend != local.Name || ce.Rank != rank {
		t.Errorf("rank %d: got %v; want a local *comm.Error of rank %d wrapping %v", rank, err, rank, sentinel)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("rank %d: %q does not say %q", rank, err, p)
		}
	}
}

func TestTimeoutNamesTheMissingRank(t *testing.T) {
	cs := newGroup(t, 3, comm.WithTimeout(50*time.Millisecond))
	errs := each(cs, []int{0, 1}, func(c comm.Communicator) error {
		x := float32s(t, c, 1, 2)
		return comm.AllReduce(c, x, x, comm.Sum, nil)
	})
	for r := range 2 {
		wantError(t, errs[r], comm.ErrTimeout, r, "AllReduce", "never arrived: 2")
	}

	// On a stream the timeout surfaces at Synchronize.
	cs = newGroup(t, 2, comm.WithTimeout(50*time.Millisecond))
	s, err := cs[1].Device().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	if err := cs[1].Barrier(s); err != nil {
		t.Fatal(err)
	}
	wantError(t, s.Synchronize(), comm.ErrTimeout, 1, "Barrier", "never arrived: 0")
	if err := s.Destroy(); err != nil {
		t.Error(err)
	}
}

func TestRecvTimeoutNamesTheSender(t *testing.T) {
	cs := newGroup(t, 3, comm.WithTimeout(50*time.Millisecond))
	x := float32s(t, cs[0], 0, 0, 0)
	wantError(t, comm.Recv(cs[0], x, 2, nil), comm.ErrTimeout, 0, "rank 2 never sent")
	if got, err := x.ToHost(nil); err != nil || got[0] != 0 || got[1] != 0 || got[2] != 0 {
		t.Errorf("a receive that timed out wrote %v (%v)", got, err)
	}
}

func TestMismatchedCollectivesNameTheRanks(t *testing.T) {
	cs := newGroup(t, 3)
	errs := each(cs, []int{0, 1, 2}, func(c comm.Communicator) error {
		x := float32s(t, c, 1, 2, 3, 4)
		switch c.Rank() {
		case 1:
			return comm.Broadcast(c, x, x, 0, nil)
		case 2:
			sub, _ := x.Sub(0, 3)
			return comm.AllReduce(c, sub, sub, comm.Sum, nil)
		}
		return comm.AllReduce(c, x, x, comm.Sum, nil)
	})
	for r, err := range errs {
		wantError(t, err, comm.ErrMismatch, r, "rank 0 called AllReduce(count=4", "rank 1 called Broadcast", "rank 2 called AllReduce(count=3")
	}
	// The ranks stay in step: the next collective works.
	errs = each(cs, []int{0, 1, 2}, func(c comm.Communicator) error { return c.Barrier(nil) })
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: Barrier after a mismatch: %v", r, err)
		}
	}
}

func TestReceiveOfAnotherSizeIsAMismatch(t *testing.T) {
	cs := newGroup(t, 2)
	if err := comm.Send(cs[0], float32s(t, cs[0], 1, 2, 3), 1, nil); err != nil {
		t.Fatal(err)
	}
	y := float32s(t, cs[1], 9, 9)
	wantError(t, comm.Recv(cs[1], y, 0, nil), comm.ErrMismatch, 1, "receive of 2 float32 from rank 0 met a send of 3 float32")
	if got, _ := y.ToHost(nil); got[0] != 9 || got[1] != 9 {
		t.Errorf("a mismatched receive wrote %v", got)
	}
}

// Send is eager: it completes with no receive posted, and the data sent is
// what the buffer held at the call.
func TestSendIsEager(t *testing.T) {
	cs := newGroup(t, 2)
	x := float32s(t, cs[0], 1, 2, 3)
	if err := comm.Send(cs[0], x, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := x.CopyFrom([]float32{7, 7, 7}, nil); err != nil {
		t.Fatal(err)
	}
	y := float32s(t, cs[1], 0, 0, 0)
	if err := comm.Recv(cs[1], y, 0, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := y.ToHost(nil); got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("received %v, want [1 2 3]", got)
	}
}

func TestSplitSharesDevicesAndRejectsNegativeColors(t *testing.T) {
	cs := newGroup(t, 4)
	subs := make([]comm.Communicator, 4)
	errs := each(cs, []int{0, 1, 2, 3}, func(c comm.Communicator) (err error) {
		subs[c.Rank()], err = c.Split(c.Rank()%2, -c.Rank())
		return err
	})
	for r, err := range errs {
		switch {
		case err != nil:
			t.Fatalf("rank %d: %v", r, err)
		case subs[r].Device() != cs[r].Device():
			t.Errorf("rank %d: subcommunicator on %v, parent on %v", r, subs[r].Device(), cs[r].Device())
		case subs[r].Rank() != 1-r/2 || subs[r].Size() != 2:
			t.Errorf("rank %d: new rank %d of %d, want %d of 2", r, subs[r].Rank(), subs[r].Size(), 1-r/2)
		}
		subs[r].Close()
	}
	// Split is collective: every rank calls it, each with color -5.
	bad := make([]comm.Communicator, 4)
	errs = each(cs, []int{0, 1, 2, 3}, func(c comm.Communicator) (err error) {
		bad[c.Rank()], err = c.Split(-5, 0)
		return err
	})
	for r, err := range errs {
		if bad[r] != nil {
			t.Errorf("rank %d: Split(-5) returned a communicator", r)
		}
		wantError(t, err, comm.ErrInvalidArgument, r, "color -5")
	}
	// One rank's bad color (or a key MPI's int cannot hold) fails every
	// rank, naming it, where the others waited for it for ever.
	for _, c := range []struct {
		color, key int
		says       string
	}{{-2, 0, "rank 2: color -2: want >= 0 or comm.Undefined"}, {0, 1 << 40, "rank 2: key 1099511627776 does not fit MPI's int"}, {1 << 40, 0, "rank 2: color 1099511627776 does not fit MPI's int"}} {
		errs = each(cs, []int{0, 1, 2, 3}, func(cm comm.Communicator) (err error) {
			color, key := 0, cm.Rank()
			if cm.Rank() == 2 {
				color, key = c.color, c.key
			}
			bad[cm.Rank()], err = cm.Split(color, key)
			return err
		})
		for r, err := range errs {
			if bad[r] != nil {
				t.Errorf("rank %d: Split beside rank 2's %q returned a communicator", r, c.says)
				bad[r].Close()
			}
			wantError(t, err, comm.ErrInvalidArgument, r, c.says)
		}
	}
}

func TestNewGroupRejectsEmptyAndHugeGroups(t *testing.T) {
	for _, n := range []int{0, -1, local.MaxRanks + 1, 10_000_000} {
		cs, err := local.NewGroup(n)
		if cs != nil || !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("NewGroup(%d) = %v, %v; want ErrInvalidArgument", n, cs, err)
		}
	}
}

func TestOpenGivesOneRank(t *testing.T) {
	if v, err := comm.Probe(local.Name); err != nil || !v.Usable {
		t.Fatalf("Probe: %+v, %v", v, err)
	}
	c, err := comm.Open(local.Name)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rank() != 0 || c.Size() != 1 || c.Backend() != local.Name || c.Device() == nil {
		t.Errorf("rank %d of %d on %q, device %v", c.Rank(), c.Size(), c.Backend(), c.Device())
	}
	x := float32s(t, c, 1.5, -2)
	y := float32s(t, c, 0, 0)
	if err := comm.AllReduce(c, x, y, comm.Sum, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := y.ToHost(nil); got[0] != 1.5 || got[1] != -2 {
		t.Errorf("one-rank AllReduce gave %v", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wantError(t, c.Close(), comm.ErrClosed, 0, "closed twice")
}

// NewGroup refuses the options comm.Open refuses, as Open does (it took a
// negative timeout and any chunk size without a word), and takes the ones
// Open takes.
func TestNewGroupRefusesTheOptionsOpenRefuses(t *testing.T) {
	t.Setenv("GPUCOMM_BACKEND", "")
	t.Setenv("GPUCOMM_DEVICE", "") // cuda there would make Open refuse every option
	for name, c := range map[string]struct {
		opt  comm.Option
		says string
		want error
	}{
		"WithTimeout(-1s)":      {comm.WithTimeout(-time.Second), "timeout -1s: want 0 (none) or more", comm.ErrInvalidArgument},
		"WithTimeout(-1ns)":     {comm.WithTimeout(-1), "timeout -1ns", comm.ErrInvalidArgument},
		"WithChunkBytes(1)":     {comm.WithChunkBytes(1), "a pipelining chunk of 1 bytes", comm.ErrInvalidArgument},
		"WithChunkBytes(-5)":    {comm.WithChunkBytes(-5), "a pipelining chunk of -5 bytes", comm.ErrInvalidArgument},
		"WithChunkBytes(Min-1)": {comm.WithChunkBytes(comm.MinChunkBytes - 1), fmt.Sprintf("a pipelining chunk of %d bytes", comm.MinChunkBytes-1), comm.ErrInvalidArgument},
		"WithChunkBytes(Max+1)": {comm.WithChunkBytes(comm.MaxChunkBytes + 1), fmt.Sprintf("a pipelining chunk of %d bytes", comm.MaxChunkBytes+1), comm.ErrInvalidArgument},
		"WithDevice(bogus)":     {comm.WithDevice("bogus"), `unknown device "bogus"`, comm.ErrInvalidArgument},
		"nil option":            {nil, "option 1 of 1 is nil", comm.ErrInvalidArgument},
		"WithDevice(cuda)":      {comm.WithDevice("cuda"), "simulated host devices only", comm.ErrUnsupported},
	} {
		cs, err := local.NewGroup(2, c.opt)
		if cs != nil || !errors.Is(err, c.want) || !strings.Contains(fmt.Sprint(err), c.says) {
			t.Errorf("NewGroup(2, %s) = %d communicators, %v; want none and an error wrapping %v that says %q", name, len(cs), err, c.want, c.says)
		}
		for _, c := range cs {
			c.Close()
		}
		if o, err := comm.Open(local.Name, c.opt); !errors.Is(err, c.want) {
			t.Errorf("comm.Open(local, %s) = %v; the test assumes Open refuses it with %v", name, err, c.want)
			if o != nil {
				o.Close()
			}
		}
	}
	for name, opt := range map[string]comm.Option{
		"WithTimeout(0)":          comm.WithTimeout(0),
		"WithTimeout(1m)":         comm.WithTimeout(time.Minute),
		"WithChunkBytes(0)":       comm.WithChunkBytes(0),
		"WithChunkBytes(Min)":     comm.WithChunkBytes(comm.MinChunkBytes),
		"WithChunkBytes(Max)":     comm.WithChunkBytes(comm.MaxChunkBytes),
		"WithDevice(host)":        comm.WithDevice("host"),
		"WithNodeBytes(-1) (off)": comm.WithNodeBytes(-1),
	} {
		cs, err := local.NewGroup(2, opt)
		if err != nil || len(cs) != 2 {
			t.Errorf("NewGroup(2, %s) = %d communicators, %v; want 2 and no error", name, len(cs), err)
		}
		for _, c := range cs {
			c.Close()
		}
		o, err := comm.Open(local.Name, opt)
		if err != nil {
			t.Errorf("comm.Open(local, %s): %v; the test assumes Open takes it", name, err)
			continue
		}
		o.Close()
	}
}
