package mpicomm

import (
	"encoding/binary"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/pipeline"
)

// A transfer is announced exactly when the pipeline cuts it into more than
// one chunk, for every element size, and only a user's message is.
func TestAnnouncedIsMoreThanOneChunk(t *testing.T) {
	for _, chunk := range []int{512, 4096, 1000, 1 << 20} {
		c := &Comm{chunk: chunk}
		for _, dt := range []comm.DType{comm.Int8, comm.Float16, comm.Float32, comm.Float64} {
			es := dt.Size()
			for _, n := range []int{0, es, chunk - es, chunk, chunk + es, 3*chunk + 5*es, 40 * chunk} {
				n -= n % es
				tr := transfer{bytes: n, dt: dt, announce: true}
				want := len(pipeline.Policy{Chunk: chunk}.Cut(es).Spans(n, true)) > 1
				if got := c.announced(tr); got != want {
					t.Errorf("chunk %d, %v, %d bytes: announced %v, want %v (more than one chunk)", chunk, dt, n, got, want)
				}
				if tr.announce = false; c.announced(tr) {
					t.Errorf("chunk %d, %v, %d bytes: a transfer not a user's message is announced", chunk, dt, n)
				}
			}
		}
	}
}

// announcement reads a header only of the header's length and magic, and of
// a length an int holds.
func TestAnnouncementReadsOnlyAHeader(t *testing.T) {
	h := make([]byte, 64)
	binary.LittleEndian.PutUint64(h, announceMagic)
	binary.LittleEndian.PutUint64(h[8:], 123456)
	if n, ok := announcement(h, announceLen); !ok || n != 123456 {
		t.Errorf("a header of 123456 bytes: %d, %v", n, ok)
	}
	for _, got := range []int{0, announceLen - 1, announceLen + 1, 64} {
		if _, ok := announcement(h, got); ok {
			t.Errorf("a message of %d bytes read as a header", got)
		}
	}
	if _, ok := announcement(h[:announceLen-1], announceLen); ok {
		t.Error("a short slice read as a header")
	}
	bad := append([]byte(nil), h...)
	bad[0] ^= 1
	if _, ok := announcement(bad, announceLen); ok {
		t.Error("a header with another magic read as one")
	}
	binary.LittleEndian.PutUint64(h[8:], 1<<63)
	if _, ok := announcement(h, announceLen); ok {
		t.Error("a header of 2^63 bytes read as one")
	}
}
