package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/localtest"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/solver"
)

// gpucomm heat across 2 simulated nodes × 2 ranks (GPUCOMM_MULTINODE=1,
// root; scripts/multinode/ci.sh runs it under Open MPI and MPICH) prints the
// checksum line of one in-process rank, the checksum of the reference field,
// for row slabs and 2-D splits, float64 and float32, on mpi and cudaaware;
// and its steps and residual lines too (it took over
// TestMultinodeHeatMatchesOneRank's cases: residual every k steps on both
// backends, 2-D float32, cudaaware without overlap).
func TestMultinodeHeatChecksumMatchesOneRank(t *testing.T) {
	nodes, bin := multinodeCommand(t)
	for _, c := range []struct {
		backend string
		cfg     solver.Config
		steps   int
		args    []string
	}{
		{"mpi", solver.Config{N: 90, M: 70, Seed: 3, DType: solver.Float64}, 50,
			[]string{"-n", "90", "-m", "70", "-steps", "50", "-k", "10", "-seed", "3"}},
		{"mpi", solver.Config{N: 90, M: 70, Seed: 3, DType: solver.Float32, Decomp: solver.Grid2D}, 50,
			[]string{"-n", "90", "-m", "70", "-steps", "50", "-k", "10", "-seed", "3", "-decomp", "2d", "-dtype", "float32"}},
		{"cudaaware", solver.Config{N: 64, M: 64, Seed: 8, DType: solver.Float64}, 30,
			[]string{"-n", "64", "-steps", "30", "-k", "4", "-seed", "8", "-overlap=false"}},
	} {
		t.Run(c.backend+"/"+strings.Join(c.args, " "), func(t *testing.T) {
			c.cfg.Boundary = solver.Boundary{Top: 1} // heat's boundary
			field, _, err := solver.Reference(c.cfg, c.steps)
			if err != nil {
				t.Fatal(err)
			}
			want, err := solver.FieldChecksum(field, c.cfg.N, c.cfg.M, c.cfg.DType)
			if err != nil {
				t.Fatal(err)
			}
			code, one, errOut := runCLI(t, append([]string{"heat", "-backend", "local", "-np", "1", "-noprogress"}, c.args...)...)
			if code != exitOK {
				t.Fatalf("heat on one local rank: exit %d\n%s%s", code, one, errOut)
			}
			if got := checksumOf(t, one); got != want {
				t.Fatalf("one local rank: checksum %016x, the reference field's %016x", got, want)
			}
			j := nodes.LaunchUntil(t, mpi.Family(), multinodePerNode, 3*time.Minute, finalizeWatch("\nchecksum: "), []string{"GPUCOMM_DEVICE=host"},
				append([]string{bin, "heat", "-backend", c.backend, "-noprogress"}, c.args...)...)
			if j.Err != nil && !j.Lingered {
				t.Fatalf("heat across nodes: %v\n%s", j.Err, j.Output)
			}
			if h := localtest.LineStarting(t, j.Output, "heat: "); !strings.Contains(h, "4 ranks on "+c.backend) {
				t.Errorf("header %q; want 4 ranks on %s", h, c.backend)
			}
			prefixes := []string{"steps: ", "checksum: "}
			if strings.Contains(one, "\nresidual: ") {
				prefixes = append(prefixes, "residual: ")
			}
			for _, prefix := range prefixes {
				if got, want := localtest.LineStarting(t, j.Output, prefix), localtest.LineStarting(t, one, prefix); got != want {
					t.Errorf("%d nodes × %d ranks: %q\none rank: %q\n%s", multinodeNodes, multinodePerNode, got, want, j.Output)
				}
			}
			t.Logf("%s", localtest.LineStarting(t, j.Output, "checksum: "))
		})
	}
}
