package local_test

import (
	"fmt"
	"log"
	"sync"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

// NewGroup gives four ranks in one process; each runs on its own goroutine,
// contributes rank+1, and receives the sum over the ranks.
func ExampleNewGroup() {
	cs, err := local.NewGroup(4)
	if err != nil {
		log.Fatal(err)
	}
	sums := make([]float64, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() {
			defer c.Close()
			x, err := devmem.AllocSlice[float64](c.Device(), 1)
			if err != nil {
				log.Fatal(err)
			}
			defer x.Free()
			if err := x.CopyFrom([]float64{float64(r + 1)}, nil); err != nil {
				log.Fatal(err)
			}
			if err := comm.AllReduce(c, x, x, comm.Sum, nil); err != nil {
				log.Fatal(err)
			}
			v, err := x.ToHost(nil)
			if err != nil {
				log.Fatal(err)
			}
			sums[r] = v[0]
		})
	}
	wg.Wait()
	fmt.Println(sums)
	// Output: [10 10 10 10]
}
