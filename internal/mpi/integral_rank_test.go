//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// integralFold is the reference of a logical or bitwise reduction of the
// unsigned bit patterns a and b (of one size: masking is the caller's).
func integralFold(op Op, a, b uint64) uint64 {
	truth := func(v bool) uint64 {
		if v {
			return 1
		}
		return 0
	}
	switch op {
	case LAnd:
		return truth(a != 0 && b != 0)
	case LOr:
		return truth(a != 0 || b != 0)
	case LXor:
		return truth((a != 0) != (b != 0))
	case BAnd:
		return a & b
	case BOr:
		return a | b
	case BXor:
		return a ^ b
	}
	panic("not an integral op")
}

// TestRankIntegralOps reduces random integers of every integer Datatype
// with every logical and bitwise Op (MPI's predefined ones, which the table
// in gpucomm_mpi.c maps), checked element by element against integralFold,
// and checks a floating Datatype with one of them is an error, with the
// receive buffer untouched, never an arithmetic op in its place.
func TestRankIntegralOps(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	rank, size := c.Rank(), c.Size()
	const count = 301
	for _, dt := range []Datatype{Int8, Uint8, Int32, Uint32, Int64, Uint64} {
		for _, op := range IntegralOps() {
			t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
				a.off = 0
				es := dt.Size()
				inputs := make([][]byte, size)
				for r := range inputs {
					inputs[r] = randomBytes(count*es, uint64(dt), uint64(op), uint64(r))
					// Zeros for the logical ops to see: every fourth element.
					for i := 0; i < count; i += 4 + r {
						setElem(inputs[r], i, es, 0)
					}
				}
				want := make([]byte, count*es)
				copy(want, inputs[0])
				for r := 1; r < size; r++ {
					for i := range count {
						setElem(want, i, es, integralFold(op, getElem(want, i, es), getElem(inputs[r], i, es)))
					}
				}
				send, recv := a.alloc(t, count*es), a.alloc(t, count*es)
				copy(send.bytes(), inputs[rank])
				must(t, "Allreduce", c.Allreduce(send.addr(), recv.addr(), count, dt, op))
				expectElems(t, "Allreduce", dt, recv.bytes(), want)
				expectElems(t, "Allreduce send buffer", dt, send.bytes(), inputs[rank])
				expectGuards(t, "Allreduce", send, recv)
			})
		}
	}
	// A floating type has no logical or bitwise op: every rank's call fails
	// (MPI refuses MPI_OP_NULL), and nothing is written.
	a.off = 0
	send, recv := a.alloc(t, 8*4), a.alloc(t, 8*4)
	err := c.Allreduce(send.addr(), recv.addr(), 8, Float32, BAnd)
	if !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("Allreduce of float32 with %v: %v, want ErrInvalidArgument", BAnd, err)
	}
	expectPoisoned(t, "Allreduce of float32 with band", recv.bytes())
}

// TestOpTableIsMPIs checks the Op table: every op is named and valid, the
// arithmetic and integral ones are apart, and numbers between and beyond
// them are not ops.
func TestOpTableIsMPIs(t *testing.T) {
	seen := map[string]Op{}
	for _, op := range append(Ops(), IntegralOps()...) {
		if !op.Valid() || op.Arithmetic() == op.Integral() {
			t.Errorf("%v: valid %v, arithmetic %v, integral %v", op, op.Valid(), op.Arithmetic(), op.Integral())
		}
		if prev, dup := seen[op.String()]; dup {
			t.Errorf("%v and %v share the name %q", prev, op, op.String())
		}
		seen[op.String()] = op
	}
	if len(seen) != 10 {
		t.Errorf("%d ops, want MPI's 10 predefined reductions (MAXLOC and MINLOC aside)", len(seen))
	}
	for _, bad := range []Op{0, Max + 1, LAnd - 1, BXor + 1, -1} {
		if bad.Valid() {
			t.Errorf("%d counts as an op (%v)", int(bad), bad)
		}
	}
}
