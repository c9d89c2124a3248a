package mpi

import (
	"errors"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestFinalizeBoundFrom(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "0": 0, "off": 0, "0s": 0, "10s": 10 * time.Second, "1.5s": 1500 * time.Millisecond} {
		if got, err := finalizeBoundFrom(v); err != nil || got != want {
			t.Errorf("finalizeBoundFrom(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"10", "-1s", "soon", "1h-"} {
		if got, err := finalizeBoundFrom(v); !errors.Is(err, errs.ErrInvalidArgument) || got != 0 {
			t.Errorf("finalizeBoundFrom(%q) = %v, %v; want ErrInvalidArgument", v, got, err)
		}
	}
}
