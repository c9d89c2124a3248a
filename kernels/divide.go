package kernels

import (
	"math"

	"github.com/gpucomm/gpucomm/devmem"
)

// Divide divides every element of x by d, in stream order on s: the second
// half of an average taken as a sum then a division (the NCCL backend's way
// around NCCL's faulty float64 average). Each quotient is correctly rounded.
func Divide[T Float](s *devmem.Stream, x devmem.Slice[T], d T) error {
	return run(dividePlan(s, x, d))
}

func dividePlan[T Float](s *devmem.Stream, x devmem.Slice[T], d T) (plan, error) {
	if f := float64(d); f == 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return plan{}, invalid("Divide", "divisor %v: want a finite, nonzero number", f)
	}
	dev, err := target("Divide", s, arg{"x", x.Buffer(), 0})
	if err != nil || x.Len() == 0 {
		return plan{}, err
	}
	n := x.Len()
	return plan{dev, s, func() { divideRef(view[T](x.Buffer()), d) }, launch{
		file: "divide.cu", kernel: "divide_" + suffix[T](),
		grid: flatGrid(n), block: [3]uint32{flatThreads, 1, 1},
		args: []any{x.Buffer(), int64(n), d},
	}}, nil
}

func divideRef[T Float](x []T, d T) {
	for i := range x {
		x[i] = x[i] / d
	}
}
