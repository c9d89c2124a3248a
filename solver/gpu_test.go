package solver_test

import (
	"fmt"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/solver"
)

// solo is a one-rank communicator on any device: every collective of one
// rank is a copy. It lets the solver run on a GPU without an MPI or NCCL
// backend in the test process.
type solo struct{ dev *devmem.Device }

var _ comm.Communicator = solo{}

func (solo) Rank() int                { return 0 }
func (solo) Size() int                { return 1 }
func (solo) LocalRank() int           { return 0 }
func (solo) LocalSize() int           { return 1 }
func (solo) Backend() string          { return "solo" }
func (c solo) Device() *devmem.Device { return c.dev }
func (solo) Close() error             { return nil }
func (solo) Barrier(*devmem.Stream) error {
	return nil
}

func (c solo) copy(call driver.Call) error {
	if err := call.Validate(0, 1, c.dev); err != nil {
		return err
	}
	if call.Send.Same(call.Recv) || call.Count == 0 {
		return nil
	}
	return devmem.CopyN(call.Recv, call.Send, call.Count*call.DType.Size(), call.Stream)
}

func (c solo) AllReduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	return c.copy(driver.Call{Operation: driver.OpAllReduce, Send: send, Recv: recv, Count: n, DType: dt, Op: op, Stream: s})
}
func (c solo) Reduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, root int, s *devmem.Stream) error {
	return c.copy(driver.Call{Operation: driver.OpReduce, Send: send, Recv: recv, Count: n, DType: dt, Op: op, Root: root, Stream: s})
}
func (c solo) Broadcast(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	return c.copy(driver.Call{Operation: driver.OpBroadcast, Send: send, Recv: recv, Count: n, DType: dt, Root: root, Stream: s})
}
func (c solo) AllGather(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	return c.copy(driver.Call{Operation: driver.OpAllGather, Send: send, Recv: recv, Count: n, DType: dt, Stream: s})
}
func (c solo) ReduceScatter(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	return c.copy(driver.Call{Operation: driver.OpReduceScatter, Send: send, Recv: recv, Count: n, DType: dt, Op: op, Stream: s})
}
func (c solo) AllToAll(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	return c.copy(driver.Call{Operation: driver.OpAllToAll, Send: send, Recv: recv, Count: n, DType: dt, Stream: s})
}
func (c solo) Gather(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	return c.copy(driver.Call{Operation: driver.OpGather, Send: send, Recv: recv, Count: n, DType: dt, Root: root, Stream: s})
}
func (c solo) Scatter(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	return c.copy(driver.Call{Operation: driver.OpScatter, Send: send, Recv: recv, Count: n, DType: dt, Root: root, Stream: s})
}
func (solo) Send(devmem.Buffer, int, comm.DType, int, *devmem.Stream) error {
	return fmt.Errorf("solo: no peer: %w", comm.ErrInvalidArgument)
}
func (solo) Recv(devmem.Buffer, int, comm.DType, int, *devmem.Stream) error {
	return fmt.Errorf("solo: no peer: %w", comm.ErrInvalidArgument)
}
func (solo) GroupP2P(ops []comm.P2P, _ *devmem.Stream) error {
	if len(ops) > 0 {
		return fmt.Errorf("solo: no peer: %w", comm.ErrInvalidArgument)
	}
	return nil
}
func (c solo) Split(int, int) (comm.Communicator, error) { return c, nil }

func TestSoloCommunicatorPassesOnTheHostDevice(t *testing.T) {
	for _, c := range solver.Cases(1) {
		if err := solver.Check([]comm.Communicator{solo{devmem.NewHostDevice()}}, c); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
	}
}

// TestConformanceOnAGPU runs every one-rank case on GPU 0: the compiled
// kernels, two streams and events in the solver's pattern, and the field
// compared bit for bit with the Go reference. Skipped without a usable CUDA
// device; several ranks on GPUs are the MPI and NCCL backends' tests.
func TestConformanceOnAGPU(t *testing.T) {
	gpu, err := devmem.Open("cuda:0", 0)
	if err != nil {
		t.Skipf("no usable CUDA device: %v", err)
	}
	t.Setenv("GPUCOMM_CACHE_DIR", t.TempDir())
	before := gpu.Stats()
	for _, c := range solver.Cases(1) {
		if err := solver.Check([]comm.Communicator{solo{gpu}}, c); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
	}
	// A larger grid than the cases', with the full launch shapes.
	big := solver.Case{Name: "big", Config: solver.Config{N: 1031, M: 777, Decomp: solver.Grid2D, ResidualEvery: 7, Seed: 3,
		Boundary: solver.Boundary{Top: 1, Right: 0.5}}, Steps: 50}
	if err := solver.Check([]comm.Communicator{solo{gpu}}, big); err != nil {
		t.Fatalf("%s: %v", big.Name, err)
	}
	if after := gpu.Stats(); after != before {
		t.Errorf("GPU holds %+v after the checks, %+v before", after, before)
	}
}

// BenchmarkStepOnAGPU reports the stencil bandwidth of one rank on GPU 0:
// the bytes a step must move (the grid read once and written once) over the
// time per step, to hold against the device's copy bandwidth.
func BenchmarkStepOnAGPU(b *testing.B) {
	gpu, err := devmem.Open("cuda:0", 0)
	if err != nil {
		b.Skipf("no usable CUDA device: %v", err)
	}
	for _, n := range []int{8192, 16384} {
		b.Run(fmt.Sprintf("%d", n), func(b *testing.B) {
			s, err := solver.New(solo{gpu}, solver.Config{N: n, M: n, ResidualEvery: 100})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Step(10); err != nil { // compile, load and warm up
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := s.Step(b.N); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			perStep := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(s.StencilBytes())/perStep/1e9, "GB/s")
		})
	}
}
