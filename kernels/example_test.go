package kernels_test

import (
	"fmt"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/kernels"
)

// The launchers queue work on a stream of any device: the Go reference on a
// host device, as here, and the compiled kernel on a GPU.
func ExampleScale() {
	dev := devmem.NewHostDevice()
	s, _ := dev.NewStream()
	defer s.Destroy()
	x, _ := devmem.AllocSlice[float64](dev, 4)
	defer x.Free()

	kernels.Fill(s, x, 1.5)
	kernels.Scale(s, x, 2.0)
	v, _ := x.ToHost(s)
	fmt.Println(v)
	// Output: [3 3 3 3]
}

// One FTCS step of a 3×3 interior inside a cold boundary, with a hot point
// in the middle: the heat moves to the four neighbours.
func ExampleHeatStep() {
	dev := devmem.NewHostDevice()
	const nx = 5 // 3 interior columns and 2 boundary columns
	src, _ := devmem.AllocSlice[float64](dev, nx*nx)
	dst, _ := devmem.AllocSlice[float64](dev, nx*nx)
	defer src.Free()
	defer dst.Free()
	u := make([]float64, nx*nx)
	u[2*nx+2] = 1
	src.CopyFrom(u, nil)
	dst.CopyFrom(u, nil)

	kernels.HeatStep(nil, dst, src, nx, 1, nx-1, 0.25)
	v, _ := dst.ToHost(nil)
	for i := 1; i < nx-1; i++ {
		fmt.Println(v[i*nx+1 : i*nx+nx-1])
	}
	// Output:
	// [0 0.25 0]
	// [0.25 0 0.25]
	// [0 0.25 0]
}
