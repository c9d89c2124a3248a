//go:build cgo

package cbaseline

// #include "baseline.h"
import "C"

import (
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/ncclmap"
)

// The C loops have no table of element types or reductions: each is handed
// the library's own values, mapped by the mapping its backend uses (MPI:
// mpiArgs, internal/mpimap's; NCCL: ncclArgs, internal/ncclmap's), so that
// a DType or Op added to comm's tables is mapped for the baseline where it
// is mapped for the backend, and one a mapping lacks is an error here too.

// mapArgs are gcb_args' dtype and op as a library's mapping gives them:
// typeOf's value for a.DType and, where c reduces, opOf's for a.Op
// (GCB_NO_OP where c does not reduce). A value the mapping lacks is
// ErrUnsupported, before any C call.
func mapArgs[T, O ~int | ~int32](lib string, c Coll, a Args, typeOf func(comm.DType) (T, bool), opOf func(comm.Op) (O, bool)) (dtype, op C.int, err error) {
	t, ok := typeOf(a.DType)
	if !ok {
		return 0, 0, fmt.Errorf("%s %v of %v: no %s type: %w", lib, c, a.DType, lib, ErrUnsupported)
	}
	if !c.reduces() {
		return C.int(t), C.GCB_NO_OP, nil
	}
	o, ok := opOf(a.Op)
	if !ok {
		return 0, 0, fmt.Errorf("%s %v with %v: no %s reduction: %w", lib, c, a.Op, lib, ErrUnsupported)
	}
	return C.int(t), C.int(o), nil
}

// ncclArgs are gcb_args' dtype and op for the NCCL loop: ncclDataType_t and
// ncclRedOp_t from internal/ncclmap, the nccl backend's mapping.
func ncclArgs(c Coll, a Args) (dtype, op C.int, err error) {
	return mapArgs("NCCL", c, a, ncclmap.Type, ncclmap.Op)
}

// dtypeSize is gcb_args.elt for dt.
func dtypeSize(dt comm.DType) C.size_t { return C.size_t(dt.Size()) }

// noOp is GCB_NO_OP, for the tests.
const noOp = C.GCB_NO_OP

// cInt is a C int, for the tests.
func cInt(n int) C.int { return C.int(n) }
