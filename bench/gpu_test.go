package bench

import (
	"context"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// selfComm is a one-rank communicator on a real device, where every
// collective copies its input to its output on the stream: enough to run
// bench's event timing, checks and gathers on a GPU before a GPU backend
// exists. Methods a one-rank bench never calls are left to the nil
// embedded interface.
type selfComm struct {
	comm.Communicator
	dev *devmem.Device
}

func (c selfComm) Rank() int              { return 0 }
func (c selfComm) Size() int              { return 1 }
func (c selfComm) Backend() string        { return "self" }
func (c selfComm) Device() *devmem.Device { return c.dev }
func (c selfComm) Barrier(*devmem.Stream) error {
	return nil
}

func (c selfComm) copy(send, recv devmem.Buffer, count int, dt comm.DType, s *devmem.Stream) error {
	if send.Same(recv) {
		return nil
	}
	return devmem.CopyN(recv, send, count*dt.Size(), s)
}

func (c selfComm) AllReduce(send, recv devmem.Buffer, n int, dt comm.DType, _ comm.Op, s *devmem.Stream) error {
	return c.copy(send, recv, n, dt, s)
}
func (c selfComm) Reduce(send, recv devmem.Buffer, n int, dt comm.DType, _ comm.Op, _ int, s *devmem.Stream) error {
	return c.copy(send, recv, n, dt, s)
}
func (c selfComm) Broadcast(send, recv devmem.Buffer, n int, dt comm.DType, _ int, s *devmem.Stream) error {
	return c.copy(send, recv, n, dt, s)
}
func (c selfComm) AllGather(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	return c.copy(send, recv, n, dt, s)
}
func (c selfComm) ReduceScatter(send, recv devmem.Buffer, n int, dt comm.DType, _ comm.Op, s *devmem.Stream) error {
	return c.copy(send, recv, n, dt, s)
}
func (c selfComm) AllToAll(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	return c.copy(send, recv, n, dt, s)
}

func TestOnAGPUEventsTimeEveryCollectiveAndChecksPass(t *testing.T) {
	dev, err := devmem.Open("cuda", 0)
	if err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	before := dev.Stats()
	cfg := DefaultConfig()
	cfg.MinBytes, cfg.MaxBytes, cfg.StepFactor, cfg.Iters, cfg.Warmup = 8, 1<<20, 16, 10, 2
	rep, err := Run(context.Background(), selfComm{dev: dev}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Timing != "events" || rep.Ranks != 1 {
		t.Errorf("timing %q on %d ranks, want events on 1", rep.Timing, rep.Ranks)
	}
	sizes, _ := Sweep(cfg.MinBytes, cfg.MaxBytes, cfg.StepFactor, 0)
	if len(rep.Results) != 6*len(sizes) {
		t.Errorf("%d results, want 6 collectives x %d sizes", len(rep.Results), len(sizes))
	}
	for _, res := range rep.Results {
		if res.Wrong != 0 || !(res.Time.Min > 0) || res.Time.N != cfg.Iters {
			t.Errorf("%v of %d bytes: #wrong %d, time %+v", res.Operation, res.Size, res.Wrong, res.Time)
		}
	}
	if after := dev.Stats(); after != before {
		t.Errorf("device objects before %+v, after %+v: the run leaked", before, after)
	}
}
