//go:build !cgo

package cbaseline

import (
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
)

// NCCLIDSize is the size of an ncclUniqueId.
const NCCLIDSize = 128

// errNoCgo is what every NCCL call returns without cgo, which dlopen needs.
var errNoCgo = fmt.Errorf("cbaseline: NCCL is loaded through cgo, and this binary was built with CGO_ENABLED=0: %w", comm.ErrLibraryNotFound)

// NCCL is one rank's NCCL communicator; without cgo there is none.
type NCCL struct{}

// NCCLUniqueID reports that NCCL cannot be loaded without cgo.
func NCCLUniqueID() ([NCCLIDSize]byte, error) { return [NCCLIDSize]byte{}, errNoCgo }

// NewNCCL reports that NCCL cannot be loaded without cgo.
func NewNCCL(ordinal, nranks, rank int, id [NCCLIDSize]byte) (*NCCL, error) {
	if err := checkNCCLRank(ordinal, nranks, rank); err != nil {
		return nil, err
	}
	return nil, errNoCgo
}

// Run reports that NCCL cannot be loaded without cgo.
func (n *NCCL) Run(c Coll, a Args, times []float64) error {
	if err := a.check(c, times); err != nil {
		return err
	}
	return errNoCgo
}

// Libraries reports that NCCL cannot be loaded without cgo.
func Libraries() (ncclFile, cudaFile string, err error) { return "", "", errNoCgo }

// Close reports that NCCL cannot be loaded without cgo.
func (n *NCCL) Close() error { return errNoCgo }
