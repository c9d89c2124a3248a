package mpicomm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// A stream-ordered collective whose stream's earlier work failed (on a GPU:
// the CUDA work queued before it) is not run: it says why, breaks the
// communicator (the other ranks run it without this one) and passes its
// turn, so that the next collective, on no stream, fails at once with the
// reason instead of waiting for the turn forever. One rank, no launcher,
// the host device; the failure is handed to the queued collective as the
// stream would hand it (devhook.HostCall). The checks run in a child
// process: the Close of a broken communicator ends the job with MPI_Abort
// (so that no other rank waits in MPI_Finalize), which it must say.
func TestSkippedCollectivePassesItsTurnAndBreaks(t *testing.T) {
	if !mpi.Built() {
		t.Skip("MPI is not built in: -tags mpi or mpich")
	}
	if os.Getenv(skipChildEnv) != "" {
		skippedCollectiveChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSkippedCollectivePassesItsTurnAndBreaks$", "-test.v")
	cmd.Env = append(os.Environ(), skipChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the child did not end in 2 minutes; output:\n%s", out)
	case !strings.Contains(string(out), "skipped collective: checks passed"):
		t.Errorf("the child's checks did not pass (%v); output:\n%s", err, out)
	case err == nil || !strings.Contains(string(out), "Close of a broken communicator (AllReduce was not run") || !strings.Contains(string(out), "calling MPI_Abort"):
		t.Errorf("the child's Close of the broken communicator: %v, want MPI_Abort, saying why; output:\n%s", err, out)
	}
}

// skipChildEnv marks the child process of TestSkippedCollectivePassesItsTurnAndBreaks.
const skipChildEnv = "GPUCOMM_MPICOMM_TEST_SKIP_CHILD"

func skippedCollectiveChild(t *testing.T) {
	c, err := Open(Config{Backend: "mpi", Mode: Staged, Options: driver.Options{Device: "host"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() // broken: it aborts the job, saying why
	x, err := devmem.AllocSlice[float32](c.Device(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	if err := x.CopyFrom([]float32{1, 2, 3, 4}, nil); err != nil {
		t.Fatal(err)
	}
	// A collective that runs first, so that the skipped one's turn is not
	// the first.
	if err := comm.AllReduce(c, x, x, comm.Sum, nil); err != nil {
		t.Fatal(err)
	}
	// A collective ahead of the skipped one, queued on a healthy stream
	// that a host function holds until the skipped one waits for its turn:
	// it runs, whole, and only the calls after the skipped one fail.
	s, err := c.Device().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	ahead, err := devmem.AllocSlice[float32](c.Device(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer ahead.Free()
	gate := make(chan struct{})
	if err := s.HostFunc(func() error { <-gate; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := comm.AllReduce(c, x, ahead, comm.Sum, s); err != nil {
		t.Fatal(err)
	}
	fault := errors.New("an illegal address on the stream")
	ran := false
	q := &queuedCollective{c: c, call: driver.Call{Operation: driver.OpAllReduce, Send: x.Buffer(), Recv: x.Buffer(), Count: 4, DType: comm.Float32, Op: comm.Sum},
		seq: c.tickets.Add(1), body: func(*Comm, *op) error { ran = true; return nil }}
	q.fn = q.run
	q.refs.Store(1)
	skipped := make(chan error, 1)
	go func() { skipped <- q.fn(fault) }()
	for { // until the skipped one waits for its turn
		c.mu.Lock()
		n := c.running
		c.mu.Unlock()
		if n > 0 {
			break
		}
		runtime.Gosched()
	}
	close(gate)
	if err := s.Synchronize(); err != nil {
		t.Errorf("the collective ahead of the skipped one, on a healthy stream: %v", err)
	}
	if got, err := ahead.ToHost(nil); err != nil || got[0] != 1 || got[3] != 4 {
		t.Errorf("the collective ahead of the skipped one gave %v (%v), want [1 2 3 4]", got, err)
	}
	err = <-skipped
	if err == nil || !strings.Contains(err.Error(), "was not run: the work queued before it on its stream failed (an illegal address on the stream)") {
		t.Errorf("the skipped collective returned %v, want why it was not run", err)
	}
	var ce *comm.Error
	if !errors.As(err, &ce) || !errors.Is(err, fault) {
		t.Errorf("the skipped collective's error %T (%v) is not a *comm.Error wrapping the stream's failure", err, err)
	}
	if ran {
		t.Error("the collective ran on a stream whose earlier work failed")
	}
	done := make(chan error, 1)
	go func() { done <- comm.AllReduce(c, x, x, comm.Sum, nil) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "was not run") || !errors.Is(err, fault) {
			t.Errorf("the collective after the skipped one: %v, want the communicator broken, saying why (the stream's failure wrapped)", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the collective after the skipped one still waits for its turn after a minute")
	}
	got, err := x.ToHost(nil)
	if err != nil || got[0] != 1 || got[3] != 4 {
		t.Errorf("the buffer after one rank's AllReduce: %v (%v), want [1 2 3 4] (the skipped one and the refused one wrote nothing)", got, err)
	}
	if !t.Failed() {
		fmt.Println("skipped collective: checks passed")
	}
}
