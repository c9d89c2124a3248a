package devmem

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"sync"
)

// moduleImpl and functionImpl are a driver's loaded module and kernel.
type moduleImpl interface {
	function(name string) (functionImpl, error)
	unload() error
}

type functionImpl interface {
	// launch queues the kernel on s, or for a nil s runs it to completion.
	launch(grid, block [3]uint32, sharedBytes int, s streamImpl, params [][]byte) error
}

// Module is compiled device code (PTX or cubin) loaded on one GPU. Modules
// come from Device.LoadModule; a nil *Module, or a zero Module that
// LoadModule did not make, is refused by every method that returns an
// error, with one wrapping ErrInvalidArgument, and has no Device.
type Module struct {
	dev *Device
	// mu keeps Unload from running while a launch uses the module's code.
	mu       sync.RWMutex
	impl     moduleImpl
	unloaded bool
}

// Function is one kernel of a loaded Module, from Module.Function; a nil
// *Function, or a zero Function that Module.Function did not make, is
// refused by Launch with an error wrapping ErrInvalidArgument, and has no
// Name.
type Function struct {
	mod  *Module
	name string
	impl functionImpl
}

// LoadModule loads a PTX (text) or cubin image on the GPU; PTX is compiled
// for the device by the driver. The image is copied, so the caller may reuse
// it. A host device runs no device code: the error wraps ErrUnsupported.
func (d *Device) LoadModule(image []byte) (*Module, error) {
	g, err := d.gpu("LoadModule")
	if err != nil {
		return nil, err
	}
	if len(image) == 0 {
		return nil, fmt.Errorf("devmem: LoadModule of an empty image: %w", ErrInvalidArgument)
	}
	impl, err := g.loadModule(image)
	if err != nil {
		return nil, fmt.Errorf("devmem: LoadModule on %v: %w", d, err)
	}
	return &Module{dev: d, impl: impl}, nil
}

// Device is the GPU the module is loaded on: nil for a nil or zero Module.
func (m *Module) Device() *Device {
	if m == nil {
		return nil
	}
	return m.dev
}

// zeroModuleErr is the error of a method of a zero Module.
func zeroModuleErr(what string) error {
	return fmt.Errorf("devmem: %s of a zero Module (modules come from Device.LoadModule): %w", what, ErrInvalidArgument)
}

