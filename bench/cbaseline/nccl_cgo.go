//go:build cgo

package cbaseline

// #cgo LDFLAGS: -ldl -lpthread
// #include <stdlib.h>
// #include "baseline.h"
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gpucomm/gpucomm/comm"
)

// NCCLIDSize is the size of an ncclUniqueId.
const NCCLIDSize = 128

// NCCL is one rank's NCCL communicator with a CUDA stream of its own.
type NCCL struct {
	mu   sync.Mutex
	s    *C.gcb_nccl
	rank int
}

// ncclError turns a loop's result into an error carrying its message.
func ncclError(rc C.int, what string, msg []C.char) error {
	text := C.GoString(&msg[0])
	switch rc {
	case C.GCB_OK:
		return nil
	case C.GCB_ELOAD:
		return fmt.Errorf("cbaseline: %s: %s: %w", what, text, comm.ErrLibraryNotFound)
	case C.GCB_ETYPE:
		return fmt.Errorf("cbaseline: %s: %w", what, ErrUnsupported)
	case C.GCB_EARG:
		if text == "" {
			text = "bad argument"
		}
		return fmt.Errorf("cbaseline: %s: %s: %w", what, text, comm.ErrInvalidArgument)
	case C.GCB_ENOMEM:
		return fmt.Errorf("cbaseline: %s: out of host memory", what)
	}
	return fmt.Errorf("cbaseline: %s: %s", what, text)
}

// NCCLUniqueID makes the id that every rank passes to NewNCCL; rank 0 makes
// it and the caller carries it to the others.
func NCCLUniqueID() ([NCCLIDSize]byte, error) {
	var id [NCCLIDSize]byte
	var msg [512]C.char
	rc := C.gcb_nccl_unique_id((*C.uchar)(unsafe.Pointer(&id[0])), &msg[0], C.int(len(msg)))
	return id, ncclError(rc, "ncclGetUniqueId", msg[:])
}

// NewNCCL joins rank of an nranks-rank NCCL communicator on the GPU with the
// given ordinal; every rank calls it with the same id, at about the same time.
func NewNCCL(ordinal, nranks, rank int, id [NCCLIDSize]byte) (*NCCL, error) {
	if err := checkNCCLRank(ordinal, nranks, rank); err != nil {
		return nil, err
	}
	// The C side makes the GPU's context current on this thread first.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var s *C.gcb_nccl
	var msg [512]C.char
	rc := C.gcb_nccl_open(C.int(ordinal), C.int(nranks), C.int(rank), (*C.uchar)(unsafe.Pointer(&id[0])), &s, &msg[0], C.int(len(msg)))
	if err := ncclError(rc, "ncclCommInitRank", msg[:]); err != nil {
		return nil, err
	}
	return &NCCL{s: s, rank: rank}, nil
}

// Run times len(times) iterations of c on device buffers after a.Warmup
// untimed ones, each with a pair of CUDA events on the loop's own stream.
// PingPong and Bandwidth are called by the pair only; the Initiator gets the
// times, its peer zeros.
func (n *NCCL) Run(c Coll, a Args, times []float64) error {
	if err := a.check(c, times); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.s == nil {
		return fmt.Errorf("cbaseline: NCCL %v on a closed communicator: %w", c, comm.ErrClosed)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ca := cArgs(c, a)
	var msg [512]C.char
	rc := C.gcb_nccl_run(n.s, &ca, C.int(len(times)), timesPtr(times), &msg[0], C.int(len(msg)))
	return ncclError(rc, "NCCL "+c.String(), msg[:])
}

// Close destroys the communicator and its stream.
func (n *NCCL) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.s == nil {
		return fmt.Errorf("cbaseline: NCCL closed twice: %w", comm.ErrClosed)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var msg [512]C.char
	rc := C.gcb_nccl_close(n.s, &msg[0], C.int(len(msg)))
	n.s = nil
	return ncclError(rc, "ncclCommDestroy", msg[:])
}
