// Package mpitest runs the tests of gpucomm's MPI backends under a real
// launcher: a test binary re-executes itself under mpirun (Open MPI) or
// mpiexec (MPICH) with several ranks, and its TestRank... tests run in the
// ranks. It also holds the test bodies both backends share. Only tests may
// import it.
package mpitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// Environment variables the parent sets for the ranks.
const (
	ChildEnv    = "GPUCOMM_MPICOMM_TEST_CHILD"    // marks a rank of a launched test job
	NPEnv       = "GPUCOMM_MPICOMM_TEST_NP"       // how many ranks were asked for
	ScenarioEnv = "GPUCOMM_MPICOMM_TEST_SCENARIO" // selects a test that ends the job on purpose
	// NoInitEnv makes Main leave MPI to the communicators, as a program
	// that never calls Init: MPI comes up with the first one and ends with
	// the last, so such a job runs one test.
	NoInitEnv = "GPUCOMM_MPICOMM_TEST_NO_INIT"
)

// passedMarker is what a rank prints after its tests passed and MPI
// finalized.
const passedMarker = "ranks' tests passed and MPI finalized"

// InRanks reports whether this process is a rank of a launched test job.
func InRanks() bool { return os.Getenv(ChildEnv) != "" }

// Scenario is the job-ending scenario this rank was started for, or "".
func Scenario() string { return os.Getenv(ScenarioEnv) }

// Main is TestMain. In a rank it holds the program's reference to MPI
// around the tests, so that the communicators they open and close one after
// another do not finalize MPI (it can be initialised once per process).
func Main(m *testing.M) {
	if !InRanks() {
		os.Exit(m.Run())
	}
	if os.Getenv(NoInitEnv) != "" {
		code := m.Run()
		if err := mpi.Finalize(); err != nil { // MPI left up by a failed Open, if any
			fmt.Fprintf(os.Stderr, "rank ?: mpi.Finalize: %v\n", err)
			code = 1
		}
		if code == 0 {
			fmt.Printf("rank ?: %s\n", passedMarker)
		}
		os.Exit(code)
	}
	if err := mpi.Init(); err != nil {
		fmt.Fprintf(os.Stderr, "rank ?: mpi.Init: %v\n", err)
		os.Exit(2)
	}
	rank, size := mpi.World().Rank(), mpi.World().Size()
	if want, err := strconv.Atoi(os.Getenv(NPEnv)); err == nil && want != size {
		fmt.Fprintf(os.Stderr, "rank %d: world of %d ranks, %d asked for: a launcher of another MPI family?\n", rank, size, want)
		os.Exit(2)
	}
	code := m.Run()
	if err := mpi.Finalize(); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: mpi.Finalize: %v\n", rank, err)
		code = 1
	}
	if code == 0 {
		fmt.Printf("rank %d/%d: %s\n", rank, size, passedMarker)
	}
	os.Exit(code)
}

// RankOnly skips t outside a launched job.
func RankOnly(t *testing.T) {
	t.Helper()
	if !InRanks() {
		t.Skip("runs in the ranks of a launched job (TestUnderLauncher...)")
	}
}

// LauncherEnv names a launcher to use instead of looking for one.
const LauncherEnv = "GPUCOMM_MPIRUN"

// Launcher is the family's launcher and its arguments for np ranks: the one
// GPUCOMM_MPIRUN names, else the one installed beside the MPI library this
// binary loaded (so that an MPI picked by LD_LIBRARY_PATH, such as a
// CUDA-aware build in its own prefix, gets its own launcher and not the
// system's), else the family's launcher on PATH.
func Launcher(np int) (path string, args []string, err error) {
	var names, beside []string
	switch mpi.Family() {
	case "openmpi":
		names = []string{"mpirun.openmpi", "mpiexec.openmpi", "mpirun"}
		beside = []string{"mpirun"}
		args = []string{"--oversubscribe", "--allow-run-as-root"}
	case "mpich":
		names = []string{"mpiexec.mpich", "mpiexec.hydra", "mpiexec"}
		beside = []string{"mpiexec.hydra", "mpiexec"}
	default:
		return "", nil, errors.New("MPI is not built in: build with -tags mpi or -tags mpich")
	}
	args = append(args, "-np", strconv.Itoa(np))
	if p := os.Getenv(LauncherEnv); p != "" {
		return p, args, nil
	}
	if lib := mpi.LibraryFile(); lib != "" {
		bin := filepath.Join(filepath.Dir(filepath.Dir(lib)), "bin")
		for _, n := range beside {
			if st, err := os.Stat(filepath.Join(bin, n)); err == nil && !st.IsDir() {
				return filepath.Join(bin, n), args, nil
			}
		}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, args, nil
		}
	}
	return "", nil, fmt.Errorf("no %s launcher on PATH (tried %s)", mpi.Family(), strings.Join(names, ", "))
}

