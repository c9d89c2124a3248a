package comm_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

// A nil *local.Comm and a zero local.Comm{} are no communicators (their Size
// is 0): every typed helper that takes a communicator returns that
// communicator's own refusal, wrapping ErrInvalidArgument, where AllToAll
// divided by the Size first and panicked (integer divide by zero).
func TestTypedHelpersOnANilOrZeroLocalCommAreRefused(t *testing.T) {
	x, y := twoHostSlices(t)
	for _, tc := range []struct {
		name string
		c    comm.Communicator
	}{{"nil *local.Comm", (*local.Comm)(nil)}, {"zero local.Comm{}", &local.Comm{}}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			calls := map[string]func() error{
				"AllReduce":     func() error { return comm.AllReduce(c, x, y, comm.Sum, nil) },
				"Reduce":        func() error { return comm.Reduce(c, x, y, comm.Sum, 0, nil) },
				"Broadcast":     func() error { return comm.Broadcast(c, x, y, 0, nil) },
				"AllGather":     func() error { return comm.AllGather(c, x, y, nil) },
				"ReduceScatter": func() error { return comm.ReduceScatter(c, x, y, comm.Sum, nil) },
				"AllToAll":      func() error { return comm.AllToAll(c, x, y, nil) },
				"Gather":        func() error { return comm.Gather(c, x, y, 0, nil) },
				"Scatter":       func() error { return comm.Scatter(c, x, y, 0, nil) },
				"Send":          func() error { return comm.Send(c, x, 1, nil) },
				"Recv":          func() error { return comm.Recv(c, y, 1, nil) },
			}
			for name, call := range calls {
				err := func() (err error) {
					defer func() {
						if r := recover(); r != nil {
							err = fmt.Errorf("panicked: %v", r)
						}
					}()
					return call()
				}()
				if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "no communicator") || !strings.Contains(err.Error(), name) {
					t.Errorf("comm.%s on a %s: %v; want its refusal naming the call, wrapping ErrInvalidArgument", name, tc.name, err)
				}
			}
		})
	}
}

// local.NewGroup refuses the node-path and staged-reduction thresholds that
// comm.Open of the MPI backends refuses (below -1; the node path's above
// MaxInt32), with the same words, and takes those it takes.
func TestNewGroupRefusesTheThresholdsOpenRefuses(t *testing.T) {
	for _, c := range []struct {
		opt  comm.Option
		want string
	}{
		{comm.WithNodeBytes(-5), "node path from -5 bytes: want a positive size, 0 for the default or -1 for off"},
		{comm.WithNodeBytes(-2), "node path from -2 bytes: want a positive size, 0 for the default or -1 for off"},
		{comm.WithNodeBytes(1 << 31), "node path from 2147483648 bytes: want at most 2147483647"},
		{comm.WithStageReduceBytes(-7), "staged reductions from -7 bytes: want a positive size, 0 for the default or -1 for off"},
		{comm.WithStageReduceBytes(-2), "staged reductions from -2 bytes: want a positive size, 0 for the default or -1 for off"},
	} {
		cs, err := local.NewGroup(2, c.opt)
		var ce *comm.Error
		if cs != nil || !errors.Is(err, comm.ErrInvalidArgument) || !errors.As(err, &ce) || ce.Backend != local.Name || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewGroup with %q: %v, %v; want a local *comm.Error wrapping ErrInvalidArgument that says so", c.want, cs, err)
		}
		for _, x := range cs {
			x.Close()
		}
	}
	for _, opt := range []comm.Option{comm.WithNodeBytes(-1), comm.WithNodeBytes(0), comm.WithNodeBytes(1), comm.WithNodeBytes(1<<31 - 1),
		comm.WithStageReduceBytes(-1), comm.WithStageReduceBytes(0), comm.WithStageReduceBytes(1 << 40)} {
		cs, err := local.NewGroup(1, opt)
		if err != nil {
			t.Errorf("NewGroup with a threshold Open takes: %v", err)
		}
		for _, x := range cs {
			if err := x.Close(); err != nil {
				t.Error(err)
			}
		}
	}
}

// twoHostSlices are two slices of 4 float32 on a host device, freed when
// the test ends.
func twoHostSlices(t *testing.T) (x, y devmem.Slice[float32]) {
	t.Helper()
	dev := devmem.NewHostDevice()
	var err error
	if x, err = devmem.AllocSlice[float32](dev, 4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Free() })
	if y, err = devmem.AllocSlice[float32](dev, 4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { y.Free() })
	return x, y
}
