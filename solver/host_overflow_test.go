package solver

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
)

// hostGridFits, which Reference and Gather ask before they allocate, takes
// a grid up to maxHostGridBytes exactly and refuses one byte more, and
// sizes whose product overflows int, naming the grid and its bytes.
func TestHostGridFitsAtTheBoundAndRefusesOverflow(t *testing.T) {
	for _, c := range []struct {
		n, m, per int
		ok        bool
		bytes     string
	}{
		{3, 3, 24, true, ""},
		{1 << 20, 1 << 17, 8, true, ""},                                    // 1 TiB exactly
		{1<<20 + 1, 1 << 17, 8, false, "1099512676352"},                    // a row more
		{1 << 20, 1<<16 + 1, 16, false, "1099528404992"},                   // 16 bytes a cell
		{math.MaxInt32, math.MaxInt32, 24, false, "110680464339178094616"}, // past int
		{math.MaxInt, math.MaxInt, 24, false, "2041694201525630780337525786821580029976"},
	} {
		err := hostGridFits("Gather", c.n, c.m, c.per)
		if c.ok {
			if err != nil {
				t.Errorf("%d×%d×%d: %v", c.n, c.m, c.per, err)
			}
			continue
		}
		if !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%d×%d×%d: %v, want ErrInvalidArgument", c.n, c.m, c.per, err)
			continue
		}
		if !strings.Contains(err.Error(), c.bytes+" bytes") || !strings.Contains(err.Error(), "Gather") {
			t.Errorf("%d×%d×%d: %q does not name Gather and %s bytes", c.n, c.m, c.per, err, c.bytes)
		}
	}
}
