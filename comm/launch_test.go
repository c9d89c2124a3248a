package comm

import (
	"errors"
	"github.com/gpucomm/gpucomm/comm/driver"
	"os"
	"slices"
	"strings"
	"testing"
)

// clearLaunchers unsets every variable internal/launcher reads, so that the
// test sees only the job it sets up (t.Setenv first, to restore them after).
func clearLaunchers(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		for _, p := range []string{"OMPI_", "PMI_", "PMIX_", "SLURM_", "MPI_LOCALRANKID"} {
			if strings.HasPrefix(name, p) {
				t.Setenv(name, "")
				os.Unsetenv(name)
			}
		}
	}
}

var inProcOpened int

func registerInProc(t *testing.T) {
	t.Helper()
	registerFakes(t)
	if _, ok := drivers["fake-inproc"]; ok {
		return
	}
	Register("fake-inproc", driver.Driver{
		Open: func(o Options) (driver.Conn, error) {
			inProcOpened++
			return &fakeComm{name: "fake-inproc", opts: o}, nil
		},
		Probe:     func() Verdict { return Verdict{Usable: true, Reason: "in this process"} },
		Rank:      -1,
		InProcess: true,
	})
}

// Under mpirun -np 4 a binary whose only usable backend is in-process would
// make four one-rank jobs that each "pass": Open of it must fail instead,
// naming the launcher, the job's size, what the binary was built with and
// the rebuild.
func TestInProcessBackendRefusedUnderAMultiRankLauncher(t *testing.T) {
	registerInProc(t)
	clearLaunchers(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "4")
	t.Setenv("OMPI_COMM_WORLD_RANK", "2")
	inProcOpened = 0
	c, err := Open("fake-inproc")
	if c != nil || err == nil {
		t.Fatalf("Open under mpirun -np 4 = %v, %v; want a refusal", c, err)
	}
	if inProcOpened != 0 {
		t.Errorf("the backend's Open ran %d times; the refusal must come first", inProcOpened)
	}
	want := []string{"fake-inproc", "Open MPI mpirun", "rank 2 of 4 ranks", "OMPI_COMM_WORLD_SIZE=4"}
	if builtMPI == "" {
		want = append(want, "built without MPI", "-tags mpi")
		if !errors.Is(err, ErrNotBuilt) {
			t.Errorf("%v: want ErrNotBuilt in a binary without MPI", err)
		}
	} else {
		want = append(want, builtMPI, "open backend mpi")
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v: want ErrUnsupported in a binary with MPI", err)
		}
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
	if got := CheckLauncher("fake-inproc"); got == nil || got.Error() != err.Error() {
		t.Errorf("CheckLauncher = %v; want Open's refusal %v", got, err)
	}
	if CheckLauncher("fake-good") != nil || CheckLauncher("nosuch") != nil {
		t.Error("CheckLauncher refused a backend that is not in-process")
	}
	// Probe says so too (gpucomm info said the in-process backend was
	// usable under mpirun, where Open refuses it).
	if v, perr := Probe("fake-inproc"); perr != nil || v.Usable || v.Reason != err.Error() {
		t.Errorf("Probe(fake-inproc) under mpirun = %+v, %v; want not usable, for Open's reason %q", v, perr, err)
	}
	if v, perr := Probe("fake-good"); perr != nil || !v.Usable {
		t.Errorf("Probe(fake-good) under mpirun = %+v, %v; want usable", v, perr)
	}
	// auto leaves the in-process backend out (opening what it would pick
	// instead starts MPI in a binary built with it, so only the list).
	names, err := candidates()
	if err != nil || slices.Contains(names, "fake-inproc") || !slices.Contains(names, "fake-good") {
		t.Errorf("auto's candidates under mpirun = %v, %v; want fake-good and not fake-inproc", names, err)
	}

	// MPICH's Hydra names its own tag; one rank (mpirun -np 1) is no refusal.
	clearLaunchers(t)
	t.Setenv("PMI_SIZE", "2")
	t.Setenv("PMI_RANK", "0")
	t.Setenv("MPI_LOCALRANKID", "0")
	err = CheckLauncher("fake-inproc")
	if err == nil || !strings.Contains(err.Error(), "MPICH Hydra mpiexec") || !strings.Contains(err.Error(), "of 2 ranks") {
		t.Errorf("under mpiexec -n 2: %v", err)
	}
	if builtMPI == "" && !strings.Contains(err.Error(), "-tags mpich (MPICH") {
		t.Errorf("under mpiexec -n 2 without MPI: %v; want the rebuild with -tags mpich", err)
	}
	t.Setenv("PMI_SIZE", "1")
	if c, err := Open("fake-inproc"); err != nil || c == nil {
		t.Errorf("under mpiexec -n 1: %v; one rank is a job the in-process backend can serve", err)
	}
	clearLaunchers(t)
	if c, err := Open("fake-inproc"); err != nil || c == nil {
		t.Errorf("without a launcher: %v", err)
	}
}

