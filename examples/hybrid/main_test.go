package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/localtest"
)

func TestHybridExampleSumsScaledRanksOnLocalBackend(t *testing.T) {
	for _, np := range []int{1, 2, 4} {
		outs := make([]bytes.Buffer, np)
		_, errs := localtest.Run(t, np, func(c comm.Communicator) error { return run(c, &outs[c.Rank()]) })
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		// Rank r contributes 2(r+1) to each of n elements.
		want := 0
		for r := range np {
			want += 2 * (r + 1) * n
		}
		lines := strings.Split(strings.TrimSpace(outs[0].String()), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], fmt.Sprintf("%d ranks on local, rank 0 on host", np)) {
			t.Fatalf("np %d: output %q", np, outs[0].String())
		}
		if got := fmt.Sprintf("global sum %d, expected %d: matches", want, want); lines[1] != got {
			t.Errorf("np %d: %q, want %q", np, lines[1], got)
		}
		for i := 1; i < np; i++ {
			if outs[i].Len() != 0 {
				t.Errorf("rank %d printed %q", i, outs[i].String())
			}
		}
	}
}
