package nccl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/conformance"
	"github.com/gpucomm/gpucomm/devmem"
)

// These tests run the backend's own code over the fakes of fake_test.go:
// everything but the NCCL and MPI calls themselves.

func fakeNewGroup(t *testing.T, net *fakeNet, n int, libs func(int) *fakeLib) conformance.NewGroup {
	return func() ([]comm.Communicator, error) {
		cs, errs := openFake(t, net, n, comm.Options{}, libs)
		var out []comm.Communicator
		for _, c := range cs {
			if c != nil {
				out = append(out, c)
			}
		}
		if err := errors.Join(errs...); err != nil {
			for _, c := range out {
				c.Close()
			}
			return nil, err
		}
		return out, nil
	}
}

func TestConformanceOverFakeNCCL(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			net := newFakeNet()
			// The large cases on three ranks add only time: two cover them.
			conformance.RunConfig(t, fakeNewGroup(t, net, n, nil), conformance.Config{Short: testing.Short() || n > 2})
			net.checkClean(t)
		})
	}
}

// Without ncclCommSplit, or when one rank's NCCL lacks it, Split must take
// the unique-id fallback on every rank.
func TestSplitFallsBackWithoutCommSplit(t *testing.T) {
	for name, libs := range map[string]func(int) *fakeLib{
		"no rank has it":    func(int) *fakeLib { return &fakeLib{noSplit: true} },
		"rank 1 lacks it":   func(r int) *fakeLib { return &fakeLib{noSplit: r == 1} },
		"every rank has it": nil,
	} {
		t.Run(name, func(t *testing.T) {
			net := newFakeNet()
			conformance.RunConfig(t, fakeNewGroup(t, net, 4, libs), conformance.Config{Run: "^Split$"})
			net.checkClean(t) // a fake without CommSplit records any call of it
		})
	}
}

func TestTwoRanksOnOneDeviceAreRefusedBeforeNCCL(t *testing.T) {
	net := newFakeNet()
	// Ranks 0 and 2 share a GPU, and so do 1 and 3.
	libs := func(r int) *fakeLib { return &fakeLib{device: [16]byte{byte(r%2 + 1), 0xab}} }
	cs, errs := openFake(t, net, 4, comm.Options{}, libs)
	for r, err := range errs {
		var ce *comm.Error
		switch {
		case cs[r] != nil:
			t.Errorf("rank %d: opened a communicator", r)
			cs[r].Close()
		case !errors.Is(err, comm.ErrDuplicateGPU) || !errors.As(err, &ce):
			t.Errorf("rank %d: %v; want a *comm.Error wrapping ErrDuplicateGPU", r, err)
		case ce.Rank != r || ce.Backend != Name:
			t.Errorf("rank %d: error names rank %d of %q", r, ce.Rank, ce.Backend)
		case !strings.Contains(err.Error(), "ranks 0 and 2 share GPU-01ab0000-") ||
			!strings.Contains(err.Error(), "ranks 1 and 3 share GPU-02ab0000-"):
			t.Errorf("rank %d: %v; want both pairs of ranks and their GPUs named", r, err)
		}
		if r > 0 && errs[0] != nil && err != nil && err.Error() != strings.Replace(errs[0].Error(), "rank 0", fmt.Sprintf("rank %d", r), 1) {
			t.Errorf("ranks disagree:\n rank 0: %v\n rank %d: %v", errs[0], r, err)
		}
	}
	if n := net.calls.Load(); n != 0 {
		t.Errorf("%d NCCL calls before the refusal; want none", n)
	}
}

func TestThreeRanksOnOneDeviceAreNamed(t *testing.T) {
	net := newFakeNet()
	_, errs := openFake(t, net, 3, comm.Options{}, func(int) *fakeLib { return &fakeLib{device: [16]byte{7}} })
	for r, err := range errs {
		if !errors.Is(err, comm.ErrDuplicateGPU) || !strings.Contains(err.Error(), "ranks 0, 1 and 2 share GPU-07") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A device one rank cannot use is an error on every rank, wrapping the
// same sentinel, and NCCL is never called.
func TestOneRanksDeviceFailureFailsEveryRank(t *testing.T) {
	net := newFakeNet()
	bad := fmt.Errorf("this rank's device is host:9: nccl needs a GPU; use local or mpi on the host device: %w", comm.ErrUnsupported)
	libs := func(r int) *fakeLib {
		if r == 1 {
			return &fakeLib{badDevice: bad}
		}
		return nil
	}
	_, errs := openFake(t, net, 3, comm.Options{}, libs)
	for r, err := range errs {
		if !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), "nccl needs a GPU; use local or mpi on the host device") {
			t.Errorf("rank %d: %v; want rank 1's ErrUnsupported", r, err)
		}
		if r != 1 && !strings.Contains(err.Error(), "rank 1: ") {
			t.Errorf("rank %d: %v does not name rank 1", r, err)
		}
	}
	if n := net.calls.Load(); n != 0 {
		t.Errorf("%d NCCL calls; want none", n)
	}
}

