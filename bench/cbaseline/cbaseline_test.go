package cbaseline

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
)

func TestBadArgumentsAreRejectedBeforeAnyCCall(t *testing.T) {
	ok := Args{Send: 0x1000, Recv: 0x2000, Count: 4, DType: comm.Float32, Op: comm.Sum, Window: 4}
	cases := []struct {
		name  string
		coll  Coll
		edit  func(*Args)
		times []float64
	}{
		{"invalid operation", Coll(0), nil, nil},
		{"operation past the last", Bandwidth + 1, nil, nil},
		{"invalid dtype", AllReduce, func(a *Args) { a.DType = 0 }, nil},
		{"invalid reduction", AllReduce, func(a *Args) { a.Op = 99 }, nil},
		{"negative count", AllGather, func(a *Args) { a.Count = -1 }, nil},
		{"count beyond a C int", AllGather, func(a *Args) { a.Count = 1 << 31 }, nil},
		{"nil send buffer", Broadcast, func(a *Args) { a.Send = 0 }, nil},
		{"negative warm-up", AllToAll, func(a *Args) { a.Warmup = -1 }, nil},
		{"empty window", Bandwidth, func(a *Args) { a.Window = 0 }, nil},
		{"negative peer", PingPong, func(a *Args) { a.Peer = -1 }, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := ok
			if c.edit != nil {
				c.edit(&a)
			}
			err := MPI(c.coll, a, make([]float64, 2))
			if !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("MPI: got %v, want an error wrapping ErrInvalidArgument", err)
			}
			var n NCCL
			if err := n.Run(c.coll, a, make([]float64, 2)); !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("NCCL.Run: got %v, want an error wrapping ErrInvalidArgument", err)
			}
		})
	}
}

func TestNCCLWithoutTheLibraryIsAnErrorNotACrash(t *testing.T) {
	_, err := NCCLUniqueID()
	if err == nil {
		t.Skip("libnccl.so.2 and a GPU are here: nothing to check")
	}
	if !errors.Is(err, comm.ErrLibraryNotFound) {
		t.Errorf("NCCLUniqueID: got %v, want an error wrapping ErrLibraryNotFound", err)
	}
	if _, err := NewNCCL(0, 1, 0, [NCCLIDSize]byte{}); err == nil {
		t.Error("NewNCCL succeeded without NCCL")
	}
	if _, err := NewNCCL(0, 2, 2, [NCCLIDSize]byte{}); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("NewNCCL of rank 2 of 2: got %v, want ErrInvalidArgument", err)
	}
}

func TestCollNamesMatchBench(t *testing.T) {
	want := "allreduce allgather reducescatter broadcast reduce alltoall pingpong bw"
	var got []string
	for c := AllReduce; c <= Bandwidth; c++ {
		got = append(got, c.String())
	}
	if strings.Join(got, " ") != want {
		t.Errorf("names %q, want %q", got, want)
	}
}
