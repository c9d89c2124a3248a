//go:build cgo

package cbaseline

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// TestNCCLLoopsOnOneGPU runs every collective loop on a one-rank NCCL
// communicator, where each leaves its input in the receive buffer. It runs
// only where a GPU and libnccl are usable.
func TestNCCLLoopsOnOneGPU(t *testing.T) {
	dev, err := devmem.Open("cuda", 0)
	if err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	id, err := NCCLUniqueID()
	if err != nil {
		t.Skipf("NCCL cannot be loaded: %v", err)
	}
	n, err := NewNCCL(dev.Ordinal(), 1, 0, id)
	if err != nil {
		t.Fatal(err)
	}
	nFile, cFile, err := Libraries()
	if err != nil || nFile == "" || cFile == "" {
		t.Fatalf("Libraries = %q, %q, %v: want the files the loop calls", nFile, cFile, err)
	}
	t.Logf("the loop calls NCCL in %s and the driver in %s", nFile, cFile)
	const c = 1000
	send, err := devmem.AllocSlice[int32](dev, c)
	if err != nil {
		t.Fatal(err)
	}
	defer send.Free()
	recv, err := devmem.AllocSlice[int32](dev, c)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Free()
	in := make([]int32, c)
	for i := range in {
		in[i] = int32(3*i + 1)
	}
	if err := send.CopyFrom(in, nil); err != nil {
		t.Fatal(err)
	}
	// Timed by events, and by the host's clock around each call and a
	// synchronize (SyncEach: gpucomm timed by wall clock).
	for _, syncEach := range []bool{false, true} {
		for _, coll := range []Coll{AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll} {
			if err := devmem.Memset(recv.Buffer(), 0xFF, nil); err != nil {
				t.Fatal(err)
			}
			a := Args{Send: send.Buffer().Addr(), Recv: recv.Buffer().Addr(), Count: c, DType: comm.Int32, Op: comm.Max, Warmup: 1, SyncEach: syncEach}
			times := make([]float64, 5)
			if err := n.Run(coll, a, times); err != nil {
				t.Fatalf("%v (SyncEach %v): %v", coll, syncEach, err)
			}
			got, err := recv.ToHost(nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != in[i] {
					t.Errorf("%v (SyncEach %v): element %d is %d, want %d", coll, syncEach, i, got[i], in[i])
					break
				}
			}
			for i, v := range times {
				if !(v > 0) {
					t.Errorf("%v (SyncEach %v): time %d is %g s", coll, syncEach, i, v)
				}
			}
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if err := n.Run(AllReduce, Args{DType: comm.Int32, Op: comm.Sum}, nil); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
}