func TestRankZerosUniqueIDFailureFailsEveryRank(t *testing.T) {
	net := newFakeNet()
	libs := func(int) *fakeLib {
		return &fakeLib{badID: fmt.Errorf("fake ncclGetUniqueId: no network interface: %w", comm.ErrUnsupported)}
	}
	_, errs := openFake(t, net, 3, comm.Options{}, libs)
	for r, err := range errs {
		if !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), "no network interface") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if n := net.calls.Load(); n != 1 {
		t.Errorf("%d NCCL calls; want rank 0's ncclGetUniqueId only", n)
	}
}

func TestDebugFindsMismatchedCollectivesBeforeNCCL(t *testing.T) {
	net := newFakeNet()
	cs := mustOpenFake(t, net, 2, comm.Options{Debug: true}, nil)
	defer closeAll(t, cs)
	errs := mismatchedAllReduces(cs)
	for r, err := range errs {
		other := fmt.Sprintf("rank %d called AllReduce(count=%d ", 1-r, 4*(2-r))
		if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), other) {
			t.Errorf("rank %d: %v; want ErrMismatch naming the other rank's call", r, err)
		}
	}
	if n := net.ops.Load(); n != 0 {
		t.Errorf("%d operations reached NCCL; want none", n)
	}
}

// mismatchedAllReduces has rank r of cs call AllReduce of 4·(r+1) int32s,
// every rank at once, and returns each rank's error.
func mismatchedAllReduces(cs []*Comm) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() {
			buf, err := c.Device().Alloc(64)
			if err != nil {
				errs[r] = err
				return
			}
			defer buf.Free()
			errs[r] = c.AllReduce(buf, buf, 4*(r+1), comm.Int32, comm.Sum, nil)
		})
	}
	wg.Wait()
	return errs
}

