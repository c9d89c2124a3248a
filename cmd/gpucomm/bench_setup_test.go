package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// Under a real launcher, a rank that cannot create its -cpuprofile file, or
// read a -compare report that is on some nodes only, stops every rank
// promptly, rank 0 naming the rank and why, with the status the same
// failure has without MPI (1 for the profile, 2, usage, for the report).
// Before, that rank stopped alone and waited in MPI_Finalize while the
// others waited for it in Open's MPI_Comm_dup: the job hung for ever.
func TestBenchFilesFailingOnOneRankStopEveryRank(t *testing.T) {
	bin := launcherCommand(t)
	path, args, err := mpitest.Launcher(2)
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	// Each rank runs in a directory of its own, as on nodes of their own:
	// one path, a file on some of them only.
	inDir := filepath.Join(dir, "indir.sh")
	script := `#!/bin/sh
cd "$BENCH_DIR/rank${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" && exec "$@"
`
	if err := os.WriteFile(inDir, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"rank0", "rank1", "rank1/cp.1"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A report on rank 1's node only: rank 0, which draws the plot, has none.
	code, report, errOut := benchCLI(t, "bench", "-np", "2", "-op", "allreduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-json")
	if code != exitOK {
		t.Fatalf("making a report: exit %d\n%s", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "rank1", "r.json"), []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"bench", "-backend", "mpi", "-device", "host", "-op", "allreduce", "-b", "8", "-e", "16", "-n", "2", "-w", "1", "-noprogress"}
	for _, tc := range []struct {
		name  string
		flags []string
		code  int
		says  []string
	}{
		{"a profile rank 1 cannot create", []string{"-cpuprofile", "cp"}, exitFail, []string{
			"gpucomm bench: bench: rank 1 could not set up: -cpuprofile: open cp.1: is a directory",
			"gpucomm bench: rank 1: bench: setting up: -cpuprofile: open cp.1: is a directory"}},
		{"a report missing on rank 0's node", []string{"-plot", "p.png", "-compare", "r.json"}, exitUsage, []string{
			"gpucomm bench: bench: setting up: -compare: open r.json: no such file or directory",
			"gpucomm bench: rank 1: bench: rank 0 could not set up: -compare: open r.json: no such file or directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			argv := append(append(append(args, inDir, bin), common...), tc.flags...)
			cmd := exec.CommandContext(ctx, path, argv...)
			cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
				"GPUCOMM_DEVICE=", "GPUCOMM_BACKEND=", "GPUCOMM_DEBUG=", "BENCH_DIR="+dir)
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the job still ran after 60 s: a rank waits for one that gave up:\n%s", out)
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != tc.code {
				t.Errorf("the job ended with %v; want status %d:\n%s", err, tc.code, out)
			}
			for _, s := range tc.says {
				if !strings.Contains(string(out), s) {
					t.Errorf("the output does not say %q:\n%s", s, out)
				}
			}
		})
	}
}

