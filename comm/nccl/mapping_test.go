//go:build cgo

package nccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// TestNCCLTypeMapsEveryDType walks comm.DTypes() through ncclType: each maps
// to NCCL's type of the same elements (same size, no two alike), and values
// outside the table are unmapped, never ncclInt8 (NCCL's zero).
func TestNCCLTypeMapsEveryDType(t *testing.T) {
	want := map[comm.DType]nccl.DataType{
		comm.Int8: nccl.Int8, comm.Uint8: nccl.Uint8, comm.Int32: nccl.Int32, comm.Uint32: nccl.Uint32,
		comm.Int64: nccl.Int64, comm.Uint64: nccl.Uint64, comm.Float16: nccl.Float16, comm.BFloat16: nccl.Bfloat16,
		comm.Float32: nccl.Float32, comm.Float64: nccl.Float64,
	}
	seen := map[nccl.DataType]comm.DType{}
	for _, dt := range comm.DTypes() {
		m, ok := ncclType(dt)
		if !ok {
			t.Errorf("%v has no NCCL type", dt)
			continue
		}
		if w, known := want[dt]; !known || m != w || m.Size() != dt.Size() {
			t.Errorf("%v maps to NCCL type %d (size %d): want %d (size %d)", dt, m, m.Size(), w, dt.Size())
		}
		if prev, dup := seen[m]; dup {
			t.Errorf("%v and %v both map to NCCL type %d", prev, dt, m)
		}
		seen[m] = dt
	}
	for _, dt := range []comm.DType{0, -1, comm.DType(len(comm.DTypes()) + 1), 200} {
		if m, ok := ncclType(dt); ok {
			t.Errorf("ncclType(%v) = %d, true: want unmapped", dt, m)
		}
	}
}

// TestNCCLOpMapsEveryOp walks comm.Ops() through ncclOp: each maps to NCCL's
// reduction of the same name (Avg to ncclAvg, which NCCL has natively), no
// two alike, and values outside the table are unmapped, never ncclSum.
func TestNCCLOpMapsEveryOp(t *testing.T) {
	want := map[comm.Op]nccl.RedOp{comm.Sum: nccl.Sum, comm.Prod: nccl.Prod, comm.Min: nccl.Min, comm.Max: nccl.Max, comm.Avg: nccl.Avg}
	seen := map[nccl.RedOp]comm.Op{}
	for _, op := range comm.Ops() {
		m, ok := ncclOp(op)
		if !ok {
			t.Errorf("%v has no NCCL reduction", op)
			continue
		}
		if w, known := want[op]; !known || m != w {
			t.Errorf("%v maps to NCCL reduction %d, want %d", op, m, w)
		}
		if prev, dup := seen[m]; dup {
			t.Errorf("%v and %v both map to NCCL reduction %d", prev, op, m)
		}
		seen[m] = op
	}
	for _, op := range []comm.Op{0, -1, comm.Op(len(comm.Ops()) + 1), 200} {
		if m, ok := ncclOp(op); ok {
			t.Errorf("ncclOp(%v) = %d, true: want unmapped", op, m)
		}
	}
}

// TestNCCLEngineRefusesUnmappedValues calls each engine method with a value
// outside the tables on an engine with no NCCL behind it: each must return
// ErrInvalidArgument naming the value before any NCCL or CUDA call.
func TestNCCLEngineRefusesUnmappedValues(t *testing.T) {
	e := &ncclEngine{}
	var b devmem.Buffer
	badT, badO := comm.DType(200), comm.Op(200)
	calls := []struct {
		name, value string
		err         error
	}{
		{"allReduce type", "DType(200)", e.allReduce(b, b, 1, badT, comm.Sum, nil)},
		{"allReduce op", "Op(200)", e.allReduce(b, b, 1, comm.Float32, badO, nil)},
		{"reduce type", "DType(200)", e.reduce(b, b, 1, badT, comm.Max, 0, nil)},
		{"reduce op", "Op(200)", e.reduce(b, b, 1, comm.Int32, badO, 0, nil)},
		{"reduceScatter op", "Op(200)", e.reduceScatter(b, b, 1, comm.Int8, badO, nil)},
		{"broadcast", "DType(200)", e.broadcast(b, b, 1, badT, 0, nil)},
		{"allGather", "DType(200)", e.allGather(b, b, 1, badT, nil)},
		{"group", "DType(200)", e.group([]comm.P2P{{Kind: comm.SendKind, DType: comm.Float32}, {Kind: comm.RecvKind, DType: badT}}, nil)},
	}
	for _, c := range calls {
		if !errors.Is(c.err, comm.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.value) {
			t.Errorf("%s with %s: %v, want ErrInvalidArgument naming it", c.name, c.value, c.err)
		}
	}
}
