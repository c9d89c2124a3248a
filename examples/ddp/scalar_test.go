package main

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/localtest"
)

// allReduceScalar returns the reduced value read back from the device: its
// result is read only after the copy that fills it (the order of out[0]
// and the copy in one return statement is unspecified).
func TestAllReduceScalarReturnsTheReducedValue(t *testing.T) {
	const np = 3
	got := make([]float64, np)
	_, errs := localtest.Run(t, np, func(c comm.Communicator) error {
		var err error
		got[c.Rank()], err = allReduceScalar(c, float64(c.Rank()+1), comm.Sum)
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, v := range got {
		if v != 6 {
			t.Errorf("rank %d: %v, want 6 (1+2+3)", r, v)
		}
	}
}