// -backend auto is resolved before -np is judged, as check and drill
// resolve it: where it means local, -np applies (it was refused: "auto
// takes one rank a process") and, left out, its default of 4 holds (1 rank
// ran).
func TestBenchAndHeatResolveAutoBeforeJudgingNp(t *testing.T) {
	name, err := comm.Auto()
	if err != nil {
		t.Skip(err)
	}
	if name != local.Name {
		// -np is refused as for the backend auto picked, which the
		// refusal names.
		want := "-np applies to the local backend only; " + name + " takes one rank a process, so set the rank count with mpirun -np (-backend auto picked " + name + ")"
		code, _, errOut := benchCLI(t, "bench", "-backend", "auto", "-np", "2", "-e", "16", "-op", "allreduce", "-n", "1", "-noprogress")
		if code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("bench -backend auto -np 2, auto picking %s: exit %d, stderr %q; want %d and %q", name, code, errOut, exitUsage, want)
		}
		code, _, errOut = runHeatCLI(t, "-backend", "auto", "-np", "2", "-n", "16", "-steps", "1")
		if code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("heat -backend auto -np 2, auto picking %s: exit %d, stderr %q; want %d and %q", name, code, errOut, exitUsage, want)
		}
		return
	}
	code, out, errOut := benchCLI(t, "bench", "-backend", "auto", "-np", "2", "-e", "16", "-op", "allreduce", "-n", "1", "-noprogress")
	if code != exitOK || !strings.Contains(out, "# gpucomm bench: backend local, 2 ranks,") {
		t.Errorf("bench -backend auto -np 2: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = benchCLI(t, "bench", "-backend", "auto", "-e", "16", "-op", "allreduce", "-n", "1", "-noprogress")
	if code != exitOK || !strings.Contains(out, "# gpucomm bench: backend local, 4 ranks,") || !strings.Contains(out, "# nodes: 1: ") || !strings.Contains(out, " (ranks 0-3)") {
		t.Errorf("bench -backend auto: exit %d; want -np's default of 4 ranks\n%s%s", code, out, errOut)
	}
	// GPUCOMM_BACKEND=auto too, with the pairs' phase, which opened auto
	// itself.
	t.Setenv("GPUCOMM_BACKEND", "auto")
	var o, e strings.Builder
	if code := run([]string{"bench", "-np", "3", "-pairs", "1:2", "-op", "pingpong", "-b", "8", "-e", "8", "-n", "1", "-noprogress"}, &o, &e); code != exitOK ||
		!strings.Contains(o.String(), "# pingpong, bw: ranks 1 (") {
		t.Errorf("GPUCOMM_BACKEND=auto bench -np 3 -pairs 1:2: exit %d\n%s%s", code, o.String(), e.String())
	}
	code, out, errOut = runHeatCLI(t, "-backend", "auto", "-np", "2", "-n", "16", "-steps", "1")
	if code != exitOK || !strings.HasPrefix(out, "heat: 16×16 grid, 2 ranks on local") {
		t.Errorf("heat -backend auto -np 2: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runHeatCLI(t, "-backend", "auto", "-n", "16", "-steps", "1")
	if code != exitOK || !strings.HasPrefix(out, "heat: 16×16 grid, 4 ranks on local") {
		t.Errorf("heat -backend auto: exit %d; want -np's default of 4 ranks\n%s%s", code, out, errOut)
	}
}

// The local backend's pairs table says what is true of it: no C loop, no
// MPI_COMM_WORLD, and no collectives line where no collective runs.
func TestBenchPairsOnLocalSayNoCLoopAndNoCollectives(t *testing.T) {
	code, out, errOut := benchCLI(t, "bench", "-np", "4", "-pairs", "1:2", "-op", "pingpong", "-b", "8", "-e", "8", "-n", "2", "-noprogress")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, bad := range []string{"# collectives:", "C loop", "MPI_COMM_WORLD"} {
		if strings.Contains(out, bad) {
			t.Errorf("the output says %q:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "none: the local backend has no library underneath") {
		t.Errorf("the pairs' table does not say the local backend has no baseline:\n%s", out)
	}
	// With a collective, the line is there, and the pair 0:1's baseline
	// is bench's own.
	code, out, errOut = benchCLI(t, "bench", "-np", "4", "-pairs", "0:1,1:2", "-op", "pingpong,allreduce", "-b", "8", "-e", "8", "-n", "2", "-noprogress")
	if code != exitOK || !strings.Contains(out, "# collectives: 4 ranks on 1 node(s): intra-node\n") || strings.Contains(out, "C loop") ||
		!strings.Contains(out, "# baseline: ranks 0 and 1 as above; none: the local backend has no library underneath\n") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
}

// The pairs' table says "as above" only where the pair 0:1, the main
// table's, is among its pairs, and with -c 0 its footer says nothing was
// checked instead of "0 OK".
func TestBenchPairsTableSaysOnlyWhatIsTrue(t *testing.T) {
	code, out, errOut := benchCLI(t, "bench", "-np", "4", "-pairs", "1:2", "-op", "pingpong", "-b", "8", "-e", "8", "-n", "2", "-noprogress")
	if code != exitOK || strings.Contains(out, "as above") || !strings.Contains(out, "# baseline: none: the local backend has no library underneath\n") ||
		!strings.Contains(out, "# Wrong elements of the pairs : 0 OK\n") {
		t.Errorf("-pairs 1:2: exit %d, want no \"as above\" and a checked footer:\n%s%s", code, out, errOut)
	}
	code, out, errOut = benchCLI(t, "bench", "-np", "4", "-pairs", "0:1,1:2", "-op", "pingpong", "-b", "8", "-e", "8", "-n", "2", "-c", "0", "-noprogress")
	if code != exitOK || strings.Contains(out, "pairs : 0 OK") || !strings.Contains(out, "# Wrong elements of the pairs : not checked (-c 0)\n") {
		t.Errorf("-c 0: exit %d, want the pairs' footer to say nothing was checked:\n%s%s", code, out, errOut)
	}
}
