//go:build cgo

package main

import (
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/devhook"
)

// streamSync is what a C program does before handing MPI a buffer that
// stream-ordered work wrote: cuStreamSynchronize of the stream (one of dev's,
// which holds no work here), with the device's context current. On a host
// device it synchronizes a devmem stream.
func streamSync(dev *devmem.Device) (func() error, func() error, error) {
	st, err := dev.NewStream()
	if err != nil {
		return nil, nil, err
	}
	ctx, h := cuda.Context(devhook.Context(dev)), cuda.Stream(devhook.StreamHandle(st))
	if h == 0 {
		return st.Synchronize, st.Destroy, nil
	}
	sync := func() error {
		return cuda.WithContext(ctx, func() error { return cuda.StreamSynchronize(h) })
	}
	return sync, st.Destroy, nil
}
