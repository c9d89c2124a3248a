package comm

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/devmem"
)

// NodeComm adapts c, a communicator of the ranks of one node, to what
// devmem.NewNodeShared needs. Its collectives run through c on small device
// buffers, so they work on every backend, and complete before they return.
//
//	ns, err := devmem.NewNodeShared(comm.NodeComm(c), myCount, 8)
func NodeComm(c Communicator) devmem.NodeComm { return nodeComm{c} }

type nodeComm struct{ c Communicator }

func (n nodeComm) Rank() int              { return n.c.Rank() }
func (n nodeComm) Size() int              { return n.c.Size() }
func (n nodeComm) Device() *devmem.Device { return n.c.Device() }
func (n nodeComm) Barrier() error         { return n.c.Barrier(nil) }
func (n nodeComm) String() string {
	return fmt.Sprintf("NodeComm(%s rank %d of %d)", n.c.Backend(), n.c.Rank(), n.c.Size())
}

// BroadcastBytes sends root's b to every rank's b through a device buffer.
func (n nodeComm) BroadcastBytes(b []byte, root int) (err error) {
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