// Function returns the kernel called name: its extern "C" name, or the
// mangled one for C++ kernels.
func (m *Module) Function(name string) (*Function, error) {
	if m == nil {
		return nil, fmt.Errorf("devmem: Function of a nil module: %w", ErrInvalidArgument)
	}
	if m.impl == nil {
		return nil, zeroModuleErr("Function")
	}
	if name == "" {
		return nil, fmt.Errorf("devmem: Function with an empty name: %w", ErrInvalidArgument)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.unloaded {
		return nil, fmt.Errorf("devmem: Function %q of an unloaded module: %w", name, ErrInvalidArgument)
	}
	impl, err := m.impl.function(name)
	if err != nil {
		return nil, fmt.Errorf("devmem: module on %v: %w", m.dev, err)
	}
	return &Function{mod: m, name: name, impl: impl}, nil
}

// Unload waits for the device's work, since queued launches may still run
// the module's code, and releases the module. Its Functions then refuse to
// launch.
func (m *Module) Unload() error {
	if m == nil {
		return fmt.Errorf("devmem: Unload of a nil module: %w", ErrInvalidArgument)
	}
	if m.impl == nil {
		return zeroModuleErr("Unload")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unloaded {
		return fmt.Errorf("devmem: module unloaded twice: %w", ErrInvalidArgument)
	}
	m.unloaded = true
	return m.impl.unload()
}

// Name is the kernel's name: "" for a nil or zero Function.
func (f *Function) Name() string {
	if f == nil {
		return ""
	}
	return f.name
}

// Launch queues the kernel on s with a grid of blocks, each of block threads
// and sharedBytes of dynamic shared memory; with a nil s it runs the kernel
// and waits for it. Each argument is packed at its C size: int8 to int64,
// uint8 to uint64, float32, float64 and uintptr as themselves, an array of
// one of those (say [32]uint64, for a C struct of 32 pointers passed by
// value) as its elements in order, and a Buffer (or a Slice, through its
// Buffer method) as its 8-byte device address.
// Plain int and uint are refused, because C's int is 4 bytes and Go's is 8:
// say int32 or int64. Everything is checked before the launch: a bad
// argument changes no memory.
func (f *Function) Launch(grid, block [3]uint32, sharedBytes int, s *Stream, args ...any) error {
	if f == nil {
		return fmt.Errorf("devmem: Launch of a nil function: %w", ErrInvalidArgument)
	}
	if f.mod == nil || f.impl == nil {
		return fmt.Errorf("devmem: Launch of a zero Function (functions come from Module.Function): %w", ErrInvalidArgument)
	}
	dev := f.mod.dev
	for i, v := range [6]uint32{grid[0], grid[1], grid[2], block[0], block[1], block[2]} {
		if v == 0 {
			return fmt.Errorf("devmem: launch of %s: grid %v, block %v has a zero dimension (%d): %w", f.name, grid, block, i, ErrInvalidArgument)
		}
	}
	if sharedBytes < 0 || sharedBytes > math.MaxUint32 {
		return fmt.Errorf("devmem: launch of %s: %d bytes of shared memory: %w", f.name, sharedBytes, ErrInvalidArgument)
	}
	if err := s.check(dev); err != nil {
		return fmt.Errorf("devmem: launch of %s: %w", f.name, err)
	}
	params, err := packArgs(dev, args)
	if err != nil {
		return fmt.Errorf("devmem: launch of %s: %w", f.name, err)
	}
	f.mod.mu.RLock()
	defer f.mod.mu.RUnlock()
	if f.mod.unloaded {
		return fmt.Errorf("devmem: launch of %s: its module was unloaded: %w", f.name, ErrInvalidArgument)
	}
	var si streamImpl
	if s != nil {
		si = s.impl
	}
	return f.impl.launch(grid, block, sharedBytes, si, params)
}

// bufferer is what Slice[T] of any T has, so that typed slices pass as
// kernel arguments without naming T here.
type bufferer interface{ Buffer() Buffer }

// packArgs turns launch arguments into their bytes at C sizes. Named types
// (type Celsius float32) pack as their underlying kind.
func packArgs(dev *Device, args []any) ([][]byte, error) {
	params := make([][]byte, len(args))
	for i, a := range args {
		if bb, ok := a.(bufferer); ok {
			a = bb.Buffer()
		}
		if b, ok := a.(Buffer); ok {
			if err := b.Check(fmt.Sprintf("argument %d", i), dev, 0); err != nil {
				return nil, err
			}
			params[i] = binary.NativeEndian.AppendUint64(nil, uint64(b.Addr()))
			continue
		}
		p, err := packValue(reflect.ValueOf(a))
		if err != nil {
			return nil, fmt.Errorf("argument %d: %w", i, err)
		}
		params[i] = p
	}
	return params, nil
}

// packValue is one argument's bytes: a sized number at its C size, or an
// array of them (a C struct of such fields, or an array member of one:
// kernels.Reduce passes its pointer table so) as its elements in order.
func packValue(v reflect.Value) ([]byte, error) {
	switch v.Kind() {
	case reflect.Int8:
		return []byte{byte(v.Int())}, nil
	case reflect.Uint8:
		return []byte{byte(v.Uint())}, nil
	case reflect.Int16:
		return binary.NativeEndian.AppendUint16(nil, uint16(v.Int())), nil
	case reflect.Uint16:
		return binary.NativeEndian.AppendUint16(nil, uint16(v.Uint())), nil
	case reflect.Int32:
		return binary.NativeEndian.AppendUint32(nil, uint32(v.Int())), nil
	case reflect.Uint32:
		return binary.NativeEndian.AppendUint32(nil, uint32(v.Uint())), nil
	case reflect.Int64:
		return binary.NativeEndian.AppendUint64(nil, uint64(v.Int())), nil
	case reflect.Uint64, reflect.Uintptr:
		return binary.NativeEndian.AppendUint64(nil, v.Uint()), nil
	case reflect.Float32:
		return binary.NativeEndian.AppendUint32(nil, math.Float32bits(float32(v.Float()))), nil
	case reflect.Float64:
		return binary.NativeEndian.AppendUint64(nil, math.Float64bits(v.Float())), nil
	case reflect.Int, reflect.Uint:
		return nil, fmt.Errorf("%v has no fixed C size (C's int is 4 bytes, Go's 8): pass int32 or int64: %w", v.Type(), ErrInvalidArgument)
	case reflect.Array:
		if v.Len() == 0 {
			return nil, fmt.Errorf("%v is empty: %w", v.Type(), ErrInvalidArgument)
		}
		if k := v.Type().Elem().Kind(); k == reflect.Array || k == reflect.Int || k == reflect.Uint {
			break // one level of sized numbers only
		}
		var out []byte
		for j := range v.Len() {
			p, err := packValue(v.Index(j))
			if err != nil {
				return nil, err
			}
			out = append(out, p...)
		}
		return out, nil
	}
	if !v.IsValid() {
		return nil, fmt.Errorf("nil cannot be a kernel argument: %w", ErrInvalidArgument)
	}
	return nil, fmt.Errorf("%v cannot be a kernel argument (want a sized number, an array of them, or a Buffer): %w", v.Type(), ErrInvalidArgument)
}
