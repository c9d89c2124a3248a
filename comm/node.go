package comm

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/gpucomm/gpucomm/devmem"
)

// NodeComm adapts c, a communicator of the ranks of one node, to what
// devmem.NewNodeShared needs. Its collectives run through c on small device
// buffers, so they work on every backend, and complete before they return.
// SplitNode makes such a communicator from one that spans several nodes:
//
//	node, err := comm.SplitNode(world)
//	...
//	ns, err := devmem.NewNodeShared(comm.NodeComm(node), myCount, 8)
func NodeComm(c Communicator) devmem.NodeComm { return nodeComm{c} }

// SplitNode splits c into one communicator a node: the ranks whose host
// names (os.Hostname) are equal, ranked as in c. It is collective over c,
// like Split; its result's Size equals c.LocalSize() wherever the launcher
// and the host names agree on what a node is.
func SplitNode(c Communicator) (Communicator, error) {
	if c == nil {
		return nil, noComm("SplitNode")
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("comm: SplitNode: %v: %w", err, ErrUnsupported)
	}
	return SplitBy(c, host)
}

// SplitBy splits c into communicators of the ranks that give the same name,
// ranked as in c; every rank of c calls it. Names are compared whole (they
// travel through c as bytes), so two different names never share one.
func SplitBy(c Communicator, name string) (Communicator, error) {
	if c == nil {
		return nil, noComm("SplitBy")
	}
	n := nodeComm{c}
	lens, err := n.AllGatherInt64(int64(len(name)))
	if err != nil {
		return nil, err
	}
	width := int(slices.Max(lens))
	color := 0
	if width > 0 {
		names, err := n.allGatherBytes([]byte(name), width)
		if err != nil {
			return nil, err
		}
		for r := range lens {
			if string(names[r*width:r*width+int(lens[r])]) == name {
				color = r
				break
			}
		}
	}
	return c.Split(color, c.Rank())
}

// allGatherBytes gathers every rank's b, padded to width bytes, in rank
// order, through device buffers.
func (n nodeComm) allGatherBytes(b []byte, width int) (out []byte, err error) {
	send, err := devmem.AllocSlice[uint8](n.c.Device(), width)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, send.Free()) }()
	recv, err := devmem.AllocSlice[uint8](n.c.Device(), width*n.c.Size())
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, recv.Free()) }()
	padded := make([]byte, width)
	copy(padded, b)
	if err := send.CopyFrom(padded, nil); err != nil {
		return nil, err
	}
	if err := AllGather(n.c, send, recv, nil); err != nil {
		return nil, err
	}
	return recv.ToHost(nil)
}

// nodeComm is NodeComm's adapter. Over a nil Communicator it is a node of
// no ranks: Rank -1, Size 0, no Device, and every collective an error
// wrapping ErrInvalidArgument (devmem.NewNodeShared refuses it so).
type nodeComm struct{ c Communicator }

func (n nodeComm) Rank() int {
	if n.c == nil {
		return -1
	}
	return n.c.Rank()
}

func (n nodeComm) Size() int {
	if n.c == nil {
		return 0
	}
	return n.c.Size()
}

func (n nodeComm) Device() *devmem.Device {
	if n.c == nil {
		return nil
	}
	return n.c.Device()
}

func (n nodeComm) Barrier() error {
	if n.c == nil {
		return noComm("NodeComm's Barrier")
	}
	return n.c.Barrier(nil)
}

func (n nodeComm) String() string {
	if n.c == nil {
		return "NodeComm(nil)"
	}
	return fmt.Sprintf("NodeComm(%s rank %d of %d)", n.c.Backend(), n.c.Rank(), n.c.Size())
}

// BroadcastBytes sends root's b to every rank's b through a device buffer.
func (n nodeComm) BroadcastBytes(b []byte, root int) (err error) {
	if n.c == nil {
		return noComm("NodeComm's BroadcastBytes")
	}
	buf, err := n.c.Device().Alloc(len(b))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, buf.Free()) }()
	if n.c.Rank() == root {
		if err := devmem.CopyFromHost(buf, b, nil); err != nil {
			return err
		}
	}
	if err := n.c.Broadcast(buf, buf, len(b), Uint8, root, nil); err != nil {
		return err
	}
	return devmem.CopyToHost(b, buf, nil)
}

// AllGatherInt64 gathers one int64 from every rank through device buffers.
func (n nodeComm) AllGatherInt64(v int64) (out []int64, err error) {
	if n.c == nil {
		return nil, noComm("NodeComm's AllGatherInt64")
	}
	size := n.c.Size()
	send, err := devmem.AllocSlice[int64](n.c.Device(), 1)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, send.Free()) }()
	recv, err := devmem.AllocSlice[int64](n.c.Device(), size)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, recv.Free()) }()
	if err := send.CopyFrom([]int64{v}, nil); err != nil {
		return nil, err
	}
	if err := AllGather(n.c, send, recv, nil); err != nil {
		return nil, err
	}
	return recv.ToHost(nil)
}