// Job is a launched command's outcome.
type Job struct {
	Output  string
	Err     error
	Elapsed time.Duration
	// Orphaned: the launcher outlived every process it started and was
	// killed (watchLauncher); the ranks had all ended.
	Orphaned bool
}

// Launch runs argv on np ranks under the launcher, killed after limit (a
// safety net: a hung job fails the test instead of hanging it). It skips t
// when there is no launcher, and in a rank.
func Launch(t *testing.T, np int, limit time.Duration, env []string, argv ...string) Job {
	t.Helper()
	if InRanks() {
		t.Skip("already a rank of a launched job")
	}
	path, args, err := Launcher(np)
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, argv...)...)
	cmd.Env = append(os.Environ(), ChildEnv+"=1", NPEnv+"="+strconv.Itoa(np),
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	var j Job
	if err := cmd.Start(); err != nil {
		j.Err = err
	} else {
		j.Orphaned, j.Err = watchLauncher(cmd)
	}
	j.Output, j.Elapsed = out.String(), time.Since(start)
	switch {
	case ctx.Err() != nil:
		j.Err = fmt.Errorf("killed after %v, the bound for this job: %w (%v)", limit, ctx.Err(), j.Err)
	case j.Orphaned:
		t.Logf("%s: the launcher was still running %v after every rank had ended, and was killed (a known Open MPI 4.1 teardown hang); the ranks' output decides", path, orphanGrace)
	}
	t.Logf("%s, %d ranks: %v", mpi.Family(), np, j.Elapsed.Round(time.Millisecond))
	return j
}

// RunRanks runs this test binary's tests matching pattern on np ranks.
func RunRanks(t *testing.T, np int, pattern string, limit time.Duration, env ...string) Job {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{exe, "-test.run=" + pattern, "-test.v", "-test.count=1", fmt.Sprintf("-test.timeout=%v", limit)}
	if testing.Short() {
		argv = append(argv, "-test.short")
	}
	return Launch(t, np, limit+30*time.Second, env, argv...)
}

// ExpectPass fails t, showing the ranks' output, unless every rank ran
// tests, passed them and finalized MPI.
//
// One launcher failure is not the ranks': MPICH 4.0.2's Hydra reports
// status 1 for a rank that internal/mpi's finalize bound
// (GPUCOMM_MPI_FINALIZE_BOUND, for that MPICH's occasional hang in
// MPI_Finalize between nodes) ended with MPI_Finalize unfinished, whatever
// status the rank ended with, or its mpiexec dies of SIGPIPE writing to
// such a rank's closed PMI connection (internal/multinode's LaunchUntil
// accepts the same: mpi.HydraFinalizeBounded); the output then decides,
// and t says so.
func ExpectPass(t *testing.T, np int, j Job) {
	t.Helper()
	passed := strings.Count(j.Output, passedMarker)
	launcherFailed := j.Err != nil && !j.Orphaned
	if launcherFailed && mpi.HydraFinalizeBounded(mpi.Family(), j.Output, j.Err) {
		t.Logf("the launcher reported %v after a rank ended with MPI_Finalize unfinished (GPUCOMM_MPI_FINALIZE_BOUND): Hydra's status 1 for it, or mpiexec's SIGPIPE; the ranks' output decides", j.Err)
		launcherFailed = false
	}
	if launcherFailed || passed != np || strings.Contains(j.Output, "--- FAIL") || !strings.Contains(j.Output, "--- PASS: TestRank") {
		t.Fatalf("ranks failed (launcher: %v; %d of %d ranks passed); their output:\n%s", j.Err, passed, np, j.Output)
	}
	if testing.Verbose() {
		t.Logf("ranks' output:\n%s", j.Output)
	}
}

