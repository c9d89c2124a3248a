//go:build cgo

package cbaseline

// #include "baseline.h"
import "C"

import "unsafe"

// cArgs is a's C form, with dtype and op mapped for the loop that runs it
// (mpiArgs, ncclArgs).
func cArgs(c Coll, a Args, dtype, op C.int) C.gcb_args {
	b := func(v bool) C.int {
		if v {
			return 1
		}
		return 0
	}
	return C.gcb_args{
		coll: C.int(c), send: C.uintptr_t(a.Send), recv: C.uintptr_t(a.Recv), count: C.size_t(a.Count),
		dtype: dtype, op: op, elt: dtypeSize(a.DType), root: C.int(a.Root), peer: C.int(a.Peer),
		initiator: b(a.Initiator), window: C.int(a.Window), warmup: C.int(a.Warmup), sync_each: b(a.SyncEach),
	}
}

// timesPtr is where C writes the iterations' seconds; nil for none.
func timesPtr(times []float64) *C.double {
	if len(times) == 0 {
		return nil
	}
	return (*C.double)(unsafe.Pointer(&times[0]))
}
