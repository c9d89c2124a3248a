//go:build !cgo

package mpicomm

import "github.com/gpucomm/gpucomm/devmem"

// UseDeviceForMPI does nothing without cgo: there is neither MPI nor CUDA.
func UseDeviceForMPI(dev *devmem.Device) {}
