package devmem

import (
	"fmt"
	"math"
	"reflect"
	"sync"
	"unsafe"
)

// Slice is a typed view of a Buffer: n elements of T. T must be a plain
// fixed-size value type (numbers, or arrays and structs of them) with no
// pointers, and of non-zero size. A type of size zero (struct{}, [0]float32)
// has no bytes to view; a type that holds Go pointers (a pointer, string,
// slice, map, channel, function, interface or unsafe.Pointer, alone or in an
// array or struct) would hide them from the garbage collector in device or
// pinned memory, and reading one back would forge a pointer. AllocSlice,
// SliceOf, FromBytes and NewNodeSharedSlice refuse both.
type Slice[T any] struct {
	buf Buffer
	n   int
}

func elemSize[T any]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// elemVerdicts caches checkElem's verdict per element type (reflect.Type to
// elemVerdict), so that the walk of a type runs once.
var elemVerdicts sync.Map

type elemVerdict struct{ err error }

// checkElem returns nil when T may be the element type of device or pinned
// memory (see Slice): of non-zero size and holding no pointers. Otherwise
// it returns an error wrapping ErrInvalidArgument that names T and why.
func checkElem[T any]() error {
	t := reflect.TypeFor[T]()
	switch t.Kind() { // the usual element types, without the cache
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return nil
	}
	if v, ok := elemVerdicts.Load(t); ok {
		return v.(elemVerdict).err
	}
	var err error
	if t.Size() == 0 {
		err = fmt.Errorf("element type %v has size zero, so no bytes to view: %w", t, ErrInvalidArgument)
	} else if where, ok := pointerIn(t, ""); ok {
		err = fmt.Errorf("element type %v holds Go pointers (%s), which device or pinned memory would hide from the garbage collector: %w",
			t, where, ErrInvalidArgument)
	}
	elemVerdicts.Store(t, elemVerdict{err})
	return err
}

// pointerKinds names the kinds whose values are or hold Go pointers.
var pointerKinds = map[reflect.Kind]string{
	reflect.Pointer: "pointer", reflect.UnsafePointer: "unsafe.Pointer", reflect.String: "string",
	reflect.Slice: "slice", reflect.Map: "map", reflect.Chan: "channel", reflect.Func: "function",
	reflect.Interface: "interface",
}

// pointerIn reports whether a value of t holds a Go pointer, and where:
// the kind found, and path (the way to it from the element type, "" at the
// top).
func pointerIn(t reflect.Type, path string) (string, bool) {
	if kind, ok := pointerKinds[t.Kind()]; ok {
		if path == "" {
			return kind, true
		}
		return kind + " at " + path, true
	}
	switch t.Kind() {
	case reflect.Array:
		if t.Len() == 0 {
			return "", false // no elements, so no pointers
		}
		return pointerIn(t.Elem(), path+"[0]")
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if where, ok := pointerIn(f.Type, path+"."+f.Name); ok {
				return where, true
			}
		}
	}
	return "", false
}

// AllocSlice allocates room for n elements of T on d. A negative n, an n
// whose bytes an int cannot count, and an element type of size zero or that
// holds pointers (see Slice) are refused with an error wrapping
// ErrInvalidArgument, and allocate nothing.
func AllocSlice[T any](d *Device, n int) (Slice[T], error) {
	if err := checkElem[T](); err != nil {
		return Slice[T]{}, fmt.Errorf("devmem: slice of %d elements: %w", n, err)
	}
	sz := elemSize[T]()
	switch {
	case n < 0:
		return Slice[T]{}, fmt.Errorf("devmem: slice of %d elements: %w", n, ErrInvalidArgument)
	case n > math.MaxInt/sz:
		return Slice[T]{}, fmt.Errorf("devmem: slice of %d elements of %d bytes: more bytes than an int counts: %w", n, sz, ErrInvalidArgument)
	}
	b, err := d.Alloc(n * sz)
	if err != nil {
		return Slice[T]{}, err
	}
	return Slice[T]{buf: b, n: n}, nil
}

// SliceOf views b as elements of T; a trailing partial element is left out.
// For an element type that Slice refuses (of size zero, which has no bytes
// to view, or holding pointers) it returns the zero Slice: no elements, on
// no buffer, which every call that takes a buffer refuses with an error
// wrapping ErrInvalidArgument.
func SliceOf[T any](b Buffer) Slice[T] {
	if checkElem[T]() != nil {
		return Slice[T]{}
	}
	return Slice[T]{buf: b, n: b.Len() / elemSize[T]()}
}

// Len is the number of elements.
func (s Slice[T]) Len() int { return s.n }

// Buffer is the bytes underneath.
func (s Slice[T]) Buffer() Buffer { return s.buf }

// Device is the slice's device.
func (s Slice[T]) Device() *Device { return s.buf.Device() }

// Free frees the allocation underneath.
func (s Slice[T]) Free() error { return s.buf.Free() }

// Sub is the view of elements [i, j).
func (s Slice[T]) Sub(i, j int) (Slice[T], error) {
	if i < 0 || j < i || j > s.n {
		return Slice[T]{}, fmt.Errorf("devmem: sub-slice [%d:%d] of %d elements: %w", i, j, s.n, ErrInvalidArgument)
	}
	sz := elemSize[T]()
	b, err := s.buf.Slice(i*sz, (j-i)*sz)
	if err != nil {
		return Slice[T]{}, err
	}
	return Slice[T]{buf: b, n: j - i}, nil
}

// Host is the host view of the elements, when the host can touch them.
func (s Slice[T]) Host() ([]T, bool) {
	b, ok := s.buf.Bytes()
	if !ok {
		return nil, false
	}
	if s.n == 0 {
		return []T{}, true
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), s.n), true
}

// CopyFrom copies src into the start of s; it returns once the copy is done.
func (s Slice[T]) CopyFrom(src []T, st *Stream) error {
	if len(src) > s.n {
		return fmt.Errorf("devmem: copy of %d elements into a slice of %d: %w", len(src), s.n, ErrInvalidArgument)
	}
	return CopyFromHost(s.buf, AsBytes(src), st)
}

// CopyTo copies the first len(dst) elements of s into dst; it returns once
// the copy is done.
func (s Slice[T]) CopyTo(dst []T, st *Stream) error {
	if len(dst) > s.n {
		return fmt.Errorf("devmem: copy of %d elements out of a slice of %d: %w", len(dst), s.n, ErrInvalidArgument)
	}
	return CopyToHost(AsBytes(dst), s.buf, st)
}

// ToHost returns a new Go slice holding s's elements.
func (s Slice[T]) ToHost(st *Stream) ([]T, error) {
	out := make([]T, s.n)
	return out, s.CopyTo(out, st)
}

// AsBytes views a slice of plain values as its bytes, without copying. For
// a T that Slice refuses (of size zero, or holding pointers: bytes written
// through the view would forge them) it returns nil, as FromBytes does: a
// copy into it moves no bytes. Slice's CopyTo and CopyFrom refuse such a T
// with an error.
func AsBytes[T any](v []T) []byte {
	if len(v) == 0 || checkElem[T]() != nil {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*elemSize[T]())
}

// FromBytes views bytes as plain values of T, without copying; b must be
// aligned for T (device and pinned allocations are). For a T that Slice
// refuses (of size zero, or holding pointers, which bytes would forge) it
// returns nil.
func FromBytes[T any](b []byte) []T {
	if checkElem[T]() != nil {
		return nil
	}
	n := len(b) / elemSize[T]()
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}
