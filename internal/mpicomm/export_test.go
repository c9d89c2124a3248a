package mpicomm

import (
	"encoding/binary"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
)

// SetReduceFault makes this process's IPC reductions fail their part
// where f says so (reduceFault), for the rank tests of ipcreduce_test.go;
// nil puts the real path back.
func SetReduceFault(f func(rank int) error) { reduceFault = f }

// SetFusedRanks sets fusedRanks, the most ranks whose reductions on a GPU
// are one kernel, and returns what it was.
func SetFusedRanks(n int) int {
	was := fusedRanks
	fusedRanks = n
	return was
}

// IPCEventsWanted is ipcEventsWanted: whether the reductions of a
// communicator of size ranks, some sharing a GPU or not, want the IPC
// events, as IPCEventsEnv says.
func IPCEventsWanted(size int, shared bool) (bool, error) { return ipcEventsWanted(size, shared) }

// P2PEventsWanted is p2pEventsWanted: whether the messages of a
// communicator want the IPC events.
func P2PEventsWanted() (bool, error) { return p2pEventsWanted() }

// Crowded is crowded: whether n transfers waiting at once on each of the
// node's ranks are more than this process's CPUs.
func (c *Comm) Crowded(n int) bool { return c.crowded(n) }

// IPCCopiesAfterReady counts the receives on the host (on no stream, or
// in a crowded GroupP2P) of messages whose senders were ordered on the
// GPU: copyAfterReady's.
func (c *Comm) IPCCopiesAfterReady() int64 {
	if c.ipc.p2p == nil {
		return 0
	}
	return c.ipc.p2p.afterReady.Load()
}

// SendControl sends peer an IPC control message for a message of bytes
// bytes, numbered as the next Send to peer would be, with the flags word
// flags and no handle, and returns the receiver's answer: for the rank
// tests of a control message this build does not send.
func (c *Comm) SendControl(peer, bytes int, flags uint64) (uint64, error) {
	tags, _ := c.takeTags([]comm.P2P{{Kind: comm.SendKind, Peer: peer, Count: bytes, DType: comm.Uint8}}, nil, nil)
	cell, err := c.cell()
	if err != nil {
		return 0, err
	}
	defer c.putCell(cell)
	ctl := cellBytes(cell, 0, ctlLen)
	clear(ctl)
	binary.LittleEndian.PutUint64(ctl[0:], ctlMagic)
	binary.LittleEndian.PutUint64(ctl[8:], uint64(bytes))
	binary.LittleEndian.PutUint64(ctl[16:], flags)
	t := transfer{send: true, peers: []int{peer}, bytes: bytes, dt: comm.Uint8, on: c.p2p, tag: tags[0]}
	o := c.newOp(driver.Call{Operation: driver.OpSend}, 0)
	reqs, _, err := c.postSend(o, t, cell)
	if err != nil {
		return 0, err
	}
	if _, err := c.settled(o, t, reqs[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(cellBytes(cell, c.ipc.room, ackLen)), nil
}

// AckMismatch is the receiver's answer that ends a send whose message it
// does not take.
const AckMismatch = ackMismatch
