package launcher

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

// The environments below are what the launchers installed here and on the
// clusters we run on set (trimmed to the variables that matter plus a few
// distractors), so a change of precedence shows up as a wrong Family.
func TestDetectNamesTheLauncherOfEachEnvironment(t *testing.T) {
	slurmStep := map[string]string{"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "8",
		"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1"}
	with := func(base map[string]string, extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name string
		env  map[string]string
		ok   bool
		want Job // From is checked to name each variable read
	}{
		{"nothing", map[string]string{"HOME": "/root"}, false, Job{}},
		{"open mpi", map[string]string{"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "2", "PMIX_RANK": "2", "PMIX_NAMESPACE": "2132410369"},
			true, Job{Launcher: "Open MPI mpirun", Family: FamilyOpenMPI, Size: 4, Rank: 2, LocalRank: 2}},
		{"open mpi without local rank", map[string]string{"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"},
			true, Job{Launcher: "Open MPI mpirun", Family: FamilyOpenMPI, Size: 2, Rank: 1, LocalRank: -1}},
		{"open mpi under srun (mpirun in an allocation)", with(slurmStep, map[string]string{
			"OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}),
			true, Job{Launcher: "Open MPI mpirun", Family: FamilyOpenMPI, Size: 16, Rank: 9, LocalRank: 1}},
		{"hydra", map[string]string{"PMI_SIZE": "2", "PMI_RANK": "1", "PMI_FD": "8",
			"MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1"},
			true, Job{Launcher: "MPICH Hydra mpiexec", Family: FamilyMPICH, Size: 2, Rank: 1, LocalRank: 1}},
		{"hydra under srun", with(slurmStep, map[string]string{"PMI_SIZE": "6", "PMI_RANK": "5",
			"MPI_LOCALRANKID": "0"}),
			true, Job{Launcher: "MPICH Hydra mpiexec", Family: FamilyMPICH, Size: 6, Rank: 5, LocalRank: 0}},
		{"srun with PMI-2", with(slurmStep, map[string]string{"PMI_SIZE": "4", "PMI_RANK": "3", "PMI_FD": "5"}),
			true, Job{Launcher: "Slurm srun", Family: FamilySlurm, Size: 4, Rank: 3, LocalRank: 1}},
		{"srun with PMIx", with(slurmStep, map[string]string{"PMIX_RANK": "3", "PMIX_NAMESPACE": "slurm.pmix.77.0"}),
			true, Job{Launcher: "Slurm srun", Family: FamilySlurm, Size: 4, Rank: 3, LocalRank: 1}},
		{"srun of an old Slurm (SLURM_STEPID, SLURM_NTASKS)", map[string]string{"SLURM_STEPID": "2",
			"SLURM_NTASKS": "3", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"},
			true, Job{Launcher: "Slurm srun", Family: FamilySlurm, Size: 3, Rank: 0, LocalRank: 0}},
		{"sbatch script, no step", map[string]string{"SLURM_JOB_ID": "77", "SLURM_NTASKS": "8",
			"SLURM_PROCID": "0", "SLURM_LOCALID": "0"}, false, Job{}},
		{"sbatch script, batch step id", map[string]string{"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "4294967291",
			"SLURM_NTASKS": "8", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}, false, Job{}},
		{"bare pmix", map[string]string{"PMIX_RANK": "1", "PMIX_NAMESPACE": "prterun-x-1"},
			true, Job{Launcher: "PMIx server", Family: FamilyPMIx, Size: 0, Rank: 1, LocalRank: -1}},
		{"pmix rank without namespace", map[string]string{"PMIX_RANK": "1"}, false, Job{}},
		{"open mpi garbage falls through to hydra", map[string]string{"OMPI_COMM_WORLD_SIZE": "x",
			"OMPI_COMM_WORLD_RANK": "0", "PMI_SIZE": "2", "PMI_RANK": "0", "MPI_LOCALRANKID": "0"},
			true, Job{Launcher: "MPICH Hydra mpiexec", Family: FamilyMPICH, Size: 2, Rank: 0, LocalRank: 0}},
		{"rank not below size", map[string]string{"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "2"}, false, Job{}},
		{"zero size", map[string]string{"PMI_SIZE": "0", "PMI_RANK": "0"}, false, Job{}},
		{"negative rank", map[string]string{"PMI_SIZE": "2", "PMI_RANK": "-1"}, false, Job{}},
		{"local rank out of range is unknown", map[string]string{"OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "5"},
			true, Job{Launcher: "Open MPI mpirun", Family: FamilyOpenMPI, Size: 2, Rank: 0, LocalRank: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Detect(env(c.env))
			if ok != c.ok {
				t.Fatalf("Detect ok = %v, want %v (job %+v)", ok, c.ok, got)
			}
			if !ok {
				if got != (Job{}) {
					t.Errorf("Detect returned %+v with ok false, want the zero Job", got)
				}
				return
			}
			from := got.From
			got.From = ""
			if got != c.want {
				t.Errorf("Detect = %+v, want %+v", got, c.want)
			}
			// Each size and rank variable read is named with its value.
			for _, f := range strings.Fields(from) {
				name, value, found := strings.Cut(f, "=")
				if !found || c.env[name] != value {
					t.Errorf("From %q names %q, which is not in the environment", from, f)
				}
			}
			if !strings.Contains(from, "="+strconv.Itoa(c.want.Rank)) {
				t.Errorf("From %q does not show the rank %d", from, c.want.Rank)
			}
		})
	}
}

func TestMultiRankOnlyForJobsOfSeveralRanks(t *testing.T) {
	for _, c := range []struct {
		j    Job
		want bool
	}{
		{Job{Size: 1, Rank: 0}, false},
		{Job{Size: 2, Rank: 0}, true},
		{Job{Size: 0, Rank: 0}, false},
		{Job{Size: 0, Rank: 3}, true},
	} {
		if got := c.j.MultiRank(); got != c.want {
			t.Errorf("%+v.MultiRank() = %v, want %v", c.j, got, c.want)
		}
	}
	s := Job{Launcher: "Open MPI mpirun", Size: 4, From: "OMPI_COMM_WORLD_SIZE=4"}.String()
	if !strings.Contains(s, "Open MPI mpirun") || !strings.Contains(s, "4 ranks") || !strings.Contains(s, "OMPI_COMM_WORLD_SIZE=4") {
		t.Errorf("String() = %q, want the launcher, the size and the variables", s)
	}
}

// The real launchers: this test binary, started by each, reports what
// FromEnv read, and each rank must see its own rank and the job's size.

const reportEnv = "GPUCOMM_LAUNCHER_TEST_REPORT"

func TestMain(m *testing.M) {
	if os.Getenv(reportEnv) != "" {
		j, ok := FromEnv()
		fmt.Printf("job ok=%v family=%s size=%d rank=%d local=%d\n", ok, j.Family, j.Size, j.Rank, j.LocalRank)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestFromEnvUnderRealLaunchers(t *testing.T) {
	if _, ok := FromEnv(); ok {
		t.Skip("this test process itself runs under a launcher")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		family, launcher string
		args             []string
	}{
		{FamilyOpenMPI, "mpirun.openmpi", []string{"--allow-run-as-root", "--oversubscribe", "-np", "3"}},
		{FamilyMPICH, "mpiexec.mpich", []string{"-n", "3"}},
		{FamilyMPICH, "mpiexec.hydra", []string{"-n", "3"}},
	} {
		t.Run(c.launcher, func(t *testing.T) {
			path, err := exec.LookPath(c.launcher)
			if err != nil {
				t.Skipf("%s not on PATH: %v", c.launcher, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, path, append(c.args, exe, "-test.run=^$")...)
			cmd.Env = append(os.Environ(), reportEnv+"=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", c.launcher, err, out)
			}
			var lines []string
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "job ") {
					lines = append(lines, l)
				}
			}
			sort.Strings(lines)
			var want []string
			for r := 0; r < 3; r++ {
				want = append(want, fmt.Sprintf("job ok=true family=%s size=3 rank=%d local=%d", c.family, r, r))
			}
			if strings.Join(lines, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s reported\n%s\nwant\n%s\n(full output:\n%s)", c.launcher, strings.Join(lines, "\n"), strings.Join(want, "\n"), out)
			}
		})
	}
}
