//go:build cgo

package cbaseline

import (
	"testing"

	"github.com/gpucomm/gpucomm/comm"
)

// outside are DType and Op values no table holds.
var (
	outsideDTypes = []comm.DType{-1, comm.DType(len(comm.DTypes) + 1), 200}
	outsideOps    = []comm.Op{-1, comm.Op(len(comm.Ops) + 1), 200}
)

// TestGCBMapsEveryDTypeAndOp walks comm.DTypes x comm.Ops through the Go
// side (gcbDType, gcbOp: distinct GCB_* values) and the NCCL loop's C side
// (gcb_nccl_maps, no GPU needed: it only maps), and checks values outside
// the tables are unmapped on both and reach C as a value C refuses.
func TestGCBMapsEveryDTypeAndOp(t *testing.T) {
	seenT := map[int]comm.DType{}
	for _, dt := range comm.DTypes {
		c, ok := gcbDType(dt)
		if !ok {
			t.Errorf("%v has no GCB_* value", dt)
			continue
		}
		if prev, dup := seenT[int(c)]; dup || c <= 0 {
			t.Errorf("%v maps to %d (also %v's)", dt, c, prev)
		}
		seenT[int(c)] = dt
		if cDType(dt) != c {
			t.Errorf("cDType(%v) = %d, want %d", dt, cDType(dt), c)
		}
	}
	seenO := map[int]comm.Op{}
	for _, op := range comm.Ops {
		c, ok := gcbOp(op)
		if !ok {
			t.Errorf("%v has no GCB_* value", op)
			continue
		}
		if prev, dup := seenO[int(c)]; dup || c <= 0 {
			t.Errorf("%v maps to %d (also %v's)", op, c, prev)
		}
		seenO[int(c)] = op
		if cOp(op) != c {
			t.Errorf("cOp(%v) = %d, want %d", op, cOp(op), c)
		}
	}
	for _, dt := range comm.DTypes {
		for _, op := range comm.Ops {
			if !ncclMaps(cDType(dt), cOp(op)) {
				t.Errorf("the NCCL loop has no mapping for %v %v", dt, op)
			}
		}
	}
	for _, dt := range append(outsideDTypes, 0) {
		if c, ok := gcbDType(dt); ok {
			t.Errorf("gcbDType(%v) = %d, true: want unmapped", dt, c)
		}
		if ncclMaps(cDType(dt), cOp(comm.Sum)) {
			t.Errorf("the NCCL loop accepted %v (as %d)", dt, cDType(dt))
		}
	}
	for _, op := range outsideOps {
		if c, ok := gcbOp(op); ok {
			t.Errorf("gcbOp(%v) = %d, true: want unmapped", op, c)
		}
		if ncclMaps(cDType(comm.Float32), cOp(op)) {
			t.Errorf("the NCCL loop accepted %v (as %d), never a Sum", op, cOp(op))
		}
	}
	if cOp(0) != 0 {
		t.Errorf("cOp(0) = %d: an unset Op (a collective that does not reduce) must stay 0", cOp(0))
	}
}
