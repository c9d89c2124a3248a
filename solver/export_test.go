package solver

import (
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/localtest"
)

// NewOnRanks runs New with cfg(rank) on every rank of a fresh local group
// of n, closing what opened, and gives the group and each rank's error of
// New. Exported here for package solver_test's tests too.
func NewOnRanks(t *testing.T, n int, cfg func(rank int) Config) ([]comm.Communicator, []error) {
	t.Helper()
	return localtest.Run(t, n, func(c comm.Communicator) error {
		s, err := New(c, cfg(c.Rank()))
		if err == nil {
			s.Close()
		}
		return err
	})
}

// DeviceBytes is what New asks of the device for cfg on one rank: the
// figure its refusal names. Exported here for package solver_test's tests.
func DeviceBytes(t *testing.T, cfg Config) int64 {
	t.Helper()
	cfg, err := cfg.forRanks(1)
	if err != nil {
		t.Fatal(err)
	}
	return newLayout(cfg, 0).deviceBytes(cfg)
}
