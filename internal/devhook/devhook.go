// Package devhook gives gpucomm's own backends the parts of a devmem
// stream and device that a user of devmem does not need: the host-work
// queue's deferred and polled waits and its tasks (the MPI backends), the
// raw CUstream, CUevent and CUcontext and a call at the stream's place in
// line (NCCL and other libraries that queue GPU work themselves), and
// whether a buffer is VMM memory (which a CUDA-aware MPI must not be
// handed). devmem's exported API keeps what a user needs (HostFunc,
// WaitEvent, Synchronize, Query, Destroy, events).
//
// How it reaches devmem: devmem cannot import a package that imports
// devmem, so devmem fills internal/devhook/table, which imports nothing of
// gpucomm, with its unexported methods in its init, as method values typed
// over its own *Stream, *Device, Buffer and *Event (table.Funcs is generic,
// so both sides are checked by the compiler). devhook imports devmem, so
// devmem's init has run before devhook's, which takes the functions once. A
// call here is one indirect call into the devmem method: no lookup, no type
// assertion and no allocation on the stream-ordered hot path:
// BenchmarkStreamHostCost here makes the calls of devmem's
// BenchmarkCUDAStreamHostCost and BenchmarkHostStreamHostCost, under the
// same case names, through devhook.
//
// Only gpucomm's backends, tools and tests import it; devmem imports only
// internal/devhook/table.
package devhook

import (
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/devhook/table"
)

var funcs = load()

func load() table.Funcs[*devmem.Stream, *devmem.Device, devmem.Buffer, *devmem.Event] {
	f, ok := table.Get[*devmem.Stream, *devmem.Device, devmem.Buffer, *devmem.Event]()
	if !ok {
		// devmem's init fills the table before any importer of devmem
		// starts; TestDevmemFilledEveryHook checks it.
		panic("devhook: devmem did not fill internal/devhook/table")
	}
	return f
}

// HostFuncDeferred is s.HostFunc(fn) for work that nothing needs to start
// before the stream's next Synchronize, such as waiting for MPI requests
// already posted: on the cuda driver, fn runs on the goroutine of that
// Synchronize (no goroutine has to start for it), or on the stream's
// goroutine as soon as later work is queued on s, and in any case within
// about two milliseconds (a sweep starts work deferred that long), so that
// it never waits on the host for a call that may not come. Elsewhere it is
// HostFunc. Errors are those of HostFunc.
func HostFuncDeferred(s *devmem.Stream, fn func() error) error {
	return funcs.HostFuncDeferred(s, fn)
}

// HostWait queues on s, in stream order, a wait for work already under way
// elsewhere (MPI requests, say): wait blocks until that work is done, and
// poll reports without blocking whether it is; each finishes it once done
// (only one of them is called to completion). On the cuda driver the
// stream's goroutine polls instead of blocking, and hands the wait over to
// a Synchronize of s that comes meanwhile, which then calls wait itself, so
// that the caller of Synchronize never sleeps while another goroutine
// waits; deferred, no goroutine starts for it, as with HostFuncDeferred.
// Unlike a host function, wait runs even when the GPU work queued before
// it failed (what it waits for is under way and must end); Synchronize
// then reports both. Elsewhere it is s.HostFunc(wait). A nil s runs wait
// now; a nil poll is an error wrapping devmem.ErrInvalidArgument. Other
// errors are those of HostFunc.
func HostWait(s *devmem.Stream, wait func() error, poll func() (bool, error), deferred bool) error {
	return funcs.HostWait(s, wait, poll, deferred)
}

// HostCall queues call on s as s.HostFunc queues a host function, but call
// runs even when the GPU work queued before it failed on the device (a
// fault that CUDA reports when the stream is waited for), given that failure
// (nil when there was none, and always on the host device): a backend's
// queued operation that holds a turn other calls wait for (a collective's
// ticket, a transfer's place on the node path) must give it up then, not
// leave them waiting. Synchronize reports the failure and call's error. A
// nil s runs call(nil) now; other errors are those of HostFunc.
func HostCall(s *devmem.Stream, call func(before error) error) error {
	return funcs.HostCall(s, call)
}

