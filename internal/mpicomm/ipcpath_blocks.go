package mpicomm

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/ipccache"
)

// The blocks of AllGather, Gather, Scatter and AllToAll through the IPC
// path, when every rank of the communicator is on one node and every pair
// reaches (ipcAll) and a block is at least nodeMin bytes: the ranks publish
// their send buffers' handles in one Allgather, each copies the blocks it
// receives straight out of its peers' send buffers (one device copy a
// block, on the copy stream, waited for once), and an Allreduce, which says
// whether any rank's copies failed, keeps every send buffer in place until
// all have read. Where a block went as a transfer of its own, each was a
// control message, a copy and its wait, and an acknowledgement, for every
// pair of ranks.
//
// A rank that cannot publish (a buffer that cannot be exported, such as
// pinned memory from AllocPinned) publishes nothing, and every rank then
// runs the host-staged blocks; so does every rank when any copy failed,
// which write every block again. Which way a collective goes each rank
// decides from its own count against nodeMin, as for reductions: counts
// that differ across nodeMin leave the ranks waiting for each other (as
// with MPI, the ranks must pass the same counts; Debug catches it). In
// place, a rank's own block is where it is (AllGather, Gather, Scatter) and
// no rank writes a block another reads; an AllToAll in place, which would,
// is refused before it comes here (driver.Call.Validate).

// nodeBlockColl is the body dispatch gives Staged mode's AllGather, Gather,
// Scatter and AllToAll: through the IPC path when the call takes it, else
// the host-staged blocks.
func (c *Comm) nodeBlockColl(o *op) error {
	if c.ipcCollective(o.call) {
		return c.ipcBlocks(o)
	}
	return c.stagedBlocks(o)
}

// blockReaders reports whether rank q's send buffer is read by some rank
// in call (so that q must publish it): every rank's in AllGather and
// AllToAll, every rank's but the root's in Gather, the root's in Scatter.
func blockReaders(call driver.Call, q int) bool {
	switch call.Operation {
	case driver.OpGather:
		return q != call.Root
	case driver.OpScatter:
		return q == call.Root
	}
	return true
}

func (c *Comm) ipcBlocks(o *op) (err error) {
	call := o.call
	n := call.Count * call.DType.Size()
	sendBytes := n
	if call.Operation == driver.OpAllToAll || call.Operation == driver.OpScatter {
		sendBytes = c.size * n
	}
	all, err := c.publishSend(o, blockReaders(call, c.rank), sendBytes)
	if err != nil {
		return err
	}
	shares := make([]ipcShare, c.size)
	for q := range c.size {
		if !blockReaders(call, q) {
			continue
		}
		s, perr := parseShare(all[q])
		if perr != nil || !s.ok {
			c.ipc.staged.Add(1)
			return c.stagedBlocks(o)
		}
		shares[q] = s
	}
	var refs []*ipccache.Ref
	defer func() { err = errors.Join(err, release(refs)) }()
	return c.settleIPC(o, c.copyBlocks(call, shares, &refs), (*Comm).stagedBlocks)
}

// copyBlocks copies into call's recv the blocks this rank receives, out of
// the peers' send buffers that shares name (its own out of its send), and
// waits for the copies.
func (c *Comm) copyBlocks(call driver.Call, shares []ipcShare, refs *[]*ipccache.Ref) error {
	n := call.Count * call.DType.Size()
	// from copies block j of rank q's send buffer into dst (block 0: an
	// AllGather's or Gather's whole send), skipping a block in place.
	from := func(dst devmem.Buffer, q, j int) error {
		var whole devmem.Buffer
		if q == c.rank {
			whole = call.Send
		} else {
			var err error
			if whole, err = c.openPeer(q, shares[q].send, call.Send, refs); err != nil {
				return err
			}
		}
		src, err := whole.Slice(j*n, n)
		if err != nil {
			return err
		}
		if q == c.rank && src.Addr() == dst.Addr() {
			return nil // in place
		}
		return devmem.CopyN(dst, src, n, c.ipc.copies)
	}
	var err error
	switch call.Operation {
	case driver.OpGather, driver.OpAllGather, driver.OpAllToAll:
		if call.Operation == driver.OpGather && c.rank != call.Root {
			return nil
		}
		// Block q of recv is rank q's whole send (AllGather, Gather) or
		// its block for this rank (AllToAll).
		j := 0
		if call.Operation == driver.OpAllToAll {
			j = c.rank
		}
		for q := range c.size {
			var dst devmem.Buffer
			if dst, err = call.Recv.Slice(q*n, n); err == nil {
				err = from(dst, q, j)
			}
			if err != nil {
				break
			}
		}
	case driver.OpScatter:
		var dst devmem.Buffer
		if dst, err = call.Recv.Slice(0, n); err == nil {
			err = from(dst, call.Root, c.rank)
		}
	default:
		return fmt.Errorf("%v has no blocks: %w", call.Operation, comm.ErrUnsupported)
	}
	return errors.Join(err, c.ipc.copies.Synchronize())
}
