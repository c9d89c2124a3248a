//go:build cgo

package cbaseline

// #include "baseline.h"
import "C"

import "github.com/gpucomm/gpucomm/comm"

// gcbDType maps comm's element types to baseline.h's GCB_* (by name, not by
// number, so that a DType added to comm and not to baseline.h is caught);
// false for a DType it does not know. mapping_test.go walks comm.DTypes.
func gcbDType(dt comm.DType) (C.int, bool) {
	switch dt {
	case comm.Int8:
		return C.GCB_INT8, true
	case comm.Uint8:
		return C.GCB_UINT8, true
	case comm.Int32:
		return C.GCB_INT32, true
	case comm.Uint32:
		return C.GCB_UINT32, true
	case comm.Int64:
		return C.GCB_INT64, true
	case comm.Uint64:
		return C.GCB_UINT64, true
	case comm.Float16:
		return C.GCB_FLOAT16, true
	case comm.BFloat16:
		return C.GCB_BFLOAT16, true
	case comm.Float32:
		return C.GCB_FLOAT32, true
	case comm.Float64:
		return C.GCB_FLOAT64, true
	}
	return 0, false
}

// gcbOp maps comm's reductions to baseline.h's GCB_*; false for an Op it
// does not know.
func gcbOp(op comm.Op) (C.int, bool) {
	switch op {
	case comm.Sum:
		return C.GCB_SUM, true
	case comm.Prod:
		return C.GCB_PROD, true
	case comm.Min:
		return C.GCB_MIN, true
	case comm.Max:
		return C.GCB_MAX, true
	case comm.Avg:
		return C.GCB_AVG, true
	}
	return 0, false
}

// gcbUnmapped is what an unmapped DType or Op becomes in gcb_args: no GCB_*
// value, so the C loops answer GCB_ETYPE (ErrUnsupported) rather than take a
// default.
const gcbUnmapped = -1

// cDType and cOp are gcb_args' dtype and op for dt and op. A zero Op stays
// zero: collectives that do not reduce leave Op unset (and Args.check
// refuses a zero Op where one reduces).
func cDType(dt comm.DType) C.int {
	if t, ok := gcbDType(dt); ok {
		return t
	}
	return gcbUnmapped
}

func cOp(op comm.Op) C.int {
	if op == 0 {
		return 0
	}
	if o, ok := gcbOp(op); ok {
		return o
	}
	return gcbUnmapped
}

// ncclMaps is gcb_nccl_maps: whether the NCCL loop has dt and op.
func ncclMaps(dt, op C.int) bool { return C.gcb_nccl_maps(dt, op) == C.GCB_OK }