// Transfers to self never reach NCCL, which refuses a send to self without
// its receive in the same group: they pair up in order and are copied.
func TestGroupP2PPairsTransfersToSelf(t *testing.T) {
	net := newFakeNet()
	cs := mustOpenFake(t, net, 1, comm.Options{}, nil)
	defer closeAll(t, cs)
	c := cs[0]
	a, _ := devmem.AllocSlice[int32](c.Device(), 4)
	b, _ := devmem.AllocSlice[int32](c.Device(), 4)
	x, _ := devmem.AllocSlice[int32](c.Device(), 4)
	y, _ := devmem.AllocSlice[int32](c.Device(), 4)
	for _, s := range []devmem.Slice[int32]{a, b, x, y} {
		defer s.Free()
	}
	a.CopyFrom([]int32{1, 2, 3, 4}, nil)
	b.CopyFrom([]int32{5, 6, 7, 8}, nil)
	x.CopyFrom([]int32{-1, -1, -1, -1}, nil)
	y.CopyFrom([]int32{-1, -1, -1, -1}, nil)
	err := c.GroupP2P([]comm.P2P{comm.SendSlice(0, a), comm.RecvSlice(0, x), comm.SendSlice(0, b), comm.RecvSlice(0, y)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gx, _ := x.ToHost(nil)
	gy, _ := y.ToHost(nil)
	if !slices.Equal(gx, []int32{1, 2, 3, 4}) || !slices.Equal(gy, []int32{5, 6, 7, 8}) {
		t.Errorf("got %v and %v; want the first send in the first receive, the second in the second", gx, gy)
	}
	for name, ops := range map[string][]comm.P2P{
		"a send to self without its receive": {comm.SendSlice(0, a)},
		"a receive from self without a send": {comm.RecvSlice(0, x), comm.SendSlice(0, a), comm.RecvSlice(0, y)},
		"a pair that disagrees on count":     {comm.SendTo(0, a.Buffer(), 2, comm.Int32), comm.RecvFrom(0, x.Buffer(), 3, comm.Int32)},
		"a pair that disagrees on type":      {comm.SendTo(0, a.Buffer(), 2, comm.Int32), comm.RecvFrom(0, x.Buffer(), 2, comm.Uint32)},
	} {
		if err := c.GroupP2P(ops, nil); !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", name, err)
		}
	}
	if got, _ := x.ToHost(nil); !slices.Equal(got, []int32{1, 2, 3, 4}) {
		t.Errorf("a refused GroupP2P changed the receive buffer to %v", got)
	}
	if n := net.ops.Load(); n != 0 {
		t.Errorf("%d groups reached NCCL; a group of one rank has nothing for it", n)
	}
	net.checkClean(t)
}

// ---- failures ----

// alone runs fn on rank 0 of a two-rank fake communicator whose rank 1
// never joins in, then closes both.
func alone(t *testing.T, o comm.Options, libs func(int) *fakeLib, fn func(c *Comm, net *fakeNet)) {
	t.Helper()
	net := newFakeNet()
	cs := mustOpenFake(t, net, 2, o, libs)
	fn(cs[0], net)
	closeAll(t, cs)
	net.checkClean(t)
}

// failedWith checks that err is rank 0's *comm.Error wrapping want and
// saying what.
func failedWith(t *testing.T, call string, err, want error, what string) {
	t.Helper()
	var ce *comm.Error
	switch {
	case !errors.Is(err, want) || !errors.As(err, &ce):
		t.Errorf("%s: %v; want a *comm.Error wrapping %v", call, err, want)
	case ce.Backend != Name || ce.Rank != 0:
		t.Errorf("%s: error names rank %d of %q", call, ce.Rank, ce.Backend)
	case !strings.Contains(err.Error(), what):
		t.Errorf("%s: %v; want it to say %q", call, err, what)
	}
}

// afterFailure checks that every later call fails with the failure and
// reaches no engine.
func afterFailure(t *testing.T, c *Comm, net *fakeNet, want error, what string) {
	t.Helper()
	before := net.ops.Load()
	buf, err := c.Device().Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	s, err := c.Device().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	for name, err := range map[string]error{
		"AllReduce":             c.AllReduce(buf, buf, 4, comm.Float32, comm.Sum, nil),
		"AllReduce on a stream": c.AllReduce(buf, buf, 4, comm.Float32, comm.Sum, s),
		"Barrier":               c.Barrier(nil),
		"GroupP2P":              c.GroupP2P([]comm.P2P{comm.SendTo(1, buf, 4, comm.Uint8)}, nil),
		"Wait":                  c.Wait(s),
	} {
		failedWith(t, name+" after the failure", err, want, what)
	}
	if sub, err := c.Split(0, 0); sub != nil || !errors.Is(err, want) {
		t.Errorf("Split after the failure: %v, %v", sub, err)
	}
	if n := net.ops.Load() - before; n != 0 {
		t.Errorf("%d operations reached NCCL after the failure", n)
	}
	if n := net.aborts.Load(); n != 1 {
		t.Errorf("the engine was aborted %d times; want once", n)
	}
}

func TestTimeoutOfANilStreamOperation(t *testing.T) {
	alone(t, comm.Options{Timeout: 50 * time.Millisecond}, nil, func(c *Comm, net *fakeNet) {
		buf, _ := c.Device().Alloc(16)
		defer buf.Free()
		err := c.AllReduce(buf, buf, 4, comm.Float32, comm.Sum, nil)
		failedWith(t, "AllReduce that rank 1 skipped", err, comm.ErrTimeout, "AllReduce(count=4 dtype=float32 op=sum) did not finish within 50ms")
		afterFailure(t, c, net, comm.ErrTimeout, "did not finish within 50ms")
	})
}

func TestTimeoutOfAStreamOperationIsSeenByWait(t *testing.T) {
	alone(t, comm.Options{Timeout: 50 * time.Millisecond}, nil, func(c *Comm, net *fakeNet) {
		buf, _ := c.Device().Alloc(16)
		defer buf.Free()
		s, _ := c.Device().NewStream()
		defer s.Destroy()
		if err := c.Broadcast(buf, buf, 2, comm.Int64, 1, s); err != nil {
			t.Fatalf("Broadcast on a stream: %v; want it queued", err)
		}
		failedWith(t, "Wait", c.Wait(s), comm.ErrTimeout, "Broadcast(count=2 dtype=int64 root=1) did not finish within 50ms")
		// The abort frees the stream's stuck work: Synchronize returns.
		if err := s.Synchronize(); !errors.Is(err, errFakeAborted) {
			t.Errorf("Synchronize after the abort: %v", err)
		}
		afterFailure(t, c, net, comm.ErrTimeout, "did not finish within 50ms")
	})
}

// An NCCL call that never returns (NCCL connecting to a peer that is not
// there) is aborted from the watchdog, which frees it.
func TestTimeoutOfAStuckNCCLCall(t *testing.T) {
	libs := func(r int) *fakeLib { return &fakeLib{hangOps: r == 0} }
	alone(t, comm.Options{Timeout: 50 * time.Millisecond}, libs, func(c *Comm, net *fakeNet) {
		buf, _ := c.Device().Alloc(16)
		defer buf.Free()
		s, _ := c.Device().NewStream()
		defer s.Destroy()
		err := c.AllGather(buf, buf, 0+4, comm.Uint8, s)
		failedWith(t, "AllGather stuck in NCCL", err, comm.ErrTimeout, "the NCCL call has not returned after 50ms")
		afterFailure(t, c, net, comm.ErrTimeout, "has not returned after 50ms")
	})
}

// Without a timeout an operation may wait forever, but an asynchronous
// NCCL error still aborts the communicator and frees the waiting call.
func TestAsyncErrorAbortsAndFreesTheWaitingCall(t *testing.T) {
	libs := func(r int) *fakeLib {
		if r == 0 {
			return &fakeLib{asyncAfter: 1}
		}
		return nil
	}
	alone(t, comm.Options{}, libs, func(c *Comm, net *fakeNet) {
		buf, _ := c.Device().Alloc(16)
		defer buf.Free()
		// The call waits in its stream's synchronize until the watchdog's
		// abort ends it: a wait never aborted fails here, not hangs.
		done := make(chan error, 1)
		go func() { done <- c.AllReduce(buf, buf, 2, comm.Int32, comm.Sum, nil) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("AllReduce on no stream was never freed by the abort")
		}
		if err == nil || !strings.Contains(err.Error(), "NCCL reported an asynchronous error: fake NCCL: a peer went away") {
			t.Fatalf("AllReduce: %v; want the asynchronous error", err)
		}
		cause := c.failure()
		if !errors.Is(err, cause) {
			t.Errorf("AllReduce: %v does not wrap the recorded failure %v", err, cause)
		}
		afterFailure(t, c, net, cause, "a peer went away")
	})
}

// Without a timeout too, an NCCL call that hangs on the host (connecting to
// a peer that died) is aborted once NCCL reports the error, and returns.
func TestAsyncErrorAbortsAStuckNCCLCallWithoutATimeout(t *testing.T) {
	libs := func(r int) *fakeLib {
		if r == 0 {
			return &fakeLib{hangOps: true, asyncAfter: 1}
		}
		return nil
	}
	alone(t, comm.Options{}, libs, func(c *Comm, net *fakeNet) {
		buf, _ := c.Device().Alloc(16)
		defer buf.Free()
		s, _ := c.Device().NewStream()
		defer s.Destroy()
		done := make(chan error, 1)
		go func() { done <- c.AllGather(buf, buf, 4, comm.Uint8, s) }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "a peer went away") {
				t.Fatalf("AllGather stuck in NCCL: %v; want the asynchronous error", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("AllGather stuck in NCCL was never aborted")
		}
		afterFailure(t, c, net, c.failure(), "a peer went away")
	})
}

// Abort says why, fails the communicator with ErrAborted and the reason,
// and ends the job through the bootstrap's MPI (MPI_Abort; the fake's
// returns and aborts its in-process group); Close then aborts NCCL's
// communicator, and nothing is left.
func TestAbortFailsTheCommunicatorAndEndsTheJob(t *testing.T) {
	net := newFakeNet()
	cs := mustOpenFake(t, net, 2, comm.Options{}, nil)
	why := errors.New("rank 1 cannot go on")
	if !comm.Abort(cs[1], why) {
		t.Fatal("the nccl backend's communicator has no Abort")
	}
	if n := cs[1].boot.(*fakeBoot).aborted.Load(); n != 1 {
		t.Errorf("Abort called MPI_Abort %d times, want once", n)
	}
	if n := cs[0].boot.(*fakeBoot).aborted.Load(); n != 0 {
		t.Errorf("rank 0, which did not abort, called MPI_Abort %d times", n)
	}
	buf, err := cs[1].Device().Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	err = cs[1].AllReduce(buf, buf, 4, comm.Float32, comm.Sum, nil)
	if !errors.Is(err, comm.ErrAborted) || !errors.Is(err, why) || !strings.Contains(err.Error(), "this rank aborted the job: rank 1 cannot go on") {
		t.Errorf("AllReduce after Abort: %v; want ErrAborted with the reason", err)
	}
	// The other rank's bootstrap calls fail with the job aborted (the fake's
	// MPI_Abort); with MPI that rank would have ended.
	if _, err := cs[0].boot.allgather([]byte{1}); !errors.Is(err, comm.ErrAborted) {
		t.Errorf("rank 0's bootstrap allgather after rank 1's abort: %v; want ErrAborted", err)
	}
	for r, c := range cs {
		err := c.Close()
		if r == 0 && err != nil {
			t.Errorf("rank 0: Close: %v", err)
		}
	}
	if n := net.aborts.Load(); n != 1 {
		t.Errorf("%d NCCL aborts; want the aborting rank's communicator aborted at Close", n)
	}
}

// Close on a healthy communicator finalizes and destroys it; the closed
// communicator refuses everything, Close included.
func TestClose(t *testing.T) {
	net := newFakeNet()
	cs := mustOpenFake(t, net, 2, comm.Options{}, nil)
	dev := cs[0].Device()
	closeAll(t, cs)
	if st := dev.Stats(); st.Buffers != 0 || st.Streams != 0 || st.Events != 0 {
		t.Errorf("after Close the device holds %+v", st)
	}
	c := cs[0]
	if err := c.Close(); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if err := c.Wait(nil); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("Wait after Close: %v", err)
	}
	if n := net.aborts.Load(); n != 0 {
		t.Errorf("%d aborts; a healthy communicator is destroyed, not aborted", n)
	}
	net.checkClean(t)
}

