package mpi_test

import (
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// BenchmarkSmallCollectiveHostCost is gpucomm's own host work a small
// collective: an AllReduce and a Broadcast of two float32 on one rank, with
// no launcher (MPI's call on one rank is nearly free), on no stream and on
// a stream (Synchronize after each call), allocations reported. The
// device is the one Open picks (GPUCOMM_DEVICE=host for the host device):
//
//	GPUCOMM_DEVICE=host go test -tags mpi -run XXX -bench SmallCollectiveHostCost ./comm/mpi
func BenchmarkSmallCollectiveHostCost(b *testing.B) {
	if !mpi.Built() || mpitest.InRanks() {
		b.Skip("one rank of a binary with MPI built in (-tags mpi or mpich), with no launcher")
	}
	c, err := comm.Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := c.Device().NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	x, err := devmem.AllocSlice[float32](c.Device(), 2)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Free()
	y, err := devmem.AllocSlice[float32](c.Device(), 2)
	if err != nil {
		b.Fatal(err)
	}
	defer y.Free()
	if err := x.CopyFrom([]float32{1, 2}, nil); err != nil {
		b.Fatal(err)
	}
	calls := map[string]func(*devmem.Stream) error{
		"allreduce": func(st *devmem.Stream) error { return comm.AllReduce(c, x, y, comm.Sum, st) },
		"broadcast": func(st *devmem.Stream) error { return comm.Broadcast(c, x, y, 0, st) },
	}
	broadcasts := 0
	for _, op := range []string{"allreduce", "broadcast"} {
		for _, st := range []*devmem.Stream{nil, s} {
			name := op + "/no-stream"
			if st != nil {
				name = op + "/stream"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					err := calls[op](st)
					if err == nil && st != nil {
						err = st.Synchronize()
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if op == "broadcast" {
					broadcasts++
				}
			})
		}
	}
	if broadcasts == 0 {
		return // -bench left the Broadcasts out
	}
	got, err := y.ToHost(nil)
	if err != nil || got[0] != 1 || got[1] != 2 {
		b.Fatalf("one rank's last Broadcast gave %v (%v), want [1 2]", got, err)
	}
}
