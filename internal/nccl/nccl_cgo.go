//go:build cgo

package nccl

/*
#include "ncclapi.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/dl"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// kCount is the number of slots in the C table.
const kCount = C.K_count

// symbols maps each table slot to its library name. Optional ones may be
// absent; calling them then returns ErrUnsupported.
var symbols = []struct {
	slot     C.int
	name     string
	optional bool
}{
	{C.K_ncclGetVersion, "ncclGetVersion", false},
	{C.K_ncclGetErrorString, "ncclGetErrorString", false},
	{C.K_ncclGetLastError, "ncclGetLastError", true},
	{C.K_ncclGetUniqueId, "ncclGetUniqueId", false},
	{C.K_ncclCommInitRank, "ncclCommInitRank", false},
	{C.K_ncclCommInitRankConfig, "ncclCommInitRankConfig", true},
	{C.K_ncclCommSplit, "ncclCommSplit", true},
	{C.K_ncclCommFinalize, "ncclCommFinalize", true},
	{C.K_ncclCommDestroy, "ncclCommDestroy", false},
	{C.K_ncclCommAbort, "ncclCommAbort", false},
	{C.K_ncclCommGetAsyncError, "ncclCommGetAsyncError", false},
	{C.K_ncclCommCount, "ncclCommCount", false},
	{C.K_ncclCommCuDevice, "ncclCommCuDevice", false},
	{C.K_ncclCommUserRank, "ncclCommUserRank", false},
	{C.K_ncclAllReduce, "ncclAllReduce", false},
	{C.K_ncclReduce, "ncclReduce", false},
	{C.K_ncclBroadcast, "ncclBroadcast", false},
	{C.K_ncclAllGather, "ncclAllGather", false},
	{C.K_ncclReduceScatter, "ncclReduceScatter", false},
	{C.K_ncclSend, "ncclSend", false},
	{C.K_ncclRecv, "ncclRecv", false},
	{C.K_ncclGroupStart, "ncclGroupStart", false},
	{C.K_ncclGroupEnd, "ncclGroupEnd", false},
}

var state struct {
	once    dl.Once // NCCL, kept open once loaded
	version int     // ncclGetVersion's code, set under once's lock before it counts as loaded
}

// Load opens NCCL, resolves its symbols and checks its version. It is safe
// for concurrent use and does nothing once it has succeeded; a failure is
// retried next time.
func Load() error {
	return state.once.Load(func() (*dl.Library, error) {
		lib, err := dl.OpenEnv(EnvLib, "libnccl.so.2", "libnccl.so")
		if err != nil {
			return nil, fmt.Errorf("nccl: load NCCL: %w", err)
		}
		var missing []string
		for _, s := range symbols {
			p, err := lib.Sym(s.name)
			if err != nil {
				if !s.optional {
					missing = append(missing, s.name)
				}
				continue
			}
			C.gpucomm_nccl_set(s.slot, p)
		}
		if len(missing) > 0 {
			unload(lib)
			return nil, fmt.Errorf("nccl: %s has no %s: %w", lib.Name, strings.Join(missing, ", "), errs.ErrLibraryNotFound)
		}
		var v C.int
		if err := result("ncclGetVersion", C.gn_ncclGetVersion(&v), 0); err != nil {
			unload(lib)
			return nil, err
		}
		if int(v) < MinVersion {
			unload(lib)
			major, minor, patch := decodeVersion(int(v))
			return nil, fmt.Errorf("nccl: %s is NCCL %d.%d.%d; gpucomm needs 2.12.0 or newer: %w",
				lib.Name, major, minor, patch, errs.ErrUnsupported)
		}
		state.version = int(v)
		return lib, nil
	})
}

// unload empties the table and closes lib.
func unload(lib *dl.Library) {
	C.gpucomm_nccl_clear()
	lib.Close()
}

// reset forgets the loaded library, so that a test can load another one.
func reset() { state.once.Reset(func() { C.gpucomm_nccl_clear() }) }

func ready() error { return Load() }

// has reports whether an optional symbol was found, as an error naming it.
func has(slot C.int, name string) error {
	if C.gpucomm_nccl_has(slot) == 0 {
		return fmt.Errorf("nccl: %s is not in this NCCL (needs a newer release): %w", name, errs.ErrUnsupported)
	}
	return nil
}

// result turns an ncclResult_t into nil or an *Error naming call. comm, when
// not 0, is asked for its last error text.
func result(call string, r C.ncclResult_t, comm Comm) error {
	if Result(r) == Success || Result(r) == InProgress {
		return nil
	}
	e := &Error{Call: call, Code: Result(r)}
	if s := C.gn_errorString(r); s != nil {
		e.Message = C.GoString(s)
	}
	if s := C.gn_lastError(C.uintptr_t(comm)); s != nil {
		e.Detail = C.GoString(s)
	}
	return e
}

// readyIn loads NCCL and, for a ctx that is not 0, hands the C side
// internal/cuda's cuCtxGetCurrent and cuCtxSetCurrent (once).
func readyIn(ctx cuda.Context) error {
	if err := ready(); err != nil {
		return err
	}
	if ctx == 0 || ctxFns.Load() {
		return nil
	}
	ctxFnsMu.Lock()
	defer ctxFnsMu.Unlock()
	if !ctxFns.Load() {
		get, set, err := cuda.CtxFuncs()
		if err != nil {
			return fmt.Errorf("nccl: making a CUDA context current: %w", err)
		}
		C.gn_set_ctxfns(C.uintptr_t(get), C.uintptr_t(set))
		ctxFns.Store(true)
	}
	return nil
}

var (
	ctxFnsMu sync.Mutex
	ctxFns   atomic.Bool
)

// resultIn is result for a collective's gn_ret: a failure to make the
// context current (a CUDA error) or NCCL's result.
func resultIn(call string, r C.gn_ret, comm Comm) error {
	if r.cu != 0 {
		what := "cuCtxGetCurrent"
		if r.stage == 2 {
			what = "cuCtxSetCurrent"
		}
		return fmt.Errorf("nccl: %s: %w", call, cuda.ErrorOf(what, int(r.cu)))
	}
	return result(call, r.r, comm)
}

func count(call string, n int) (C.size_t, error) {
	if n < 0 {
		return 0, fmt.Errorf("nccl: %s: negative count %d: %w", call, n, errs.ErrInvalidArgument)
	}
	return C.size_t(n), nil
}

// Version returns the loaded NCCL's version.
func Version() (major, minor, patch int, err error) {
	if err := ready(); err != nil {
		return 0, 0, 0, err
	}
	major, minor, patch = decodeVersion(state.version)
	return major, minor, patch, nil
}

// GetUniqueID makes the id that names a new communicator; one rank calls it
// and sends the id to the others.
func GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := ready(); err != nil {
		return id, err
	}
	r := C.gn_ncclGetUniqueId(unsafe.Pointer(&id))
	return id, result("ncclGetUniqueId", r, 0)
}

// CommInitRank joins the communicator id as rank of nranks, on the current
// CUDA device. It blocks until every rank has joined.
func CommInitRank(nranks int, id UniqueID, rank int) (Comm, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var c C.uintptr_t
	r := C.gn_ncclCommInitRank(&c, C.int(nranks), unsafe.Pointer(&id), C.int(rank))
	return Comm(c), result("ncclCommInitRank", r, 0)
}

// CommInitRankConfig is CommInitRank with settings (NCCL 2.14 and later).
func CommInitRankConfig(nranks int, id UniqueID, rank int, cfg Config) (Comm, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	if err := has(C.K_ncclCommInitRankConfig, "ncclCommInitRankConfig"); err != nil {
		return 0, err
	}
	blocking := C.int(1)
	if cfg.NonBlocking {
		blocking = 0
	}
	var c C.uintptr_t
	r := C.gn_ncclCommInitRankConfig(&c, C.int(nranks), unsafe.Pointer(&id), C.int(rank), blocking)
	return Comm(c), result("ncclCommInitRankConfig", r, 0)
}

// CommSplit makes new communicators from the ranks of c with equal color,
// ordered by key (NCCL 2.18 and later). With SplitNoColor it returns 0.
func CommSplit(c Comm, color, key int) (Comm, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	if err := has(C.K_ncclCommSplit, "ncclCommSplit"); err != nil {
		return 0, err
	}
	var out C.uintptr_t
	r := C.gn_ncclCommSplit(C.uintptr_t(c), C.int(color), C.int(key), &out)
	return Comm(out), result("ncclCommSplit", r, c)
}

// CommFinalize flushes c's outstanding work so that CommDestroy will not
// block (NCCL 2.14 and later; with an older NCCL, just call CommDestroy).
func CommFinalize(c Comm) error {
	if err := ready(); err != nil {
		return err
	}
	if err := has(C.K_ncclCommFinalize, "ncclCommFinalize"); err != nil {
		return err
	}
	return result("ncclCommFinalize", C.gn_ncclCommFinalize(C.uintptr_t(c)), c)
}

// CommDestroy frees c.
func CommDestroy(c Comm) error {
	if err := ready(); err != nil {
		return err
	}
	return result("ncclCommDestroy", C.gn_ncclCommDestroy(C.uintptr_t(c)), 0)
}

// CommAbort frees c and abandons its outstanding work: the way out after a
// failure or a peer's death.
func CommAbort(c Comm) error {
	if err := ready(); err != nil {
		return err
	}
	return result("ncclCommAbort", C.gn_ncclCommAbort(C.uintptr_t(c)), 0)
}

// CommGetAsyncError returns c's asynchronous state: Success, InProgress for a
// non-blocking call still running, or the error that broke c.
func CommGetAsyncError(c Comm) (Result, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var async C.int
	r := C.gn_ncclCommGetAsyncError(C.uintptr_t(c), &async)
	return Result(async), result("ncclCommGetAsyncError", r, c)
}

// CommCount returns the number of ranks in c.
func CommCount(c Comm) (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var n C.int
	r := C.gn_ncclCommCount(C.uintptr_t(c), &n)
	return int(n), result("ncclCommCount", r, c)
}

// CommCuDevice returns the CUDA device c runs on.
func CommCuDevice(c Comm) (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var d C.int
	r := C.gn_ncclCommCuDevice(C.uintptr_t(c), &d)
	return int(d), result("ncclCommCuDevice", r, c)
}

// CommUserRank returns the caller's rank in c.
func CommUserRank(c Comm) (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	var rank C.int
	r := C.gn_ncclCommUserRank(C.uintptr_t(c), &rank)
	return int(rank), result("ncclCommUserRank", r, c)
}

// The collectives below take the CUDA context to make current on the calling
// thread around the NCCL call, inside the same C call (see readyIn); 0
// leaves the thread's context as it is, for a caller that made it current.

// AllReduce reduces n elements of send across c into recv on every rank.
func AllReduce(ctx cuda.Context, send, recv cuda.DevicePtr, n int, dt DataType, op RedOp, c Comm, s cuda.Stream) error {
	if err := readyIn(ctx); err != nil {
		return err
	}
	cn, err := count("ncclAllReduce", n)
	if err != nil {
		return err
	}
	r := C.gn_ncclAllReduce(C.uintptr_t(ctx), C.uintptr_t(send), C.uintptr_t(recv), cn, C.int(dt), C.int(op), C.uintptr_t(c), C.uintptr_t(s))
	return resultIn("ncclAllReduce", r, c)
}

// Reduce reduces n elements of send across c into recv on root.
func Reduce(ctx cuda.Context, send, recv cuda.DevicePtr, n int, dt DataType, op RedOp, root int, c Comm, s cuda.Stream) error {
	if err := readyIn(ctx); err != nil {
		return err
	}
	cn, err := count("ncclReduce", n)
	if err != nil {
		return err
	}
	r := C.gn_ncclReduce(C.uintptr_t(ctx), C.uintptr_t(send), C.uintptr_t(recv), cn, C.int(dt), C.int(op), C.int(root), C.uintptr_t(c), C.uintptr_t(s))
	return resultIn("ncclReduce", r, c)
}

// Broadcast copies n elements of root's send into recv on every rank.
func Broadcast(ctx cuda.Context, send, recv cuda.DevicePtr, n int, dt DataType, root int, c Comm, s cuda.Stream) error {
	if err := readyIn(ctx); err != nil {
		return err
	}
	cn, err := count("ncclBroadcast", n)
	if err != nil {
		return err
	}
	r := C.gn_ncclBroadcast(C.uintptr_t(ctx), C.uintptr_t(send), C.uintptr_t(recv), cn, C.int(dt), C.int(root), C.uintptr_t(c), C.uintptr_t(s))
	return resultIn("ncclBroadcast", r, c)
}

// AllGather gathers sendCount elements from every rank into recv, in rank order.
func AllGather(ctx cuda.Context, send, recv cuda.DevicePtr, sendCount int, dt DataType, c Comm, s cuda.Stream) error {
	if err := readyIn(ctx); err != nil {
		return err
	}
	cn, err := count("ncclAllGather", sendCount)
	if err != nil {
		return err
	}
	r := C.gn_ncclAllGather(C.uintptr_t(ctx), C.uintptr_t(send), C.uintptr_t(recv), cn, C.int(dt), C.uintptr_t(c), C.uintptr_t(s))
	return resultIn("ncclAllGather", r, c)
}

// ReduceScatter reduces send across c and leaves block rank, of recvCount
// elements, in recv on each rank.
func ReduceScatter(ctx cuda.Context, send, recv cuda.DevicePtr, recvCount int, dt DataType, op RedOp, c Comm, s cuda.Stream) error {
	if err := readyIn(ctx); err != nil {
		return err
	}
	cn, err := count("ncclReduceScatter", recvCount)
	if err != nil {
		return err
	}
	r := C.gn_ncclReduceScatter(C.uintptr_t(ctx), C.uintptr_t(send), C.uintptr_t(recv), cn, C.int(dt), C.int(op), C.uintptr_t(c), C.uintptr_t(s))
	return resultIn("ncclReduceScatter", r, c)
}

// Send sends n elements to peer; it pairs with the peer's Recv.
func Send(send cuda.DevicePtr, n int, dt DataType, peer int, c Comm, s cuda.Stream) error {
	if err := ready(); err != nil {
		return err
	}
	cn, err := count("ncclSend", n)
	if err != nil {
		return err
	}
	r := C.gn_ncclSend(C.uintptr_t(send), cn, C.int(dt), C.int(peer), C.uintptr_t(c), C.uintptr_t(s))
	return result("ncclSend", r, c)
}

// Recv receives n elements from peer; it pairs with the peer's Send.
func Recv(recv cuda.DevicePtr, n int, dt DataType, peer int, c Comm, s cuda.Stream) error {
	if err := ready(); err != nil {
		return err
	}
	cn, err := count("ncclRecv", n)
	if err != nil {
		return err
	}
	r := C.gn_ncclRecv(C.uintptr_t(recv), cn, C.int(dt), C.int(peer), C.uintptr_t(c), C.uintptr_t(s))
	return result("ncclRecv", r, c)
}

// GroupStart begins a group: the calls up to GroupEnd are issued together,
// which is how a rank posts a Send and a Recv without deadlock. Group state
// is per OS thread: keep the goroutine locked from GroupStart to GroupEnd.
func GroupStart() error {
	if err := ready(); err != nil {
		return err
	}
	return result("ncclGroupStart", C.gn_ncclGroupStart(), 0)
}

// GroupEnd issues the calls since GroupStart.
func GroupEnd() error {
	if err := ready(); err != nil {
		return err
	}
	return result("ncclGroupEnd", C.gn_ncclGroupEnd(), 0)
}
