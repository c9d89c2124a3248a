// Package ncclmap is gpucomm's one mapping from its element types and
// reductions (comm/driver's tables) to NCCL's values (internal/nccl): the
// nccl backend calls NCCL with it, and bench/cbaseline's C loop is handed
// what it produces, so that the two never map a value differently and a
// reduction added to driver's table is mapped (or refused) here only.
//
// It is a package of its own, below both, because bench/cbaseline cannot
// import comm/nccl's unexported names; it imports comm/driver (for the
// tables) and internal/nccl (for NCCL's values) and nothing else.
package ncclmap

import (
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// Type maps dt to NCCL's type of the same elements (NCCL has all of them
// natively, float16 and bfloat16 included); false for a DType it does not
// know (NCCL's zero, ncclInt8, is never a default). A switch, not a map:
// it runs on every call. comm/nccl's mapping_test.go walks driver.DTypes().
func Type(dt driver.DType) (nccl.DataType, bool) {
	switch dt {
	case driver.Int8:
		return nccl.Int8, true
	case driver.Uint8:
		return nccl.Uint8, true
	case driver.Int32:
		return nccl.Int32, true
	case driver.Uint32:
		return nccl.Uint32, true
	case driver.Int64:
		return nccl.Int64, true
	case driver.Uint64:
		return nccl.Uint64, true
	case driver.Float16:
		return nccl.Float16, true
	case driver.BFloat16:
		return nccl.Bfloat16, true
	case driver.Float32:
		return nccl.Float32, true
	case driver.Float64:
		return nccl.Float64, true
	}
	return 0, false
}

// Op maps op to NCCL's reduction, the average included (NCCL 2.10 and
// later; comm/nccl's avgfault.go decides when it is worked around); false
// for an Op it does not know (NCCL's zero, ncclSum, is never a default).
// A reduction NCCL lacks is left out here, so that both the backend and the
// C baseline refuse it.
func Op(op driver.Op) (nccl.RedOp, bool) {
	switch op {
	case driver.Sum:
		return nccl.Sum, true
	case driver.Prod:
		return nccl.Prod, true
	case driver.Min:
		return nccl.Min, true
	case driver.Max:
		return nccl.Max, true
	case driver.Avg:
		return nccl.Avg, true
	}
	return 0, false
}
