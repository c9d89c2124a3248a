package kernels

import "github.com/gpucomm/gpucomm/internal/nvrtc"

// nvrtcCompiler is the real compiler: internal/nvrtc, which loads NVRTC at
// run time and reports a missing library as an error.
type nvrtcCompiler struct{}

func (nvrtcCompiler) Compile(src, name string, opts []string) (ptx, cubin []byte, log string, err error) {
	return nvrtc.Compile(src, name, opts)
}

func (nvrtcCompiler) Version() (major, minor int, err error) { return nvrtc.Version() }
