//go:build !cgo

package main

import "github.com/gpucomm/gpucomm/devmem"

// streamSync without cgo, where every device is a host device: a devmem
// stream's Synchronize.
func streamSync(dev *devmem.Device) (func() error, func() error, error) {
	st, err := dev.NewStream()
	if err != nil {
		return nil, nil, err
	}
	return st.Synchronize, st.Destroy, nil
}
