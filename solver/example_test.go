package solver_test

import (
	"fmt"
	"sync"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/solver"
)

// Three in-process ranks run the solver on a 2-D grid of ranks; rank 0
// gathers the field, which equals the one-rank reference bit for bit.
func Example() {
	cfg := solver.Config{N: 34, M: 34, Decomp: solver.Grid2D, Seed: 1, Boundary: solver.Boundary{Top: 1}}
	comms, _ := local.NewGroup(3)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func(c comm.Communicator) {
			defer wg.Done()
			s, err := solver.New(c, cfg)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer s.Close()
			s.Step(100)
			field, _ := s.Gather(0)
			if c.Rank() == 0 {
				want, _, _ := solver.Reference(cfg, 100)
				same := len(field) == len(want)
				for i := range want {
					same = same && field[i] == want[i]
				}
				fmt.Printf("%d×%d ranks; equal to the reference: %v\n", s.Config().Px, s.Config().Py, same)
			}
		}(c)
	}
	wg.Wait()
	// Output: 3×1 ranks; equal to the reference: true
}