// ExpectTimeoutEndsTheJob fails t unless the job ended with a failure
// status, before its bound, with a timeout that names want.
func ExpectTimeoutEndsTheJob(t *testing.T, j Job, want string) {
	t.Helper()
	var exit *exec.ExitError
	if !j.Orphaned && (!errors.As(j.Err, &exit) || exit.ExitCode() == 0) {
		t.Fatalf("launcher returned %v; want the job ended by MPI_Abort with a failure status; output:\n%s", j.Err, j.Output)
	}
	if j.Orphaned && !strings.Contains(j.Output, "MPI_Abort") && !strings.Contains(j.Output, "MPI_ABORT") {
		t.Fatalf("every rank ended, but no rank called MPI_Abort; output:\n%s", j.Output)
	}
	if !strings.Contains(j.Output, "timed out:") || !strings.Contains(j.Output, want) {
		t.Fatalf("no rank reported a timeout naming %q; output:\n%s", want, j.Output)
	}
	if strings.Contains(j.Output, "want a ") || strings.Contains(j.Output, "succeeded") {
		t.Fatalf("a rank's timeout error was not what it should be; output:\n%s", j.Output)
	}
	if j.Orphaned {
		t.Logf("every rank ended after %v; the launcher hung and was killed", j.Elapsed.Round(time.Millisecond))
		return
	}
	t.Logf("job ended with status %d after %v", exit.ExitCode(), j.Elapsed.Round(time.Millisecond))
}

// ExpectAbortNaming fails t unless the job ended by MPI_Abort with a failure
// status, its output holding every one of want and no line a rank writes
// when something it checks went wrong ("want ", "changed", "succeeded",
// "failed:").
func ExpectAbortNaming(t *testing.T, j Job, want ...string) {
	t.Helper()
	var exit *exec.ExitError
	if !j.Orphaned && (!errors.As(j.Err, &exit) || exit.ExitCode() == 0) {
		t.Fatalf("launcher returned %v; want the job ended by MPI_Abort with a failure status; output:\n%s", j.Err, j.Output)
	}
	for _, w := range want {
		if !strings.Contains(j.Output, w) {
			t.Fatalf("the job's output does not say %q; output:\n%s", w, j.Output)
		}
	}
	for _, bad := range []string{": want ", "changed its buffer", "succeeded", "the send failed:"} {
		if strings.Contains(j.Output, bad) {
			t.Fatalf("a rank reported %q; output:\n%s", bad, j.Output)
		}
	}
}

// BuildCommand builds the gpucomm command with this binary's MPI build tag
// into a temporary directory and returns its path.
func BuildCommand(t *testing.T) string {
	t.Helper()
	tag := map[string]string{"openmpi": "mpi", "mpich": "mpich"}[mpi.Family()]
	if tag == "" {
		t.Skip("MPI is not built in")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build cmd/gpucomm with")
	}
	bin := t.TempDir() + "/gpucomm"
	cmd := exec.CommandContext(t.Context(), goTool, "build", "-tags", tag, "-o", bin, "github.com/gpucomm/gpucomm/cmd/gpucomm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %s ./cmd/gpucomm: %v\n%s", tag, err, out)
	}
	return bin
}

// commandToLaunch builds the gpucomm command for a job launched from this
// test; it skips t in a rank of a job, or without MPI.
func commandToLaunch(t *testing.T) string {
	t.Helper()
	if InRanks() {
		t.Skip("already a rank of a launched job")
	}
	if !mpi.Built() {
		t.Skip("MPI is not built in")
	}
	return BuildCommand(t)
}

// CheckCommand runs "gpucomm check -backend name" on np ranks (with -short
// on MPICH or under go test -short) and fails t unless every case passes.
func CheckCommand(t *testing.T, np int, name string) {
	t.Helper()
	bin := commandToLaunch(t)
	args := []string{bin, "check", "-backend", name}
	if testing.Short() || mpi.Family() == "mpich" {
		args = append(args, "-short")
	}
	j := Launch(t, np, 5*time.Minute, nil, args...)
	if j.Err != nil || !strings.Contains(j.Output, "PASS: ") || strings.Contains(j.Output, "FAIL") {
		t.Fatalf("mpirun -np %d gpucomm check -backend %s: %v; output:\n%s", np, name, j.Err, j.Output)
	}
}

// OtherLauncher is the launcher of the other MPI family than this binary's
// and its arguments for np ranks; it skips t when there is none on PATH (CI
// installs both families).
func OtherLauncher(t *testing.T, np int) (path string, args []string) {
	t.Helper()
	var names []string
	switch mpi.Family() {
	case "openmpi":
		names = []string{"mpiexec.mpich", "mpiexec.hydra"}
	case "mpich":
		names = []string{"mpirun.openmpi", "mpiexec.openmpi"}
		args = []string{"--oversubscribe", "--allow-run-as-root"}
	default:
		t.Skip("MPI is not built in")
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, append(args, "-np", strconv.Itoa(np))
		}
	}
	t.Skipf("the other MPI family's launcher is not on PATH (tried %s); this test needs both families installed", strings.Join(names, ", "))
	return "", nil
}

