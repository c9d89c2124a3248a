//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/errs"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

var (
	ompiJob  = map[string]string{"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
	hydraJob = map[string]string{"PMI_SIZE": "2", "PMI_RANK": "0", "PMI_FD": "6", "MPI_LOCALRANKID": "0"}
	srunJob  = map[string]string{"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "0"}
)

func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// Each family refuses the other's launcher before MPI_Init, saying which
// launcher, how many ranks, what the binary is built for and what to do;
// its own launcher, srun, no launcher, and a launcher of its own family
// started under the other's pass.
func TestLauncherConflictNamesLauncherBuildAndFix(t *testing.T) {
	cases := []struct {
		family string
		env    map[string]string
		want   []string // nil: no conflict
	}{
		{"mpich", ompiJob, []string{"started by Open MPI mpirun as rank 1 of 4", "OMPI_COMM_WORLD_SIZE=4", "built for MPICH (-tags mpich)", "rebuild with -tags mpi", "MPICH's mpiexec"}},
		{"openmpi", hydraJob, []string{"started by MPICH Hydra mpiexec as rank 0 of 2", "PMI_SIZE=2", "built for Open MPI (-tags mpi)", "rebuild with -tags mpich", "Open MPI's mpirun"}},
		{"openmpi", ompiJob, nil},
		{"mpich", hydraJob, nil},
		{"openmpi", srunJob, nil},
		{"mpich", srunJob, nil},
		{"openmpi", map[string]string{}, nil},
		{"mpich", map[string]string{}, nil},
		{"mpich", merged(ompiJob, hydraJob), nil}, // mpiexec.mpich run from a rank of an Open MPI job
		{"openmpi", merged(ompiJob, hydraJob), nil},
	}
	for _, c := range cases {
		err := launcherConflict(c.family, envOf(c.env))
		if c.want == nil {
			if err != nil {
				t.Errorf("%s build, environment %v: %v; want no conflict", c.family, c.env, err)
			}
			continue
		}
		if !errors.Is(err, errs.ErrUnsupported) {
			t.Errorf("%s build, environment %v: %v; want an error wrapping ErrUnsupported", c.family, c.env, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s build, environment %v: %q does not say %q", c.family, c.env, err, w)
			}
		}
	}
}

func TestSizeMismatchComparesTheWorldWithTheLauncher(t *testing.T) {
	cases := []struct {
		family string
		env    map[string]string
		world  int
		want   string // "": no mismatch
	}{
		{"openmpi", srunJob, 1, "MPI_Init made a world of 1 ranks, but Slurm srun started this process as rank 2 of 4"},
		{"openmpi", srunJob, 4, ""},
		{"mpich", hydraJob, 1, "but MPICH Hydra mpiexec started this process as rank 0 of 2"},
		{"mpich", merged(ompiJob, hydraJob), 2, ""}, // Hydra's job, not the outer mpirun's
		{"openmpi", ompiJob, 4, ""},
		{"openmpi", map[string]string{}, 1, ""},
		{"openmpi", map[string]string{"PMIX_RANK": "0", "PMIX_NAMESPACE": "x"}, 1, ""}, // size unknown
	}
	for _, c := range cases {
		err := sizeMismatch(c.family, c.world, envOf(c.env))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s build, world %d, environment %v: %v; want no mismatch", c.family, c.world, c.env, err)
		case c.want != "" && (!errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), builtFor[c.family])):
			t.Errorf("%s build, world %d, environment %v: %v; want ErrUnsupported saying %q and %q", c.family, c.world, c.env, err, c.want, builtFor[c.family])
		}
	}
}

// otherLauncher is the launcher of the other MPI family and its arguments
// for np ranks, or skips t: both families are installed in CI.
func otherLauncher(t *testing.T, np string) (string, []string) {
	t.Helper()
	var names []string
	var args []string
	switch Family() {
	case "openmpi":
		names = []string{"mpiexec.mpich", "mpiexec.hydra"}
	case "mpich":
		names = []string{"mpirun.openmpi", "mpiexec.openmpi"}
		args = []string{"--oversubscribe", "--allow-run-as-root"}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, append(args, "-np", np)
		}
	}
	t.Skipf("the other MPI family's launcher is not on PATH (tried %s): this test needs both families installed", strings.Join(names, ", "))
	return "", nil
}

// This binary started by the other family's launcher fails at once, on
// every rank, saying why and what to do, instead of hanging in MPI_Init
// (MPICH under mpirun) or running as one-rank jobs (Open MPI under Hydra).
func TestUnderTheOtherFamilysLauncherInitFailsAtOnce(t *testing.T) {
	if inRanks() {
		t.Skip("already one rank of a launched job")
	}
	path, args := otherLauncher(t, "2")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const limit = 60 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, exe, "-test.run=^TestRankLibrary$", "-test.v")...)
	cmd.Env = append(os.Environ(), childEnv+"=1", npEnv+"=2", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	t.Logf("%s -np 2 of a %s build: %v after %v", path, Family(), err, took.Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("still running after %v (hung in MPI_Init?); output:\n%s", limit, out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("the launcher returned %v; want a failure; output:\n%s", err, out)
	}
	want := map[string][]string{
		"openmpi": {"started by MPICH Hydra mpiexec as rank", "of 2", "built for Open MPI (-tags mpi)", "rebuild with -tags mpich"},
		"mpich":   {"started by Open MPI mpirun as rank", "of 2", "built for MPICH (-tags mpich)", "rebuild with -tags mpi"},
	}[Family()]
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Errorf("the output does not say %q; output:\n%s", w, out)
		}
	}
	if strings.Contains(string(out), "--- PASS") || strings.Contains(string(out), "finalize checks passed") {
		t.Errorf("a rank ran its tests; output:\n%s", out)
	}
	if took > 30*time.Second {
		t.Errorf("failing took %v; want it at once", took)
	}
}

// Run directly (MPI makes a singleton world of 1) in an environment where
// srun says the step has 4 tasks: Init fails after MPI_Init with the
// mismatch, finalizes the MPI it started, and gives the same reason again.
func TestInitOutsideTheLaunchersJobFails(t *testing.T) {
	if inRanks() {
		t.Skip("already one rank of a launched job")
	}
	if os.Getenv(singletonEnv) == "" {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, exe, "-test.run=^TestInitOutsideTheLaunchersJobFails$", "-test.v")
		cmd.Env = append(os.Environ(), singletonEnv+"=1")
		for k, v := range srunJob {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestInitOutsideTheLaunchersJobFails") {
			t.Fatalf("the singleton: %v; output:\n%s", err, out)
		}
		return
	}
	err := Init()
	if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "MPI_Init made a world of 1 ranks, but Slurm srun started this process as rank 2 of 4") {
		t.Fatalf("Init in a singleton that srun says is 1 of 4 tasks: %v; want the mismatch", err)
	}
	if Initialized() || finalizeCalls != 1 || !libraryFinalized() {
		t.Errorf("after the mismatch: Initialized %v, finalize calls %d, MPI_Finalized %v; want MPI ended once", Initialized(), finalizeCalls, libraryFinalized())
	}
	if again := Acquire(); again == nil || again.Error() != err.Error() {
		t.Errorf("Acquire after the mismatch: %v; want the same reason", again)
	}
}

// singletonEnv marks the child of TestInitOutsideTheLaunchersJobFails.
const singletonEnv = "GPUCOMM_MPI_TEST_SINGLETON"
