//go:build cgo

package cbaseline

// #include <stdlib.h>
// #include "baseline.h"
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// boundFns are the functions the NCCL loop calls, by GCB_FN_* slot, and
// the library each comes from: CUDA's are named as internal/cuda names its
// calls, which resolves each to the versioned symbol it uses itself.
var boundFns = []struct {
	slot C.int
	nccl bool // from NCCL; otherwise from the CUDA driver
	name string
}{
	{C.GCB_FN_ncclGetUniqueId, true, "ncclGetUniqueId"},
	{C.GCB_FN_ncclCommInitRank, true, "ncclCommInitRank"},
	{C.GCB_FN_ncclCommDestroy, true, "ncclCommDestroy"},
	{C.GCB_FN_ncclAllReduce, true, "ncclAllReduce"},
	{C.GCB_FN_ncclAllGather, true, "ncclAllGather"},
	{C.GCB_FN_ncclReduceScatter, true, "ncclReduceScatter"},
	{C.GCB_FN_ncclBroadcast, true, "ncclBroadcast"},
	{C.GCB_FN_ncclReduce, true, "ncclReduce"},
	{C.GCB_FN_ncclSend, true, "ncclSend"},
	{C.GCB_FN_ncclRecv, true, "ncclRecv"},
	{C.GCB_FN_ncclGroupStart, true, "ncclGroupStart"},
	{C.GCB_FN_ncclGroupEnd, true, "ncclGroupEnd"},
	{C.GCB_FN_ncclGetErrorString, true, "ncclGetErrorString"},
	{C.GCB_FN_cuDeviceGet, false, "cuDeviceGet"},
	{C.GCB_FN_cuDevicePrimaryCtxRetain, false, "cuDevicePrimaryCtxRetain"},
	{C.GCB_FN_cuDevicePrimaryCtxRelease, false, "cuDevicePrimaryCtxRelease"},
	{C.GCB_FN_cuCtxSetCurrent, false, "cuCtxSetCurrent"},
	{C.GCB_FN_cuStreamCreate, false, "cuStreamCreate"},
	{C.GCB_FN_cuStreamSynchronize, false, "cuStreamSynchronize"},
	{C.GCB_FN_cuStreamDestroy, false, "cuStreamDestroy"},
	{C.GCB_FN_cuEventCreate, false, "cuEventCreate"},
	{C.GCB_FN_cuEventRecord, false, "cuEventRecord"},
	{C.GCB_FN_cuEventElapsedTime, false, "cuEventElapsedTime"},
	{C.GCB_FN_cuEventDestroy, false, "cuEventDestroy"},
	{C.GCB_FN_cuGetErrorString, false, "cuGetErrorString"},
}

// bound is the binding of the C loop to the loaders' libraries: made once,
// by the first call that succeeds (a failure is tried again next time, as
// the loaders do), and kept for the life of the process, as they keep the
// libraries.
var bound struct {
	mu         sync.Mutex
	done       bool
	nccl, cuda string // the files the functions come from
}

// bind hands the C loop the functions internal/cuda and internal/nccl
// resolved, loading them first: the CUDA driver (cuInit included), then
// NCCL. A library that cannot be loaded is their error, wrapping
// comm.ErrLibraryNotFound and naming the file tried.
func bind() error {
	bound.mu.Lock()
	defer bound.mu.Unlock()
	if bound.done {
		return nil
	}
	var ncclNames, cudaNames []string
	for _, f := range boundFns {
		if f.nccl {
			ncclNames = append(ncclNames, f.name)
		} else {
			cudaNames = append(cudaNames, f.name)
		}
	}
	cudaPath, cudaAddrs, err := cuda.Symbols(cudaNames...)
	if err != nil {
		return fmt.Errorf("cbaseline: %w", err)
	}
	ncclPath, ncclAddrs, err := nccl.Symbols(ncclNames...)
	if err != nil {
		return fmt.Errorf("cbaseline: %w", err)
	}
	// C memory: gcb_nccl_bind copies the addresses, and Go memory holding
	// C pointers must not be handed to C.
	table := (*[C.GCB_FN_COUNT]unsafe.Pointer)(C.calloc(C.GCB_FN_COUNT, C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
	defer C.free(unsafe.Pointer(table))
	for _, f := range boundFns {
		if f.nccl {
			table[f.slot], ncclAddrs = ncclAddrs[0], ncclAddrs[1:]
		} else {
			table[f.slot], cudaAddrs = cudaAddrs[0], cudaAddrs[1:]
		}
	}
	if rc := C.gcb_nccl_bind(&table[0]); rc != C.GCB_OK {
		return fmt.Errorf("cbaseline: a function of NCCL or CUDA was not handed over (gcb_nccl_bind: %d)", int(rc))
	}
	bound.done, bound.nccl, bound.cuda = true, ncclPath, cudaPath
	return nil
}

// Libraries loads NCCL and the CUDA driver for the NCCL loop, as NewNCCL
// does, and returns the files they were loaded from: the files the nccl
// backend calls too (internal/nccl, internal/cuda, GPUCOMM_NCCL_LIB and
// GPUCOMM_CUDA_LIB honoured).
func Libraries() (ncclFile, cudaFile string, err error) {
	if err := bind(); err != nil {
		return "", "", err
	}
	bound.mu.Lock()
	defer bound.mu.Unlock()
	return bound.nccl, bound.cuda, nil
}

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
	if err := bind(); err != nil {
		return id, err
	}
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
	if err := bind(); err != nil {
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
// untimed ones, each with a pair of CUDA events on the loop's own stream;
// with a.SyncEach by the host's clock instead, from the call to the end of
// a synchronize of the stream, each collective's iteration after a barrier
// that was waited for (gpucomm's wall-clock timing, bench's -nostream and
// -wall).
// PingPong and Bandwidth are called by the pair only; the Initiator gets the
// times, its peer zeros.
func (n *NCCL) Run(c Coll, a Args, times []float64) error {
	if err := a.check(c, times); err != nil {
		return err
	}
	dtype, op, err := ncclArgs(c, a)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.s == nil {
		return fmt.Errorf("cbaseline: NCCL %v on a closed communicator: %w", c, comm.ErrClosed)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ca := cArgs(c, a, dtype, op)
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