// CheckUnderOtherLauncher runs "gpucomm check -backend name", built for this
// binary's MPI, under the other family's launcher: it must fail at once on
// every rank, saying which launcher started it and how to fix it, instead of
// passing as np one-rank jobs or hanging in MPI_Init.
func CheckUnderOtherLauncher(t *testing.T, np int, name string) {
	t.Helper()
	bin := commandToLaunch(t)
	path, args := OtherLauncher(t, np)
	const limit = time.Minute
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, bin, "check", "-backend", name, "-short")...)
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("%s -np %d gpucomm check -backend %s still ran after %v; output:\n%s", path, np, name, limit, out)
	}
	launcherName, fix := "MPICH Hydra mpiexec", "rebuild with -tags mpich"
	if mpi.Family() == "mpich" {
		launcherName, fix = "Open MPI mpirun", "rebuild with -tags mpi"
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 || strings.Contains(string(out), "PASS: ") ||
		!strings.Contains(string(out), "started by "+launcherName) || !strings.Contains(string(out), fmt.Sprintf("of %d", np)) ||
		!strings.Contains(string(out), fix) {
		t.Fatalf("%s -np %d gpucomm check -backend %s (built for %s): %v after %v; want a failure naming %s, %d ranks and %q; output:\n%s",
			path, np, name, mpi.Family(), err, took, launcherName, np, fix, out)
	}
	t.Logf("%s refused in %v", path, took.Round(time.Millisecond))
}

// InfoCommand runs "gpucomm info -mpi" on np ranks: it succeeds, only
// rank 0 prints, and the cudaaware line gives the verdict of the Open it
// made on the host device (MPI moves host memory), or with
// GPUCOMM_CUDA_AWARE=0 the refusal.
func InfoCommand(t *testing.T, np int) {
	t.Helper()
	bin := commandToLaunch(t)
	for env, want := range map[string]string{
		"":                     `cudaaware\s+usable\s+.*: host device: MPI moves host memory`,
		"GPUCOMM_CUDA_AWARE=0": `cudaaware\s+not usable\s+GPUCOMM_CUDA_AWARE=0`,
	} {
		envs := []string{"GPUCOMM_DEVICE=host"}
		if env != "" {
			envs = append(envs, env)
		}
		j := Launch(t, np, time.Minute, envs, bin, "info", "-mpi")
		if j.Err != nil || strings.Count(j.Output, "Backends (best first):") != 1 || !regexp.MustCompile(want).MatchString(j.Output) {
			t.Errorf("%s mpirun -np %d gpucomm info -mpi: %v; want one report matching %q; output:\n%s", env, np, j.Err, want, j.Output)
		}
	}
}

