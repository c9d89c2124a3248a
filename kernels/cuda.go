package kernels

import "github.com/gpucomm/gpucomm/devmem"

// devmemLoader reaches CUDA devices through devmem's cuda driver, which
// builds without cgo (its calls then return ErrUnsupported), so kernels
// always compiles against it. It uses Device.ComputeCapability,
// Device.LoadModule, Module.Function, Module.Unload and Function.Launch.
type devmemLoader struct{}

func (devmemLoader) ComputeCapability(d *devmem.Device) (int, int, error) {
	return d.ComputeCapability()
}

func (devmemLoader) LoadModule(d *devmem.Device, image []byte) (module, error) {
	m, err := d.LoadModule(image)
	if err != nil {
		return nil, err
	}
	return devmemModule{m}, nil
}

type devmemModule struct{ m *devmem.Module }

func (m devmemModule) Function(name string) (function, error) {
	f, err := m.m.Function(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (m devmemModule) Unload() error { return m.m.Unload() }
