package comm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// Every package-level function that takes a Communicator refuses a nil one
// with ErrInvalidArgument, naming the call, where each called a method of
// the nil interface and panicked; so do NodeComm's collectives over nil and
// ApplyOptions to nil Options.
func TestNilCommunicatorIsRefused(t *testing.T) {
	dev, err := devmem.Open("host", 0)
	if err != nil {
		t.Fatal(err)
	}
	x, err := devmem.AllocSlice[float32](dev, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	y, err := devmem.AllocSlice[float32](dev, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Free()
	if err := x.CopyFrom([]float32{1, 2, 3, 4}, nil); err != nil {
		t.Fatal(err)
	}
	if err := y.CopyFrom([]float32{-1, -1, -1, -1}, nil); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"AllReduce":          func() error { return AllReduce(nil, x, y, Sum, nil) },
		"Reduce":             func() error { return Reduce(nil, x, y, Sum, 0, nil) },
		"Broadcast":          func() error { return Broadcast(nil, x, y, 0, nil) },
		"AllGather":          func() error { return AllGather(nil, x, y, nil) },
		"ReduceScatter":      func() error { return ReduceScatter(nil, x, y, Sum, nil) },
		"AllToAll":           func() error { return AllToAll(nil, x, y, nil) },
		"Gather":             func() error { return Gather(nil, x, y, 0, nil) },
		"Scatter":            func() error { return Scatter(nil, x, y, 0, nil) },
		"Send":               func() error { return Send(nil, x, 1, nil) },
		"Recv":               func() error { return Recv(nil, y, 1, nil) },
		"SplitNode":          func() error { _, err := SplitNode(nil); return err },
		"SplitBy":            func() error { _, err := SplitBy(nil, "a"); return err },
		"NodeComm's Barrier": func() error { return NodeComm(nil).Barrier() },
		"NodeComm's BroadcastBytes": func() error {
			return NodeComm(nil).BroadcastBytes(make([]byte, 4), 0)
		},
		"NodeComm's AllGatherInt64": func() error { _, err := NodeComm(nil).AllGatherInt64(1); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), name+" on a nil Communicator") {
			t.Errorf("%s(nil) = %v, want ErrInvalidArgument naming the call", name, err)
		}
	}
	got, err := y.ToHost(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != -1 {
			t.Errorf("recv[%d] = %v after the refused calls, want -1 (unchanged)", i, v)
		}
	}
	if n := NodeComm(nil); n.Rank() != -1 || n.Size() != 0 || n.Device() != nil || !strings.Contains(fmt.Sprint(n), "nil") {
		t.Errorf("NodeComm(nil): rank %d, size %d, device %v, %q; want -1, 0, nil and a name saying nil", n.Rank(), n.Size(), n.Device(), n)
	}
	if _, err := devmem.NewNodeShared(NodeComm(nil), 4, 4); err == nil {
		t.Error("NewNodeShared over NodeComm(nil) succeeded")
	}
	if err := ApplyOptions(nil, WithDebug(true)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ApplyOptions(nil) = %v, want ErrInvalidArgument", err)
	}
}