func TestSplitRefusesColorsAndKeysOutOfRange(t *testing.T) {
	net := newFakeNet()
	cs := mustOpenFake(t, net, 1, comm.Options{}, nil)
	defer closeAll(t, cs)
	for _, ck := range [][2]int{{-2, 0}, {1 << 40, 0}, {0, 1 << 40}, {0, -1 << 40}} {
		if sub, err := cs[0].Split(ck[0], ck[1]); sub != nil || !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("Split(%d, %d): %v, %v; want ErrInvalidArgument", ck[0], ck[1], sub, err)
		}
	}
}

// One rank's bad color fails every rank's Split, naming it, where the
// others waited for it in MPI_Comm_split.
func TestSplitWithOneRanksBadColorFailsEveryRank(t *testing.T) {
	net := newFakeNet()
	cs := mustOpenFake(t, net, 3, comm.Options{}, nil)
	defer closeAll(t, cs)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() {
			color := 0
			if r == 1 {
				color = -7
			}
			var sub comm.Communicator
			sub, errs[r] = c.Split(color, r)
			if sub != nil {
				t.Errorf("rank %d: Split beside rank 1's color -7 returned a communicator", r)
				sub.Close()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Split with one rank's bad color had not returned on every rank after 20 s")
	}
	for r, err := range errs {
		if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), "rank 1: color -7") {
			t.Errorf("rank %d: %v; want ErrInvalidArgument naming rank 1's color -7", r, err)
		}
	}
}

