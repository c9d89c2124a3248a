package main

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/localtest"
	"github.com/gpucomm/gpucomm/solver"
)

func TestHeatExampleOnLocalRanksPrintsTheReferenceResult(t *testing.T) {
	want, res, err := solver.Reference(config, steps)
	if err != nil {
		t.Fatal(err)
	}
	n, m := config.N, config.M
	for _, np := range []int{1, 3} {
		outs := make([]bytes.Buffer, np)
		_, errs := localtest.Run(t, np, func(c comm.Communicator) error { return run(c, &outs[c.Rank()]) })
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < np; i++ {
			if outs[i].Len() != 0 {
				t.Errorf("rank %d printed %q; only rank 0 speaks", i, outs[i].String())
			}
		}
		line := fmt.Sprintf("%d ranks on local: after %d steps the residual is %.6e and the centre is at %.6f\n",
			np, steps, res, want[n/2*m+m/2])
		if got := outs[0].String(); got != line {
			t.Errorf("np %d: printed %q, want %q", np, got, line)
		}
	}
}