// Under srun -n 3 "auto" leaves the in-process backend out of its
// candidates (comm/local's tests show it failing when nothing else is usable).
func TestAutoLeavesInProcessBackendsOutUnderALauncher(t *testing.T) {
	registerInProc(t)
	clearLaunchers(t)
	t.Setenv("SLURM_STEP_ID", "0")
	t.Setenv("SLURM_STEP_NUM_TASKS", "3")
	t.Setenv("SLURM_PROCID", "1")
	names, err := candidates()
	if err != nil {
		t.Fatalf("candidates: %v (fake-good is usable)", err)
	}
	for _, n := range names {
		if drivers[n].InProcess {
			t.Errorf("candidates under srun -n 3 include in-process %s: %v", n, names)
		}
	}
	err = CheckLauncher("fake-inproc")
	if err == nil || !strings.Contains(err.Error(), "Slurm srun") || !strings.Contains(err.Error(), "rank 1 of 3 ranks") {
		t.Errorf("refusal %v: want srun and its size", err)
	}
	clearLaunchers(t)
	names, _ = candidates()
	found := false
	for _, n := range names {
		found = found || n == "fake-inproc"
	}
	if !found {
		t.Errorf("candidates without a launcher %v lack the in-process backend", names)
	}
}

// Under a launcher with no backend usable, auto says why the backends that
// could serve a launched job refused it; in a binary with MPI built in the
// in-process backends are named as no choice, not as the thing to change
// (an Open MPI build under MPICH's mpiexec said "open backend mpi,
// cudaaware, nccl or auto ... instead of local" to a program that opened
// auto); without MPI, the rebuild comes first.
func TestAutoUnderALauncherWithNoUsableBackendSaysWhy(t *testing.T) {
	registerInProc(t)
	regMu.Lock()
	saved := drivers
	drivers = map[string]driver.Driver{
		"fake-inproc": saved["fake-inproc"],
		"fake-refuses": {
			Open:  func(Options) (driver.Conn, error) { return nil, errors.New("never opened") },
			Probe: func() Verdict { return Verdict{Reason: "built for the other MPI family"} },
			Rank:  10,
		},
	}
	regMu.Unlock()
	t.Cleanup(func() { regMu.Lock(); drivers = saved; regMu.Unlock() })
	clearLaunchers(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "4")
	t.Setenv("OMPI_COMM_WORLD_RANK", "2")
	_, err := Open("auto")
	if err == nil {
		t.Fatal("Open(auto) under mpirun -np 4 with nothing usable succeeded")
	}
	want := []string{"fake-refuses: built for the other MPI family", "rank 2 of 4 ranks"}
	if builtMPI != "" {
		want = append(want, "comm: auto found no backend for this job (Open MPI mpirun started this process as rank 2 of 4 ranks",
			"the in-process backends cannot serve a launched job")
		if strings.Contains(err.Error(), "instead of") || !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v: want ErrUnsupported, not advice to open another backend instead of the in-process one", err)
		}
	} else {
		want = append(want, "built without MPI", "rebuild it with -tags mpi")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	if v, perr := Probe("auto"); perr == nil || perr.Error() != err.Error() {
		t.Errorf("Probe(auto) = %+v, %v; want auto's error %v", v, perr, err)
	}
}