// Debug asked for on one rank only is on for every rank: a rank comparing
// its collectives over the bootstrap waited there for ever for ranks that
// went straight to NCCL. Open now settles it as the mpi backend does.
func TestDebugOnOneRankIsOnForAll(t *testing.T) {
	net := newFakeNet()
	boots, err := fakeWorld(2)
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]*Comm, 2)
	openErrs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		o := comm.Options{Device: "host", Debug: r == 1}
		wg.Go(func() {
			cs[r], openErrs[r] = open(o, func() (boot, error) { return boots[r], nil }, &fakeLib{net: net})
		})
	}
	wg.Wait()
	for r, err := range openErrs {
		if err != nil {
			t.Fatalf("rank %d: Open: %v", r, err)
		}
	}
	defer closeAll(t, cs)
	var errs []error
	done := make(chan struct{})
	go func() {
		defer close(done)
		errs = mismatchedAllReduces(cs)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("mismatched AllReduces with Debug on one rank still ran after 20 s")
	}
	for r, err := range errs {
		if !errors.Is(err, comm.ErrMismatch) {
			t.Errorf("rank %d: %v; want ErrMismatch (Debug on for both ranks)", r, err)
		}
	}
	if n := net.ops.Load(); n != 0 {
		t.Errorf("%d operations reached NCCL; want none", n)
	}
}
