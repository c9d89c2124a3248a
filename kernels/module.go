package kernels

import (
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/gpucomm/gpucomm/devmem"
)

//go:embed *.cu
var sources embed.FS

// moduleLoader is how kernels reaches a CUDA device: devmem's cuda driver
// (cuda.go), or a fake in tests.
type moduleLoader interface {
	ComputeCapability(d *devmem.Device) (major, minor int, err error)
	LoadModule(d *devmem.Device, image []byte) (module, error)
}

// module is a loaded CUDA module.
type module interface {
	Function(name string) (function, error)
	Unload() error
}

// function is a kernel of a loaded module. Launch packs each argument at its
// C size: int32, int64, float32, float64, and devmem.Buffer as its address.
type function interface {
	Launch(grid, block [3]uint32, sharedBytes int, s *devmem.Stream, args ...any) error
}

// compiler is NVRTC (see nvrtc.go), or a fake in tests.
type compiler interface {
	Compile(src, name string, opts []string) (ptx, cubin []byte, log string, err error)
	Version() (major, minor int, err error)
}

// runtime compiles, caches, loads and launches the kernels of CUDA devices.
type runtime struct {
	mu       sync.Mutex
	loader   moduleLoader
	nvrtc    compiler
	cacheDir func() (string, error)
	loaded   map[loadKey]*loadedModule
}

type loadKey struct {
	dev  *devmem.Device
	file string
}

type loadedModule struct {
	mod module
	fns map[string]function
}

// defaultRuntime is what launchers use.
var defaultRuntime = &runtime{cacheDir: CacheDir, nvrtc: nvrtcCompiler{}, loader: devmemLoader{}}

func (rt *runtime) launch(dev *devmem.Device, s *devmem.Stream, l launch) error {
	fn, err := rt.function(dev, l.file, l.kernel)
	if err != nil {
		return err
	}
	if err := fn.Launch(l.grid, l.block, l.shared, s, l.args...); err != nil {
		return fmt.Errorf("kernels: launch of %s on %v: %w", l.kernel, dev, err)
	}
	return nil
}

// function returns a kernel of file's module on dev, building and loading
// the module on first use.
func (rt *runtime) function(dev *devmem.Device, file, kernel string) (function, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.loader == nil || rt.nvrtc == nil {
		return nil, fmt.Errorf("kernels: %s on %v: no CUDA module loader or NVRTC binding: %w", kernel, dev, devmem.ErrUnsupported)
	}
	key := loadKey{dev, file}
	lm := rt.loaded[key]
	if lm == nil {
		mod, err := rt.load(dev, file)
		if err != nil {
			return nil, err
		}
		lm = &loadedModule{mod: mod, fns: map[string]function{}}
		if rt.loaded == nil {
			rt.loaded = map[loadKey]*loadedModule{}
		}
		rt.loaded[key] = lm
	}
	fn := lm.fns[kernel]
	if fn == nil {
		var err error
		if fn, err = lm.mod.Function(kernel); err != nil {
			return nil, fmt.Errorf("kernels: %s has no kernel %s: %w", file, kernel, err)
		}
		lm.fns[kernel] = fn
	}
	return fn, nil
}

// load builds file for dev's architecture, from the disk cache when it can,
// and loads it. A cached image the driver rejects is rebuilt once.
func (rt *runtime) load(dev *devmem.Device, file string) (module, error) {
	src, err := sources.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("kernels: no source %s: %w", file, err)
	}
	major, minor, err := rt.loader.ComputeCapability(dev)
	if err != nil {
		return nil, fmt.Errorf("kernels: compute capability of %v: %w", dev, err)
	}
	vmaj, vmin, err := rt.nvrtc.Version()
	if err != nil {
		return nil, fmt.Errorf("kernels: NVRTC version: %w", err)
	}
	opts := nvrtcOptions(major, minor)
	c := diskCache{dir: rt.dir()}
	key := cacheKey(string(src), file, opts, vmaj, vmin)
	if image, ok := c.load(key); ok {
		if mod, err := rt.loader.LoadModule(dev, image); err == nil {
			return mod, nil
		}
	}
	image, err := build(rt.nvrtc, string(src), file, opts)
	if err != nil {
		return nil, err
	}
	c.store(key, image)
	mod, err := rt.loader.LoadModule(dev, image)
	if err != nil {
		return nil, fmt.Errorf("kernels: loading %s (%s) on %v: %w", file, opts[0], dev, err)
	}
	return mod, nil
}

func (rt *runtime) dir() string {
	if rt.cacheDir == nil {
		return ""
	}
	d, err := rt.cacheDir()
	if err != nil {
		return "" // no cache: every process compiles, which is slower but right
	}
	return d
}

// build compiles src with NVRTC and returns the image to load: the cubin,
// or the PTX (NUL-terminated, as the driver wants) when NVRTC made none.
func build(c compiler, src, file string, opts []string) ([]byte, error) {
	ptx, cubin, log, err := c.Compile(src, file, opts)
	if err != nil {
		return nil, &CompileError{File: file, Options: opts, Log: log, Err: err}
	}
	if len(cubin) > 0 {
		return cubin, nil
	}
	if len(ptx) == 0 {
		return nil, &CompileError{File: file, Options: opts, Log: log, Err: errors.New("NVRTC returned neither cubin nor PTX")}
	}
	if ptx[len(ptx)-1] != 0 {
		ptx = append(ptx[:len(ptx):len(ptx)], 0)
	}
	return ptx, nil
}

// CompileError is a kernel source NVRTC would not compile, with its log.
type CompileError struct {
	File    string
	Options []string
	Log     string
	Err     error
}

func (e *CompileError) Error() string {
	msg := fmt.Sprintf("kernels: NVRTC could not compile %s with %v: %v", e.File, e.Options, e.Err)
	if e.Log != "" && !strings.Contains(msg, e.Log) { // internal/nvrtc's errors carry the log already
		msg += "\nNVRTC log:\n" + e.Log
	}
	return msg
}

func (e *CompileError) Unwrap() error { return e.Err }

// nvrtcOptions builds for the device's own architecture and, because the
// solver compares host and device bit for bit, forbids fused multiply-adds.
func nvrtcOptions(major, minor int) []string {
	return []string{fmt.Sprintf("--gpu-architecture=sm_%d%d", major, minor), "--fmad=false"}
}

// Unload releases the modules loaded on dev; a later launch loads them
// again. Call it before the device goes away.
func Unload(dev *devmem.Device) error { return defaultRuntime.unload(dev) }

func (rt *runtime) unload(dev *devmem.Device) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var errs []error
	for k, lm := range rt.loaded {
		if k.dev == dev {
			if err := lm.mod.Unload(); err != nil {
				errs = append(errs, fmt.Errorf("kernels: unloading %s on %v: %w", k.file, dev, err))
			}
			delete(rt.loaded, k)
		}
	}
	return errors.Join(errs...)
}
