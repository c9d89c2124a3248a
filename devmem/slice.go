package devmem

import (
	"fmt"
	"math"
	"unsafe"
)

// Slice is a typed view of a Buffer: n elements of T. T must be a plain
// fixed-size value type (numbers, or structs of them) with no pointers, and
// of non-zero size: a type of size zero (struct{}, [0]float32) has no bytes
// to view, and AllocSlice and SliceOf refuse it.
type Slice[T any] struct {
	buf Buffer
	n   int
}

func elemSize[T any]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// AllocSlice allocates room for n elements of T on d. A negative n, an n
// whose bytes an int cannot count, and an element type of size zero are
// refused with an error wrapping ErrInvalidArgument, and allocate nothing.
func AllocSlice[T any](d *Device, n int) (Slice[T], error) {
	sz := elemSize[T]()
	switch {
	case sz == 0:
		return Slice[T]{}, fmt.Errorf("devmem: slice of %T, a type of size zero: %w", *new(T), ErrInvalidArgument)
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
// For an element type of size zero, which has no bytes to view, it returns
// the zero Slice: no elements, on no buffer, which every call that takes a
// buffer refuses with an error wrapping ErrInvalidArgument.
func SliceOf[T any](b Buffer) Slice[T] {
	sz := elemSize[T]()
	if sz == 0 {
		return Slice[T]{}
	}
	return Slice[T]{buf: b, n: b.Len() / sz}
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

// AsBytes views a slice of plain values as its bytes, without copying.
func AsBytes[T any](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*elemSize[T]())
}

// FromBytes views bytes as plain values of T, without copying; b must be
// aligned for T (device and pinned allocations are). For a T of size zero
// it returns nil.
func FromBytes[T any](b []byte) []T {
	sz := elemSize[T]()
	if sz == 0 {
		return nil
	}
	n := len(b) / sz
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}
