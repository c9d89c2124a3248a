//go:build cgo

package cbaseline

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/ncclmap"
)

// outside are DType and Op values no table holds.
var (
	outsideDTypes = []comm.DType{-1, comm.DType(len(comm.DTypes()) + 1), 200}
	outsideOps    = []comm.Op{-1, comm.Op(len(comm.Ops()) + 1), 200}
	// reducing and moving are one operation that reduces and one that
	// does not, for the walks below.
	reducing, moving = AllReduce, AllGather
)

// TestGCBMapsEveryDTypeAndOp walks comm.DTypes() x comm.Ops() through the NCCL
// loop's arguments (ncclArgs, then cArgs, the gcb_args the C loop gets; no
// GPU needed): every pair maps, to exactly the values of the nccl backend's
// mapping (internal/ncclmap), with the element's size; an operation that
// does not reduce carries no reduction (GCB_NO_OP, never ncclSum's 0); and
// values outside the tables are ErrUnsupported before any C call, never a
// default.
func TestGCBMapsEveryDTypeAndOp(t *testing.T) {
	for _, dt := range comm.DTypes() {
		wantT, ok := ncclmap.Type(dt)
		if !ok {
			t.Errorf("%v has no NCCL type in internal/ncclmap", dt)
			continue
		}
		for _, op := range comm.Ops() {
			a := Args{DType: dt, Op: op}
			ct, co, err := ncclArgs(reducing, a)
			if err != nil {
				t.Errorf("the NCCL loop has no mapping for %v %v: %v", dt, op, err)
				continue
			}
			wantO, _ := ncclmap.Op(op)
			ca := cArgs(reducing, a, ct, co)
			if int(ca.dtype) != int(wantT) || int(ca.op) != int(wantO) || int(ca.elt) != dt.Size() {
				t.Errorf("%v %v reaches the NCCL loop as type %d, op %d, %d bytes: want %d, %d, %d",
					dt, op, ca.dtype, ca.op, ca.elt, wantT, wantO, dt.Size())
			}
		}
		ct, co, err := ncclArgs(moving, Args{DType: dt, Op: comm.Sum})
		if err != nil || int(ct) != int(wantT) || co != noOp {
			t.Errorf("%v %v: type %d, op %d, %v: want %d and no reduction (%d)", moving, dt, ct, co, err, wantT, noOp)
		}
	}
	for _, dt := range append(outsideDTypes, 0) {
		if _, _, err := ncclArgs(moving, Args{DType: dt}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("the NCCL loop's mapping of %v: %v, want ErrUnsupported", dt, err)
		}
	}
	for _, op := range append(outsideOps, 0) {
		if _, _, err := ncclArgs(reducing, Args{DType: comm.Float32, Op: op}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("the NCCL loop's mapping of %v: %v, want ErrUnsupported (never a Sum)", op, err)
		}
	}
}
