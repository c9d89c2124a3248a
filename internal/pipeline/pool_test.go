package pipeline

import (
	"errors"
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

// A pool whose base is not a power of two keeps each class apart (a class
// is filed by its size's bit length), and refuses a slot that is not one of
// its classes, before it takes its lock: a Part of a slot, or a slot of
// another pool, would be lent for a class larger than it.
func TestPoolClassesOfAnOddBaseAndForeignSlots(t *testing.T) {
	dev := devmem.NewHostDevice()
	p := NewPool(dev, 3000)
	sizes := map[int]int{1: 3000, 3000: 3000, 3001: 6000, 6000: 6000, 6001: 12000}
	var lent []*Slot
	for ask, want := range sizes {
		s, err := p.Take(ask)
		if err != nil {
			t.Fatal(err)
		}
		if s.Buf.Len() != want {
			t.Errorf("Take(%d): %d bytes, want %d", ask, s.Buf.Len(), want)
		}
		lent = append(lent, s)
	}
	for _, s := range lent {
		p.Give(s)
	}
	if p.Free(3000) != 2 || p.Free(6000) != 2 || p.Free(12000) != 1 {
		t.Errorf("free by class: %d, %d, %d; want 2, 2, 1", p.Free(3000), p.Free(6000), p.Free(12000))
	}
	for ask, want := range sizes {
		s, err := p.Take(ask)
		if err != nil {
			t.Fatal(err)
		}
		if s.Buf.Len() != want {
			t.Errorf("Take(%d) from the free slots: %d bytes, want %d", ask, s.Buf.Len(), want)
		}
		p.Give(s)
	}
	whole, err := p.Take(3000)
	if err != nil {
		t.Fatal(err)
	}
	part, err := whole.Part(0, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other := NewPool(dev, 2048)
	foreign, err := other.Take(2048)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Slot{"a Part": part, "another pool's slot": foreign} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Give of %s: no panic", name)
				}
			}()
			p.Give(s)
		}()
	}
	p.Give(whole) // the lock was not left held
	other.Give(foreign)
	if p.Lent() != 0 || p.Free(3000) != 2 {
		t.Errorf("after the refused slots: %d lent, %d free of 3000 bytes; want 0, 2 (nothing filed with them)", p.Lent(), p.Free(3000))
	}
	if err := errors.Join(p.Close(), other.Close()); err != nil {
		t.Error(err)
	}
}