// UnderLauncher is the launcher side of an MPI backend's tests, as subtests
// of t: np ranks run the backend's TestRankConformance, then every other
// TestRank... test; three ranks rerun some below MPI_THREAD_MULTIPLE; a
// rank that skips a collective, and one that never sends, end the job with
// the timeout that names them; and "gpucomm check" passes. recvGap is how
// the backend's timed-out receive names the rank that never sent.
func UnderLauncher(t *testing.T, backend string, np int, recvGap string) {
	t.Run("Conformance", func(t *testing.T) {
		ExpectPass(t, np, RunRanks(t, np, "^TestRankConformance$", 4*time.Minute))
	})
	t.Run("EverythingElse", func(t *testing.T) {
		ExpectPass(t, np, RunRanks(t, np, "^TestRank[^C]", 4*time.Minute))
	})
	// Below MPI_THREAD_MULTIPLE every MPI call is serialised, and waits poll.
	t.Run("SerializedThreadLevel", func(t *testing.T) {
		ExpectPass(t, 3, RunRanks(t, 3, "^TestRank(SmallChunks|StreamsKeepCallOrder|OptionsAgree|NodePath|StreamOrderedP2P|SmallBlocking)$", 3*time.Minute,
			mpi.ThreadLevelEnv+"=serialized"))
	})
	// The senders' processes end (MPI_Finalize, exit) right after their
	// Close, before the receivers ask for the message.
	t.Run("SentMessageOutlivesTheSendersExit", func(t *testing.T) {
		ExpectPass(t, 2, RunRanks(t, 2, "^TestRankSendThenClose$", time.Minute, NoInitEnv+"=1"))
	})
	if backend == "mpi" {
		// These two are about the pinned ring, which buffers a message the
		// receiver has not asked for; the IPC path delivers it before Send
		// returns (as MPI's rendezvous), so it is turned off for them.
		t.Run("UnreceivedNodeMessageFailsClose", func(t *testing.T) {
			ExpectPass(t, 2, RunRanks(t, 2, "^TestRankUnreceivedSendFailsClose$", time.Minute, ScenarioEnv+"=unreceived", "GPUCOMM_NODE_IPC=off"))
		})
		t.Run("SentMessageOutlivesFinalize", func(t *testing.T) {
			ExpectPass(t, 2, RunRanks(t, 2, "^TestRankSendThenFinalize$", time.Minute, NoInitEnv+"=1", ScenarioEnv+"=finalize", "GPUCOMM_NODE_IPC=off"))
		})
	}
	t.Run("CollectiveTimeoutNamesTheMissingRank", func(t *testing.T) {
		j := RunRanks(t, np, "^TestRankTimeout$", time.Minute, ScenarioEnv+"=collective")
		ExpectTimeoutEndsTheJob(t, j, fmt.Sprintf("ranks that never arrived: %d", np-1))
	})
	// With no timeout, a rank that cannot go on aborts the job (comm.Aborter)
	// and the ranks waiting for it in a collective end with it.
	t.Run("AbortEndsTheJob", func(t *testing.T) {
		j := RunRanks(t, np, "^TestRankTimeout$", time.Minute, ScenarioEnv+"=abort")
		ExpectAbortNaming(t, j, fmt.Sprintf("gpucomm %s rank %d: Abort: %s: calling MPI_Abort", backend, np-1, AbortReason))
	})
	t.Run("RecvTimeoutNamesTheSender", func(t *testing.T) {
		j := RunRanks(t, 3, "^TestRankTimeout$", time.Minute, ScenarioEnv+"=recv")
		ExpectTimeoutEndsTheJob(t, j, recvGap)
	})
	if backend == "mpi" {
		// The IPC path's window (two receives of one GroupP2P, moved
		// together) says which rank never sent.
		t.Run("IPCWindowTimeoutNamesTheSender", func(t *testing.T) {
			j := RunRanks(t, 3, "^TestRankTimeout$", time.Minute, ScenarioEnv+"=ipc-window")
			ExpectTimeoutEndsTheJob(t, j, recvGap)
			// The receives' cells stay MPI's, and the communicator broken
			// for that reason: Close says so before it ends the job.
			if why := "stopped half way through the IPC path"; !strings.Contains(j.Output, why) {
				t.Fatalf("no rank said its communicator was broken because a window %s; output:\n%s", why, j.Output)
			}
		})
		// The ring's: the IPC path's mismatch leaves nothing in flight and
		// the communicator usable (CountsThatDiffer), so it is turned off.
		t.Run("NodePathMismatchEndsTheJob", func(t *testing.T) {
			j := RunRanks(t, 2, "^TestRankTimeout$", time.Minute, ScenarioEnv+"=node-mismatch", "GPUCOMM_NODE_IPC=off")
			ExpectAbortNaming(t, j, "rank 1 mismatch:", "sent 24000 bytes through the node path; the sender's count differs")
		})
		// A staged sender's chunks (pinned memory) into a staged receive of
		// several chunks no longer break the communicator: the receive
		// takes the sender's first message alone (TestRankReceiveOfAnotherSize,
		// IPCPathFromPinned).
	}
	t.Run("GpucommCheckPasses", func(t *testing.T) { CheckCommand(t, np, backend) })
	if backend == "mpi" {
		t.Run("GpucommCheckRefusesTheOtherFamilysLauncher", func(t *testing.T) { CheckUnderOtherLauncher(t, 2, backend) })
	}
	if backend == "cudaaware" {
		t.Run("GpucommInfoGivesMPIsVerdict", func(t *testing.T) { InfoCommand(t, 2) })
	}
}

// ProbeRefusesOtherLauncher: in the environment the other MPI family's
// launcher gives its ranks, backend's Probe says it cannot run and why,
// without starting MPI, so that "auto" does not pick it.
func ProbeRefusesOtherLauncher(t *testing.T, backend string) {
	if InRanks() {
		t.Skip("a rank of a launched job")
	}
	env, fix := map[string]string{"PMI_SIZE": "3", "PMI_RANK": "1", "MPI_LOCALRANKID": "1"}, "rebuild with -tags mpich"
	switch mpi.Family() {
	case "":
		t.Skip("MPI is not built in")
	case "mpich":
		env, fix = map[string]string{"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "1"}, "rebuild with -tags mpi"
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	v, err := comm.Probe(backend)
	if err != nil {
		t.Fatal(err)
	}
	if v.Usable || !strings.Contains(v.Reason, "rank 1 of 3") || !strings.Contains(v.Reason, fix) {
		t.Errorf("Probe(%s) under the other family's launcher: %+v; want not usable, naming the job and %q", backend, v, fix)
	}
	if mpi.Initialized() {
		t.Error("Probe started MPI")
	}
}
