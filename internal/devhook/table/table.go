// Package table is where devmem leaves the functions that
// internal/devhook hands to gpucomm's backends. It imports nothing of
// gpucomm, so that devmem can import it and fill it in its init; the type
// parameters stand for devmem's *Stream, *Device, Buffer and *Event, which
// this package cannot name. Only devmem and internal/devhook use it.
package table

// Funcs are devmem's backend-only operations, each the unexported devmem
// method of the same meaning (internal/devhook documents them).
type Funcs[S, D, B, E any] struct {
	HostWait         func(s S, wait func() error, poll func() (bool, error), deferred bool) error
	HostCall         func(s S, call func(before error) error) error
	HostFuncDeferred func(s S, fn func() error) error
	Enqueue          func(s S, fn func(handle uintptr) error) error
	EnqueueIn        func(s S, fn func(ctx, handle uintptr) error) error
	Task             func(s S, fn func(ctx, handle uintptr) error) error
	StreamHandle     func(s S) uintptr
	EventHandle      func(e E) uintptr
	Context          func(d D) uintptr
	IsVMM            func(b B) bool
	OnStaleViews     func(f func(d D, pid int) int) (unregister func())
}

// funcs holds the one Funcs that devmem set.
var funcs any

// Set records devmem's functions. devmem's init calls it, once.
func Set[S, D, B, E any](f Funcs[S, D, B, E]) { funcs = f }

// Get returns the functions Set recorded, and false unless Set recorded
// all of them for these types.
func Get[S, D, B, E any]() (Funcs[S, D, B, E], bool) {
	f, ok := funcs.(Funcs[S, D, B, E])
	if !ok || f.HostWait == nil || f.HostCall == nil || f.HostFuncDeferred == nil || f.Enqueue == nil || f.EnqueueIn == nil ||
		f.Task == nil || f.StreamHandle == nil || f.EventHandle == nil || f.Context == nil || f.IsVMM == nil || f.OnStaleViews == nil {
		return Funcs[S, D, B, E]{}, false
	}
	return f, true
}
