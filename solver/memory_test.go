package solver

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/localtest"
)

// newAll runs New on every rank of a fresh local group of n and returns the
// errors, closing what opened.
func newAll(t *testing.T, n int, cfg Config) ([]comm.Communicator, []error) {
	t.Helper()
	return NewOnRanks(t, n, func(int) Config { return cfg })
}

// gpucomm heat -n 60000 allocated until the machine killed it: New must
// compare what the ranks need with what their devices have before it
// allocates, and every rank must say the same once.
func TestNewRefusesAGridTheDevicesCannotHold(t *testing.T) {
	defer func(f func(*devmem.Device) (int, int, error)) { deviceMemory = f }(deviceMemory)
	deviceMemory = func(*devmem.Device) (int, int, error) { return 3 << 20, 8 << 20, nil }
	// 402×402 over 4 ranks: 2 × 102 × 402 × 8 B ≈ 0.66 MB a rank, 2.6 MB on
	// the host the four share; with 3 MiB free it fits, with 1 MiB it does not.
	cfg := Config{N: 402, M: 402, Seed: 7}
	cs, errs := newAll(t, 4, cfg)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v with 3 MiB free for 2.6 MB", r, err)
		}
	}
	_ = cs
	deviceMemory = func(*devmem.Device) (int, int, error) { return 1 << 20, 8 << 20, nil }
	cs, errs = newAll(t, 4, cfg)
	for r, err := range errs {
		if !errors.Is(err, comm.ErrUnsupported) {
			t.Fatalf("rank %d: %v; want ErrUnsupported", r, err)
		}
		if err.Error() != errs[0].Error() {
			t.Errorf("rank %d says %q, rank 0 %q; want one message", r, err, errs[0])
		}
		for _, w := range []string{"402×402", "4 ranks", "2.6 MB", "host memory", "1.0 MB free of 8.4 MB"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("rank %d: %q does not say %q", r, err, w)
			}
		}
		if st := cs[r].Device().Stats(); st.Buffers != 0 || st.Bytes != 0 {
			t.Errorf("rank %d: %+v left on the device; the refusal must come before any allocation", r, st)
		}
	}
	// A device whose memory cannot be read is not refused.
	deviceMemory = func(*devmem.Device) (int, int, error) { return 0, 0, devmem.ErrUnsupported }
	if _, errs = newAll(t, 2, cfg); errs[0] != nil || errs[1] != nil {
		t.Errorf("memory unknown: %v", errs)
	}
}

// The real host: a grid of 10^8 × 10^8 needs about 10^17 bytes, which no
// machine has; New says so, once a rank, rather than failing each mmap.
func TestNewRefusesAnImpossibleGridOnTheRealHost(t *testing.T) {
	if _, _, err := devmem.HostMemory(); err != nil {
		t.Skipf("host memory unknown here: %v", err)
	}
	_, errs := newAll(t, 2, Config{N: 100_000_000, M: 100_000_000})
	for r, err := range errs {
		if !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), "needs") || strings.Count(err.Error(), "GB") < 2 {
			t.Errorf("rank %d: %v; want the memory refusal naming need and free", r, err)
		}
	}
}

func TestDeviceBytesCountsWhatSetupAllocates(t *testing.T) {
	cfg, err := Config{N: 50, M: 40, Decomp: Grid2D, Px: 2, Py: 2}.forRanks(4)
	if err != nil {
		t.Fatal(err)
	}
	_, errs := localtest.Run(t, 4, func(c comm.Communicator) error {
		s, err := New(c, cfg)
		if err != nil {
			return err
		}
		defer s.Close()
		st := c.Device().Stats()
		// What setup allocated, less the 8-byte pinned residual and the
		// int64 buffers of agree and checkMemory (freed by now).
		if got, want := st.Bytes-8, newLayout(cfg, c.Rank()).deviceBytes(cfg); got != want {
			return fmt.Errorf("rank %d: %d bytes on the device, deviceBytes says %d", c.Rank(), got, want)
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
