package mpicomm

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/nodepath"
)

// A user's point-to-point message through the pipeline (stagedP2P) that
// takes more than one chunk is announced: before its chunks, the sender
// sends a header with the message's length on the message's tag. Without
// it a receiver learns the sender's length only chunk by chunk, and the
// two sides cut alike up to the shorter one's end, so a receive shorter
// than its send by whole chunks took its chunks and returned nil (the
// sender's last chunks then waited for receives that never came), a
// receive longer by whole chunks waited for a chunk never sent, and a
// difference inside a chunk was found only after the chunks before it had
// been copied out into the receive's buffer. Announced, the receiver knows
// the length before it takes a byte: where it differs, it receives the
// sender's chunks into a slot of its own and drops them (drainStaged), so
// that the send completes, and fails with comm.ErrMismatch, its buffer
// untouched, the pair in step for the next message. A message of one chunk
// needs no header: a receive of one chunk has room for the header too, and
// a single message shorter than the receive shows in its length, a longer
// one as MPI's truncation (which also takes the message); a receive of
// several chunks takes the sender's first message alone into a slot of a
// whole chunk, the most a single message holds. The chunks of collectives and
// of the IPC path's fallback (whose control message carries the length) go
// unannounced.

// The header, little-endian: magic, the message's bytes, and 8 bytes of
// zero.
const (
	announceMagic = 0x6763537467644831 // "gcStgdH1"
	announceLen   = 24                 // never nodepath.HdrLen nor ctlLen: the three are told apart by length
)

func init() {
	if announceLen == nodepath.HdrLen || announceLen == ctlLen || announceLen > comm.MinChunkBytes {
		panic("mpicomm: the staged header's length must differ from the node path header's and the IPC control message's, and fit the smallest chunk")
	}
}

// announced reports whether a transfer of t's bytes is announced: a user's
// message that takes more than one chunk.
func (c *Comm) announced(t transfer) bool {
	return t.announce && t.bytes > c.policy().Cut(t.dt.Size()).Chunk // the first chunk's length
}

// announcement returns the length a header of got bytes in b announces.
func announcement(b []byte, got int) (bytes int, ok bool) {
	if got != announceLen || len(b) < announceLen || binary.LittleEndian.Uint64(b) != announceMagic {
		return 0, false
	}
	n := binary.LittleEndian.Uint64(b[8:])
	if n > math.MaxInt/2 {
		return 0, false
	}
	return int(n), true
}

// sendAnnouncement sends t's header and waits for its send (a message this small
// goes eagerly: the wait ends at once, whether or not the receive is
// posted). The header's slot goes back unless MPI may still read it.
func (c *Comm) sendAnnouncement(o *op, t transfer) error {
	s, err := c.eng.Pool.Take(announceLen)
	if err != nil {
		return err
	}
	b := s.Bytes(announceLen)
	binary.LittleEndian.PutUint64(b[0:], announceMagic)
	binary.LittleEndian.PutUint64(b[8:], uint64(t.bytes))
	binary.LittleEndian.PutUint64(b[16:], 0)
	r, err := t.on.Isend(s.Buf.Addr(), announceLen, mpi.Byte, t.peers[0], t.tag)
	if err == nil {
		var keep bool
		if keep, err = c.settledStaged(o, t, r); keep {
			return err
		}
	}
	c.eng.Pool.Give(s)
	return err
}

// settledStaged waits for r, one request of t's outside its pipeline, and
// reports whether it is still pending after a failed wait: MPI may then
// still touch its slot, which its caller keeps out of the pool, and the
// communicator is broken (the peer is out of step).
func (c *Comm) settledStaged(o *op, t transfer, r *mpi.Request) (keep bool, err error) {
	reqs := []*mpi.Request{r}
	if err = c.wait(o, reqs); err == nil {
		return false, nil
	}
	return c.unsettledOn("the pipeline", t, reqs, err), err
}

// stagedMessage runs a user's point-to-point transfer through the pipeline:
// a send of several chunks announced first; a receive of several chunks
// takes the sender's first message alone (recvAnnounced) before it posts
// the receives of its chunks.
func (c *Comm) stagedMessage(o *op, t transfer) error {
	if !c.announced(t) {
		return c.stagedMove(o, t)
	}
	if t.send {
		if err := c.sendAnnouncement(o, t); err != nil {
			return err
		}
		return c.stagedMove(o, t)
	}
	return c.recvAnnounced(o, t)
}

// recvAnnounced is a receive of several chunks: the sender's first message
// comes alone into a slot with room for a whole chunk, so that whatever the
// sender sent first (a header, the one message of a shorter send, a node
// path header or an IPC control message from a rank of the node) is taken
// whole, and nothing of the message has been copied out when the lengths
// are compared.
func (c *Comm) recvAnnounced(o *op, t transfer) error {
	peer := t.peers[0]
	room := max(c.chunk, announceLen, nodepath.HdrLen, ctlLen)
	s, err := c.eng.Pool.Take(room)
	if err != nil {
		return err
	}
	r, err := t.on.Irecv(s.Buf.Addr(), room, mpi.Byte, peer, t.tag)
	if err == nil {
		var keep bool
		if keep, err = c.settledStaged(o, t, r); keep {
			return err
		}
	}
	if err != nil {
		c.eng.Pool.Give(s)
		return err
	}
	got := r.Status().Count
	b := s.Bytes(min(got, room))
	bytes, isHeader := announcement(b, got)
	var first error
	switch {
	case isHeader:
	case c.isControl(b, got):
		first = c.refuseControl(o, t, b[:ctlLen], true)
	case got == nodepath.HdrLen && nodepath.IsHeader(b):
		first = c.nodeSenderMismatch(t, b)
	default:
		first = fmt.Errorf("%v: rank %d sent %d bytes; the sender's count differs: %w", t, peer, got, comm.ErrMismatch)
	}
	c.eng.Pool.Give(s)
	if !isHeader {
		return first
	}
	if bytes != t.bytes {
		return c.dropAnnounced(o, t, bytes)
	}
	return c.stagedMove(o, t)
}

// dropAnnounced is a receive's end when the sender announced bytes bytes
// that are not the receive's: the sender's chunks are received and dropped,
// so that its send completes, and the receive fails with ErrMismatch.
func (c *Comm) dropAnnounced(o *op, t transfer, bytes int) error {
	err := fmt.Errorf("%v: rank %d sent %d bytes; the sender's count differs: %w", t, t.peers[0], bytes, comm.ErrMismatch)
	if derr := c.drainStaged(o, t, bytes); derr != nil {
		return fmt.Errorf("%w; %w", err, derr) // the communicator is broken
	}
	return err
}

// nodeSenderMismatch is a staged receive's end when the sender took the
// node path (its count differs): the header h is here, and its chunks wait
// in its ring for a receive that will not come, so the communicator is
// broken.
func (c *Comm) nodeSenderMismatch(t transfer, h []byte) error {
	err := fmt.Errorf("%v: rank %d sent %d bytes through the node path; the sender's count differs: %w",
		t, t.peers[0], nodepath.HeaderBytes(h[:nodepath.HdrLen]), comm.ErrMismatch)
	c.setBroken(err)
	return err
}

// truncatedMismatch is a user's staged receive's error when MPI truncated
// its message (the sender's one message was longer than the receive's
// room: MPI took it, so the send completes), else err as it is.
func truncatedMismatch(t transfer, err error) error {
	if err == nil || t.send || !t.announce || !mpi.Truncated(err) {
		return err
	}
	return fmt.Errorf("%v: rank %d sent a message longer than this receive; the sender's count differs: %w", t, t.peers[0], comm.ErrMismatch)
}