// Enqueue runs fn with s's CUstream, the device's primary context current,
// at s's place in line: now when no host work is queued on s (and fn's
// error is returned here), or else once the host work queued before it is
// done (and fn's error is returned by the next Synchronize of s). Libraries
// that queue GPU work on the stream themselves (NCCL) go through it, so
// that their work keeps its order among the stream's other work. For a nil
// stream or a stream of a host device fn gets 0 and runs now; a destroyed
// stream is an error wrapping devmem.ErrInvalidArgument.
func Enqueue(s *devmem.Stream, fn func(handle uintptr) error) error {
	return funcs.Enqueue(s, fn)
}

// EnqueueIn is Enqueue for fn that makes the context current itself,
// inside its own C call (NCCL's collectives in internal/nccl take it as
// their first argument): fn gets the device's primary context and s's
// CUstream, and runs on whatever thread, with whatever context current,
// the caller has; 0 and 0 for a nil stream or a stream of a host device.
func EnqueueIn(s *devmem.Stream, fn func(ctx, handle uintptr) error) error {
	return funcs.EnqueueIn(s, fn)
}

// Task queues fn on s's host-work queue, for work that runs on the host and
// issues GPU work on the stream itself, such as a transfer through MPI that
// ends with a wait for an IPC event: unlike HostFunc and HostCall, fn does
// not wait for the GPU work queued on s before it (only for the host work:
// fn runs after every host function, call, wait and task queued on s before
// it; the GPU work may still be running, and what fn issues on the stream
// comes after it in CUDA's order), and it always runs on a goroutine other
// than the caller's, even on an idle stream, so that Task returns at once
// however long fn blocks (in MPI, say). fn gets the device's primary
// context and s's CUstream, and issues its work with internal/cuda's In
// calls; that work is stream work of s: it comes before any work queued on
// s after Task was called (which waits on the host for fn to return), and
// Synchronize and Query wait for and look at it. fn's error, or a panic in
// fn made an error, is returned by the next Synchronize of s. On a stream
// of a host device fn gets 0 and 0 and runs as a host function would, in
// order. A nil s or fn is an error wrapping devmem.ErrInvalidArgument, and
// fn does not run; other errors are those of HostFunc.
func Task(s *devmem.Stream, fn func(ctx, handle uintptr) error) error {
	return funcs.Task(s, fn)
}

// StreamHandle is the CUstream under s, or 0 for a nil stream or a stream
// of a host device (or a build without cgo). It stays valid until s is
// destroyed.
func StreamHandle(s *devmem.Stream) uintptr { return funcs.StreamHandle(s) }

// EventHandle is the CUevent under e (an interprocess event's, opened or
// not, included), or 0 for a nil event or an event of a host device (or a
// build without cgo). It stays valid until e is destroyed. CUDA calls on it
// go to CUDA directly: a record made there is not one that devmem's own
// waits for e know of (they hold back, on the host, only for e's Records
// still queued behind host work).
func EventHandle(e *devmem.Event) uintptr { return funcs.EventHandle(e) }

// Context is the primary CUcontext of a GPU device, or 0 for a host device
// (or a build without cgo). Devices are never closed, so it stays valid for
// the life of the process.
func Context(d *devmem.Device) uintptr { return funcs.Context(d) }

// IsVMM reports whether b's memory comes from the driver's virtual memory
// management: AllocShared's memory where it chose VMM (and so NodeShared's
// on such a GPU), the views OpenIPC returns of it, and any Slice of those.
// CUDA's legacy IPC (cuIpcGetMemHandle), which a CUDA-aware MPI uses
// between the ranks of a node, does not work on such memory. It is false
// for the zero Buffer and for every buffer of a host device.
func IsVMM(b devmem.Buffer) bool { return funcs.IsVMM(b) }

// OnStaleViews registers f with devmem: when Device.OpenIPC is refused
// with devmem.ErrAlreadyMapped (the exporter freed memory that a view kept
// open in this process still maps, and allocated what the open names in its
// place), f is asked to close the idle views of process pid's memory it
// keeps on d's device, and says how many it closed; the open is tried once
// more when some were. f runs with no lock of devmem's held. The returned
// function unregisters f. internal/ipccache registers each cache.
func OnStaleViews(f func(d *devmem.Device, pid int) int) (unregister func()) {
	return funcs.OnStaleViews(f)
}
