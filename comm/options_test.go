package comm

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// CheckOptions, and so Open of every backend, refuses the node-path and
// staged-reduction thresholds the MPI backends refuse, in their words: a
// positive size, 0 for the default or -1 for off; the node path's at most
// MaxInt32. A program tried on local groups meets the same refusals.
func TestCheckOptionsRefusesTheThresholdsTheMPIBackendsRefuse(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{NodeBytes: -5}, "node path from -5 bytes: want a positive size, 0 for the default or -1 for off"},
		{Options{NodeBytes: math.MinInt}, fmt.Sprintf("node path from %d bytes: want a positive size, 0 for the default or -1 for off", math.MinInt)},
		{Options{NodeBytes: math.MaxInt32 + 1}, "node path from 2147483648 bytes: want at most 2147483647"},
		{Options{StageReduceBytes: -7}, "staged reductions from -7 bytes: want a positive size, 0 for the default or -1 for off"},
		{Options{StageReduceBytes: -2}, "staged reductions from -2 bytes: want a positive size, 0 for the default or -1 for off"},
	} {
		err := CheckOptions(c.o)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckOptions(%+v) = %v; want ErrInvalidArgument saying %q", c.o, err, c.want)
		}
		fakeOpened = nil
		conn, err := Open("fake-good", WithNodeBytes(c.o.NodeBytes), WithStageReduceBytes(c.o.StageReduceBytes))
		var e *Error
		if conn != nil || !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || e.Backend != "fake-good" || e.Op != "Open" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open with %+v: %v, %v; want fake-good's Open *Error wrapping ErrInvalidArgument saying %q", c.o, conn, err, c.want)
		}
		if len(fakeOpened) != 0 {
			t.Errorf("a backend opened with %+v: %v", c.o, fakeOpened)
		}
	}
	for _, o := range []Options{{NodeBytes: -1}, {NodeBytes: 0}, {NodeBytes: 1}, {NodeBytes: math.MaxInt32},
		{StageReduceBytes: -1}, {StageReduceBytes: 0}, {StageReduceBytes: 65536}, {StageReduceBytes: math.MaxInt32 + 1}} {
		if err := CheckOptions(o); err != nil {
			t.Errorf("CheckOptions(%+v) = %v, want nil", o, err)
		}
	}
}

// GPUCOMM_CHUNK_BYTES takes 512 to 1G and nothing else, 0 included (unset
// is the default): each refusal says that range and does not offer 0, which
// it refuses too. WithChunkBytes(0) is the default, as its refusal of
// another size says.
func TestChunkBytesRefusalsOfferOnlyWhatIsTaken(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	for _, v := range []string{"0", "511", "8", "4X", "-1K", "2G", "1025M"} {
		t.Setenv("GPUCOMM_CHUNK_BYTES", v)
		_, err := DefaultOptions()
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("GPUCOMM_CHUNK_BYTES=%s: %v, want ErrInvalidArgument", v, err)
			continue
		}
		if s := err.Error(); !strings.Contains(s, `GPUCOMM_CHUNK_BYTES="`+v+`"`) || !strings.Contains(s, "want 512 to 1073741824 (1G)") ||
			strings.Contains(s, "or 0") || strings.Contains(s, "0 for the default") {
			t.Errorf("GPUCOMM_CHUNK_BYTES=%s: %q; want the variable and the range 512 to 1G, without offering 0", v, s)
		}
	}
	t.Setenv("GPUCOMM_CHUNK_BYTES", "")
	// The option's own refusal offers 0, and 0 is taken: the default.
	if err := CheckOptions(Options{ChunkBytes: 511}); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "want 512 to 1073741824 (1G), or 0 for the default") {
		t.Errorf("CheckOptions of a 511-byte chunk = %v", err)
	}
	c, err := Open("fake-good", WithChunkBytes(MinChunkBytes-1), WithChunkBytes(0))
	if err != nil || c.(*fakeComm).opts.ChunkBytes != 0 {
		t.Fatalf("Open with WithChunkBytes(0): %v, %v; want the default chunk", c, err)
	}
}

// sizeless is a Communicator of no ranks (Size 0) whose AllToAll takes
// anything: the typed AllToAll still refuses it, without dividing by 0.
type sizeless struct {
	Communicator
	calls int
}

func (s *sizeless) Size() int { return 0 }
func (s *sizeless) AllToAll(send, recv devmem.Buffer, count int, dt DType, st *devmem.Stream) error {
	s.calls++
	return nil
}

func TestAllToAllOnACommunicatorOfNoRanksIsRefused(t *testing.T) {
	dev := devmem.NewHostDevice()
	x, err := devmem.AllocSlice[float32](dev, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	s := &sizeless{}
	err = func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panicked: %v", r)
			}
		}()
		return AllToAll(s, x, x, nil)
	}()
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "AllToAll") || !strings.Contains(err.Error(), "0 ranks") {
		t.Errorf("AllToAll over a communicator of 0 ranks: %v; want ErrInvalidArgument saying so", err)
	}
}
