//go:build !cgo

package nccl

import (
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// Without cgo there is neither NCCL (loaded by dlopen) nor MPI: the backend
// registers, Probe says why it cannot run, and Open fails at MPI first.
var errNoCgo = fmt.Errorf("NCCL is loaded through cgo, and this binary was built with CGO_ENABLED=0: %w", comm.ErrNotBuilt)

type noLibrary struct{}

func realLibrary() library { return noLibrary{} }

func (noLibrary) load() error                        { return errNoCgo }
func (noLibrary) describe() string                   { return "NCCL (not built)" }
func (noLibrary) versionCode() int                   { return 0 }
func (noLibrary) checkDevice(d *devmem.Device) error { return errNoCgo }
func (noLibrary) deviceID(d *devmem.Device) [16]byte { return d.UUID() }
func (noLibrary) uniqueID() ([128]byte, error)       { return [128]byte{}, errNoCgo }
func (noLibrary) initRank(*devmem.Device, int, int, [128]byte) (engine, error) {
	return nil, errNoCgo
}
