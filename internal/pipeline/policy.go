package pipeline

// The chunk-size policy, all of it: which chunk the ranks start from, how a
// message is cut into chunks, and how large a slot a chunk needs. A new
// policy is a change of this file alone; the ranks of a communicator agree
// on Policy.Chunk at Open, and every rank cuts a message the same way from
// it.

// DefaultChunkBytes is the pipelining chunk when no option sets one: at 1 MiB
// MPI reaches most of its bandwidth between ranks while a message of a few
// MiB still splits into enough chunks for the copies to overlap (measured with
// cmd/pingpong; see the package comment of comm/mpi).
const DefaultChunkBytes = 1 << 20

// Chunks grow along the message: the first is the agreed chunk and each
// next one twice the one before, up to maxGrownChunk (or the agreed chunk,
// when that is larger). Each chunk costs MPI a rendezvous and the copies a
// launch and a wait: measured on an H200 (two ranks, one GPU), a 32 MiB
// ping-pong reached 0.77 of host MPI with 1 MiB chunks, 0.85 with 2 MiB and
// 0.90 with 4 MiB, while a short first chunk keeps the copy before MPI
// starts short.
const maxGrownChunk = 4 << 20

// Policy cuts the messages of one communicator; Chunk is the chunk its
// ranks agreed on.
type Policy struct {
	Chunk int
}

// Cut is how one transfer is cut: the first chunk of Chunk bytes, later ones
// doubling up to MaxChunk bytes (0: all are Chunk), each in a slot of at
// least SlotBytes (0: the largest chunk).
type Cut struct {
	Chunk, MaxChunk, SlotBytes int
}

// Cut is the cut of a message of elements of es bytes: the first chunk the
// agreed chunk in whole elements, later ones doubling up to maxGrownChunk
// (or the agreed chunk, if larger), in whole elements too.
func (p Policy) Cut(es int) Cut {
	m := max(p.Chunk, maxGrownChunk)
	return Cut{Chunk: max(es, p.Chunk/es*es), MaxChunk: max(es, m/es*es)}
}

// Widened is the cut of an 8-bit reduction that is widened to int32 in its
// slot: chunks of a quarter of the agreed chunk, each in a slot four times
// its size, so that a widened chunk is one agreed chunk.
func (p Policy) Widened() Cut {
	q := max(1, p.Chunk/4)
	return Cut{Chunk: q, SlotBytes: 4 * q}
}

// PoolBase is the smallest slot of the pool: the agreed chunk, with room
// for one element of any type and for a widened byte.
func (p Policy) PoolBase() int { return max(p.Chunk, 8) }

// Spans cuts a message of bytes bytes into chunks {offset, bytes}: the
// first of c.Chunk bytes, each next one twice the one before up to
// c.MaxChunk. The cuts depend on the chunk's index only, never on the
// message's length, so that a sender and a receiver that disagree on the
// length still cut the same way up to the shorter one's end, and the
// receiver sees the difference instead of a sender waiting for receives
// that never come. atLeastOne: a message of 0 bytes is one empty chunk.
func (c Cut) Spans(bytes int, atLeastOne bool) [][2]int {
	var out [][2]int
	n := c.Chunk
	for off := 0; off < bytes; off += n {
		if len(out) > 0 && c.MaxChunk > n {
			n = min(2*n, c.MaxChunk)
		}
		out = append(out, [2]int{off, min(n, bytes-off)})
	}
	if len(out) == 0 && atLeastOne {
		out = append(out, [2]int{0, 0})
	}
	return out
}
