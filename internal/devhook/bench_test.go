package devhook

import (
	"errors"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/devmem"
)

// BenchmarkStreamHostCost is the host time of the calls a backend makes
// through devhook, on a host device and, where one opens (a GPU, or
// devmem's fake libcuda through GPUCOMM_CUDA_LIB), on cuda:0. Its cases
// are named as in devmem's BenchmarkHostStreamHostCost and
// BenchmarkCUDAStreamHostCost, which make the same calls on devmem's
// methods directly, so that the two show what going through devhook costs.
// The stream is synchronized every 256 calls, so its queue stays short.
func BenchmarkStreamHostCost(b *testing.B) {
	devs := []*devmem.Device{devmem.NewHostDevice()}
	if d, err := devmem.Open("cuda:0", 0); err == nil {
		devs = append(devs, d)
	}
	work := func() error { busy(time.Microsecond); return nil }
	never := func() (bool, error) { return false, nil }
	for _, d := range devs {
		s, err := d.NewStream()
		if err != nil {
			b.Fatal(err)
		}
		cases := []struct {
			name string
			op   func() error
		}{
			{"enqueue-nothing", func() error { return Enqueue(s, func(uintptr) error { return nil }) }},
			{"deferred-of-1us-then-synchronize", func() error {
				return errors.Join(HostFuncDeferred(s, work), s.Synchronize())
			}},
			{"hostwait-deferred-of-1us-then-synchronize", func() error {
				return errors.Join(HostWait(s, work, never, true), s.Synchronize())
			}},
		}
		for _, c := range cases {
			b.Run(d.Kind().String()+"/"+c.name, func(b *testing.B) {
				i := 0
				for b.Loop() {
					must(b, c.op())
					if i++; i%256 == 0 {
						must(b, s.Synchronize())
					}
				}
				must(b, s.Synchronize())
			})
		}
		must(b, s.Destroy())
	}
}

// busy spins for d, as a thread blocked in MPI's progress loop does.
func busy(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}
