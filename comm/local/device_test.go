package local_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
)

// GPUCOMM_DEVICE=cuda, cuda:7 or bogus with the local backend used to run on
// the host device without a word; now Open (by name and by auto) refuses.
func TestOpenRefusesADeviceItCannotUse(t *testing.T) {
	t.Setenv("GPUCOMM_BACKEND", "")
	for _, tc := range []struct {
		spec string
		want error
	}{{"cuda", comm.ErrUnsupported}, {"cuda:7", comm.ErrUnsupported}, {"CUDA:0", comm.ErrUnsupported}, {"bogus", comm.ErrInvalidArgument}} {
		t.Setenv("GPUCOMM_DEVICE", tc.spec)
		for _, name := range []string{local.Name, "auto"} {
			c, err := comm.Open(name)
			if c != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.spec) {
				t.Errorf("GPUCOMM_DEVICE=%s Open(%s) = %v, %v; want an error wrapping %v naming the device", tc.spec, name, c, err, tc.want)
			}
		}
		t.Setenv("GPUCOMM_DEVICE", "")
		if c, err := comm.Open(local.Name, comm.WithDevice(tc.spec)); c != nil || !errors.Is(err, tc.want) {
			t.Errorf("WithDevice(%s): %v, %v; want %v", tc.spec, c, err, tc.want)
		}
		if cs, err := local.NewGroup(2, comm.WithDevice(tc.spec)); cs != nil || !errors.Is(err, tc.want) {
			t.Errorf("NewGroup(2, WithDevice(%s)): %v, %v; want %v", tc.spec, cs, err, tc.want)
		}
	}
	for _, spec := range []string{"", "auto", "host", " HOST "} {
		t.Setenv("GPUCOMM_DEVICE", spec)
		c, err := comm.Open(local.Name)
		if err != nil {
			t.Errorf("GPUCOMM_DEVICE=%q: %v", spec, err)
			continue
		}
		if c.Device().Kind().String() != "host" {
			t.Errorf("GPUCOMM_DEVICE=%q: device %v", spec, c.Device())
		}
		c.Close()
	}
	// In-process test groups still run where the job's device is a GPU.
	t.Setenv("GPUCOMM_DEVICE", "cuda")
	if cs, err := local.NewGroup(2); err != nil || len(cs) != 2 {
		t.Errorf("NewGroup(2) under GPUCOMM_DEVICE=cuda: %v, %v", cs, err)
	}
	t.Setenv("GPUCOMM_DEVICE", "bogus")
	if cs, err := local.NewGroup(2); cs != nil || !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("NewGroup(2) under GPUCOMM_DEVICE=bogus: %v, %v; want ErrInvalidArgument", cs, err)
	}
}

// Under mpirun -np 2 of a binary whose one backend is local, Open("auto")
// and Open("local") fail at once, naming the launcher and its size, instead
// of making each process rank 0 of 1.
func TestOpenUnderAMultiRankLauncherFails(t *testing.T) {
	t.Setenv("GPUCOMM_BACKEND", "")
	t.Setenv("GPUCOMM_DEVICE", "")
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OMPI_") || strings.HasPrefix(name, "PMI") || strings.HasPrefix(name, "SLURM_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
	t.Setenv("OMPI_COMM_WORLD_RANK", "1")
	for _, name := range []string{"auto", local.Name} {
		c, err := comm.Open(name)
		if c != nil || err == nil {
			t.Fatalf("Open(%s) under mpirun -np 2 = %v, %v; want a refusal", name, c, err)
		}
		if !errors.Is(err, comm.ErrNotBuilt) && !errors.Is(err, comm.ErrUnsupported) {
			t.Errorf("Open(%s): %v wraps neither ErrNotBuilt nor ErrUnsupported", name, err)
		}
		for _, w := range []string{"Open MPI mpirun", "rank 1 of 2 ranks", "-tags mpi"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%s): %q does not say %q", name, err, w)
			}
		}
	}
	// In-process groups are this process's own: a launcher does not matter.
	if cs, err := local.NewGroup(2); err != nil || len(cs) != 2 {
		t.Errorf("NewGroup(2) under mpirun: %v, %v", cs, err)
	}
}
