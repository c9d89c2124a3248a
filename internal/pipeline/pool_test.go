package pipeline

import (
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// TestTakeLendsOneSlotAndGiveReturnsIt: a slot Take lends is counted lent,
// has room for what was asked in the pool's size class, and comes back to
// the pool on Give, where the next Take of that class finds it again (and
// Run's slots of that class too).
func TestTakeLendsOneSlotAndGiveReturnsIt(t *testing.T) {
	dev := devmem.NewHostDevice()
	p := NewPool(dev, 64)
	s, err := p.Take(8)
	if err != nil {
		t.Fatal(err)
	}
	if p.Lent() != 1 || s.Buf.Len() != p.Class(8) || p.Class(8) != 64 {
		t.Errorf("after Take(8): %d lent, a slot of %d bytes, want 1 lent and %d bytes", p.Lent(), s.Buf.Len(), p.Class(8))
	}
	big, err := p.Take(100)
	if err != nil {
		t.Fatal(err)
	}
	if big == s || big.Buf.Len() != 128 || p.Lent() != 2 {
		t.Errorf("Take(100) while one slot is lent: the same slot %v, %d bytes, %d lent; want another of 128 bytes, 2 lent", big == s, big.Buf.Len(), p.Lent())
	}
	p.Give(big)
	p.Give(s)
	if p.Lent() != 0 || p.Free(64) != 1 || p.Free(128) != 1 {
		t.Errorf("after Give: %d lent, %d free of 64 bytes, %d of 128; want 0, 1, 1", p.Lent(), p.Free(64), p.Free(128))
	}
	again, err := p.Take(64)
	if err != nil {
		t.Fatal(err)
	}
	if again != s || p.Free(64) != 0 {
		t.Errorf("Take(64) after Give: a new slot (%v) or %d still free; want the one given back", again != s, p.Free(64))
	}
	p.Give(again)
	slots, err := p.get(1, 64)
	if err != nil {
		t.Fatal(err)
	}
	if slots[0] != s {
		t.Error("Run's slots of the same class do not reuse the slot Give returned")
	}
	p.put(slots)
	if err := p.Close(); err != nil {
		t.Error(err)
	}
}
