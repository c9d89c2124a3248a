//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// The tests that need ranks (TestRank...) run in this same test binary,
// started by TestUnderLauncher* under the family's launcher. In the parent
// they skip; in the ranks TestMain initialises MPI around them and checks
// finalization after them.

const (
	childEnv   = "GPUCOMM_MPI_TEST_CHILD"   // set in the ranks' environment by runRanks
	npEnv      = "GPUCOMM_MPI_TEST_NP"      // how many ranks runRanks asked for
	abortEnv   = "GPUCOMM_MPI_TEST_ABORT"   // makes TestRankAbortEndsTheJob run
	foreignEnv = "GPUCOMM_MPI_TEST_FOREIGN" // MPI is initialised before Init, as by another library
	lingerEnv  = "GPUCOMM_MPI_TEST_LINGER"  // the ranks end as after a failed Open: ReleaseKeepingUp, then Finalize
	// finalizeEnv: "stall1", rank 1 stalls a minute between the final
	// barrier and MPI_Finalize, and the others wait for it inside
	// MPI_Finalize, as in MPICH's hang; "late", rank 1 reaches Finalize 3 s
	// after the others. With FinalizeBoundEnv set.
	finalizeEnv = "GPUCOMM_MPI_TEST_FINALIZE"
	exitEnv     = "GPUCOMM_MPI_TEST_EXIT" // the status the ranks end with, as a failed test's would be
)

// lateBy is how late rank 1 reaches Finalize in the "late" scenario.
const lateBy = 3 * time.Second

func underLauncher() bool {
	return os.Getenv("OMPI_COMM_WORLD_SIZE") != "" || os.Getenv("PMI_SIZE") != ""
}

// inRanks reports whether this process is one rank of a launched job.
func inRanks() bool { return os.Getenv(childEnv) != "" || underLauncher() }

func TestMain(m *testing.M) {
	if !inRanks() {
		os.Exit(m.Run())
	}
	foreign := os.Getenv(foreignEnv) != ""
	if foreign {
		if err := foreignInit(); err != nil {
			fmt.Fprintf(os.Stderr, "rank ?: MPI_Init_thread before Init: %v\n", err)
			os.Exit(2)
		}
	}
	if err := Init(); err != nil {
		fmt.Fprintf(os.Stderr, "rank ?: Init: %v\n", err)
		os.Exit(2)
	}
	rank, size := World().Rank(), World().Size()
	if want, err := strconv.Atoi(os.Getenv(npEnv)); err == nil && want != size {
		// A launcher of the other family starts each process as a singleton.
		fmt.Fprintf(os.Stderr, "rank %d: world has %d ranks, the launcher was asked for %d: wrong launcher for %s?\n",
			rank, size, want, Family())
		os.Exit(2)
	}
	code := m.Run()
	check := checkFinalizeOnce
	if foreign {
		check = checkForeignMPIStaysUp
	}
	if os.Getenv(lingerEnv) != "" {
		check = checkLingeringMPIEndsWithFinalize
	}
	mode := os.Getenv(finalizeEnv)
	if mode != "" && Family() == "openmpi" {
		check, mode = checkFinalizeBoundIgnored, "" // Open MPI runs without the bound
	}
	switch mode {
	case "stall1":
		if rank == 1 {
			stallFinalize = time.Minute
		}
		check = func() error { return checkBoundedFinalize(true) }
	case "late":
		if rank == 1 {
			time.Sleep(lateBy)
		}
		check = func() error { return checkBoundedFinalize(false) }
	}
	if err := check(); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", rank, err)
		code = 1
	} else {
		fmt.Printf("rank %d/%d: finalize checks passed\n", rank, size)
	}
	if v := os.Getenv(exitEnv); v != "" && code == 0 {
		code, _ = strconv.Atoi(v)
	}
	if finalizeLeft {
		fmt.Printf("rank %d: ends with status %d\n", rank, code)
	}
	os.Exit(code)
}

// checkLingeringMPIEndsWithFinalize ends a rank as a program whose only
// Open failed: MPI stays up after ReleaseKeepingUp, usable and open to
// another Acquire, and Finalize (without a program reference) ends it once.
func checkLingeringMPIEndsWithFinalize() error {
	if err := Acquire(); err != nil {
		return fmt.Errorf("Acquire: %v", err)
	}
	if err := Finalize(); err != nil { // the program's reference goes first
		return fmt.Errorf("Finalize with an Acquire outstanding: %v", err)
	}
	if err := ReleaseKeepingUp(); err != nil {
		return fmt.Errorf("ReleaseKeepingUp: %v", err)
	}
	if !Initialized() || finalizeCalls != 0 {
		return fmt.Errorf("MPI went down with the last reference released keeping it up (finalize calls %d)", finalizeCalls)
	}
	if err := Acquire(); err != nil { // another Open
		return fmt.Errorf("Acquire after ReleaseKeepingUp: %v", err)
	}
	if err := World().Barrier(); err != nil {
		return fmt.Errorf("Barrier after ReleaseKeepingUp: %v", err)
	}
	if err := ReleaseKeepingUp(); err != nil {
		return fmt.Errorf("second ReleaseKeepingUp: %v", err)
	}
	if err := ReleaseKeepingUp(); !errors.Is(err, errs.ErrInvalidArgument) {
		return fmt.Errorf("ReleaseKeepingUp without Acquire: got %v, want ErrInvalidArgument", err)
	}
	if err := Finalize(); err != nil {
		return fmt.Errorf("Finalize of MPI left up: %v", err)
	}
	if Initialized() || finalizeCalls != 1 || !libraryFinalized() {
		return fmt.Errorf("after Finalize: Initialized %v, finalize calls %d, MPI_Finalized %v",
			Initialized(), finalizeCalls, libraryFinalized())
	}
	if err := Finalize(); err != nil || finalizeCalls != 1 {
		return fmt.Errorf("second Finalize: %v, finalize calls %d", err, finalizeCalls)
	}
	return nil
}

// checkFinalizeOnce runs at the end of every rank: MPI_Finalize must wait
// for the last reference, run exactly once, and leave everything failing
// cleanly afterwards.
func checkFinalizeOnce() error {
	if err := Acquire(); err != nil {
		return fmt.Errorf("Acquire: %v", err)
	}
	if err := Init(); err != nil { // idempotent while the program's reference is held
		return fmt.Errorf("second Init: %v", err)
	}
	if err := Finalize(); err != nil {
		return fmt.Errorf("Finalize with an Acquire outstanding: %v", err)
	}
	if err := Finalize(); err != nil {
		return fmt.Errorf("second Finalize: %v", err)
	}
	if !Initialized() || finalizeCalls != 0 {
		return fmt.Errorf("MPI went down while Acquire's reference was held (finalize calls %d)", finalizeCalls)
	}
	if err := World().Barrier(); err != nil {
		return fmt.Errorf("Barrier after Finalize with an Acquire outstanding: %v", err)
	}
	// An Open that fails releases keeping MPI up; a later last Release
	// still ends it.
	if err := Acquire(); err != nil {
		return fmt.Errorf("Acquire for a failing Open: %v", err)
	}
	if err := ReleaseKeepingUp(); err != nil || !Initialized() || finalizeCalls != 0 {
		return fmt.Errorf("ReleaseKeepingUp: %v; Initialized %v, finalize calls %d", err, Initialized(), finalizeCalls)
	}
	if err := Release(); err != nil {
		return fmt.Errorf("last Release: %v", err)
	}
	if Initialized() || finalizeCalls != 1 || !libraryFinalized() {
		return fmt.Errorf("after the last Release: Initialized %v, finalize calls %d, MPI_Finalized %v",
			Initialized(), finalizeCalls, libraryFinalized())
	}
	for name, err := range map[string]error{
		"Init":    Init(),
		"Acquire": Acquire(),
		"Barrier": World().Barrier(),
	} {
		if !errors.Is(err, errs.ErrClosed) {
			return fmt.Errorf("%s after MPI_Finalize: got %v, want ErrClosed", name, err)
		}
	}
	if err := Release(); !errors.Is(err, errs.ErrInvalidArgument) {
		return fmt.Errorf("Release without Acquire: got %v, want ErrInvalidArgument", err)
	}
	if err := Finalize(); err != nil {
		return fmt.Errorf("Finalize after MPI_Finalize: %v", err)
	}
	if finalizeCalls != 1 {
		return fmt.Errorf("MPI_Finalize ran %d times", finalizeCalls)
	}
	return nil
}

// In the parent MPI is never initialised: calls fail cleanly.
func TestBeforeInitCallsFailWithErrClosed(t *testing.T) {
	if inRanks() {
		t.Skip("MPI is up in a launched job")
	}
	if !Built() || Family() == "" {
		t.Fatalf("Built %v Family %q in a tagged build", Built(), Family())
	}
	if Initialized() || ThreadLevel() != ThreadSingle || World().Rank() != -1 {
		t.Errorf("before Init: Initialized %v ThreadLevel %v rank %d", Initialized(), ThreadLevel(), World().Rank())
	}
	if known, _ := CUDAAwareQuery(); known {
		t.Error("CUDAAwareQuery answered before Init")
	}
	if Version() == "" {
		t.Error("Version is empty before Init (MPI_Get_library_version works before MPI_Init)")
	}
	for name, err := range map[string]error{
		"Barrier":     World().Barrier(),
		"Allreduce":   World().Allreduce(1, 2, 1, Int32, Sum),
		"Waitall":     Waitall(nil),
		"ReduceLocal": ReduceLocal(1, 2, 1, Int32, Sum),
		"Release":     Release(),
		"Finalize":    Finalize(),
	} {
		switch name {
		case "Release":
			if !errors.Is(err, errs.ErrInvalidArgument) {
				t.Errorf("Release before Acquire: %v, want ErrInvalidArgument", err)
			}
		case "Finalize":
			if err != nil {
				t.Errorf("Finalize before Init: %v, want nil", err)
			}
		default:
			if !errors.Is(err, errs.ErrClosed) {
				t.Errorf("%s before Init: %v, want ErrClosed", name, err)
			}
		}
	}
}

func TestReduceRootBugDetectionReadsTheMPICHVersion(t *testing.T) {
	cases := map[string]bool{
		"MPICH Version:\t4.0.2\nMPICH Release date: Thu Apr  7 2022": true,
		"MPICH Version:      4.1.1":                                  true,
		"MPICH Version: 4.2.0":                                       false,
		"MPICH Version: 3.4.3":                                       true,
		"Open MPI v4.1.4, package: Debian OpenMPI":                   false,
		"Intel(R) MPI Library 2021.10":                               false,
		"MPICH Version: garbage":                                     false,
	}
	for v, want := range cases {
		if got := hasReduceRootBug(v); got != want {
			t.Errorf("hasReduceRootBug(%q) = %v, want %v", v, got, want)
		}
	}
}

// checkForeignMPIStaysUp runs at the end of every rank when MPI was
// initialised before Init: releasing every reference must leave it up for
// its owner, and once the owner finalizes it, Init must say so.
func checkForeignMPIStaysUp() error {
	if owned {
		return fmt.Errorf("Init claimed an MPI that was already initialised")
	}
	if err := Acquire(); err != nil {
		return fmt.Errorf("Acquire: %v", err)
	}
	if err := Finalize(); err != nil {
		return fmt.Errorf("Finalize: %v", err)
	}
	if err := Release(); err != nil {
		return fmt.Errorf("Release: %v", err)
	}
	if finalizeCalls != 0 || libraryFinalized() || !Initialized() {
		return fmt.Errorf("after the last Release: finalize calls %d, MPI_Finalized %v, Initialized %v",
			finalizeCalls, libraryFinalized(), Initialized())
	}
	if err := World().Barrier(); err != nil {
		return fmt.Errorf("Barrier on the owner's MPI after the last Release: %v", err)
	}
	if err := Init(); err != nil {
		return fmt.Errorf("Init again while the owner keeps MPI up: %v", err)
	}
	if err := Finalize(); err != nil {
		return fmt.Errorf("Finalize: %v", err)
	}
	if err := foreignFinalize(); err != nil {
		return fmt.Errorf("the owner's MPI_Finalize: %v", err)
	}
	if err := Init(); !errors.Is(err, errs.ErrClosed) {
		return fmt.Errorf("Init after the owner finalized: %v, want ErrClosed", err)
	}
	if finalizeCalls != 0 {
		return fmt.Errorf("this package called MPI_Finalize %d times on someone else's MPI", finalizeCalls)
	}
	return nil
}

// checkFinalizeBoundIgnored ends a rank of Open MPI started with
// FinalizeBoundEnv set: it runs with no bound, and MPI_Finalize as always.
func checkFinalizeBoundIgnored() error {
	if os.Getenv(FinalizeBoundEnv) == "" {
		return fmt.Errorf("%s is not set in the ranks", FinalizeBoundEnv)
	}
	if finalizeBound != 0 {
		return fmt.Errorf("Open MPI runs with a finalize bound of %v, want none", finalizeBound)
	}
	if err := checkFinalizeOnce(); err != nil {
		return err
	}
	if finalizeLeft {
		return fmt.Errorf("MPI_Finalize was left running under Open MPI")
	}
	return nil
}

// checkBoundedFinalize ends a rank under FinalizeBoundEnv: Finalize
// returns, having left MPI_Finalize running (left) or after it returned,
// and in either case MPI counts as finalized here.
func checkBoundedFinalize(left bool) error {
	if finalizeBound <= 0 {
		return fmt.Errorf("%s is not set in the ranks (finalize bound %v)", FinalizeBoundEnv, finalizeBound)
	}
	start := time.Now()
	if err := Finalize(); err != nil {
		return fmt.Errorf("Finalize: %v", err)
	}
	took := time.Since(start)
	if finalizeLeft != left {
		return fmt.Errorf("Finalize took %v with bound %v: left MPI_Finalize running %v, want %v", took, finalizeBound, finalizeLeft, left)
	}
	if left && !signal.Ignored(syscall.SIGUSR1) {
		return fmt.Errorf("MPI_Finalize left running, but SIGUSR1 (Hydra's word that a rank ended so) is not ignored")
	}
	if left && (took < finalizeBound || took > finalizeBound+5*time.Second) {
		return fmt.Errorf("Finalize gave up on MPI_Finalize after %v, want about its bound %v", took, finalizeBound)
	}
	if Initialized() || finalizeCalls != 1 {
		return fmt.Errorf("after Finalize: Initialized %v, finalize calls %d", Initialized(), finalizeCalls)
	}
	if err := World().Barrier(); !errors.Is(err, errs.ErrClosed) {
		return fmt.Errorf("Barrier after Finalize: %v, want ErrClosed", err)
	}
	fmt.Printf("rank %d: Finalize returned after %v (bound %v, MPI_Finalize left running: %v)\n", World().Rank(), took.Round(time.Millisecond), finalizeBound, left)
	return nil
}

// ownLauncher finds the family's launcher and its arguments for np ranks.
func ownLauncher(np int) (path string, args []string, err error) {
	var names []string
	switch Family() {
	case "openmpi":
		names = []string{"mpirun.openmpi", "mpiexec.openmpi", "mpirun", "mpiexec"}
		args = []string{"--oversubscribe", "--allow-run-as-root"}
	case "mpich":
		names = []string{"mpiexec.mpich", "mpiexec.hydra", "mpiexec", "mpirun"}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, append(args, "-np", strconv.Itoa(np)), nil
		}
	}
	return "", nil, fmt.Errorf("no %s launcher on PATH (tried %s)", Family(), strings.Join(names, ", "))
}

// runRanks runs this test binary's tests matching pattern on np ranks and
// returns the combined output and the launcher's error.
func runRanks(t *testing.T, np int, pattern string, env ...string) (string, error) {
	t.Helper()
	return runRanksWith(t, np, nil, pattern, env...)
}

// runRanksWith is runRanks with more options for the launcher.
func runRanksWith(t *testing.T, np int, more []string, pattern string, env ...string) (string, error) {
	t.Helper()
	if inRanks() {
		t.Skip("already one rank of a launched job")
	}
	path, args, err := ownLauncher(np)
	if err != nil {
		t.Skip(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args = append(append(args, more...), exe, "-test.run="+pattern, "-test.v", "-test.timeout=150s")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1", npEnv+"="+strconv.Itoa(np))
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s: %v on %d ranks", Family(), pattern, time.Since(start).Round(time.Millisecond), np)
	return string(out), err
}

// expectRanksPass fails t, with the ranks' output, unless every rank passed.
func expectRanksPass(t *testing.T, np int, out string, err error) {
	t.Helper()
	passed := strings.Count(out, "finalize checks passed")
	if err != nil || passed != np || strings.Contains(out, "--- FAIL") || !strings.Contains(out, "--- PASS: TestRank") {
		t.Fatalf("ranks failed (launcher: %v; %d of %d ranks finalized cleanly); their output:\n%s", err, passed, np, out)
	}
	if testing.Verbose() {
		t.Logf("ranks' output:\n%s", out)
	}
}

func TestUnderLauncherAllRankTestsPass(t *testing.T) {
	const np = 4
	out, err := runRanks(t, np, "^TestRank")
	expectRanksPass(t, np, out, err)
}

// Three ranks (not a power of two) with MPI_THREAD_SERIALIZED: the path where
// every call goes through the lock.
func TestUnderLauncherSerializedThreadLevel(t *testing.T) {
	const np = 3
	out, err := runRanks(t, np, "^TestRank(Library|Reductions|Concurrent|WaitTimeout)", ThreadLevelEnv+"=serialized")
	expectRanksPass(t, np, out, err)
}

// MPI initialised by someone else: used, never finalized by this package.
func TestUnderLauncherForeignInitIsNeverFinalized(t *testing.T) {
	const np = 2
	out, err := runRanks(t, np, "^TestRank(Library|Values)$", foreignEnv+"=1")
	expectRanksPass(t, np, out, err)
}

// A program whose Open failed leaves MPI up for another Open, and Finalize
// ends it.
func TestUnderLauncherFinalizeEndsMPILeftUpByAFailedOpen(t *testing.T) {
	const np = 2
	out, err := runRanks(t, np, "^TestRankValues$", lingerEnv+"=1")
	expectRanksPass(t, np, out, err)
}

// A rank whose MPI_Finalize does not return (stalled a minute here, as
// Debian's MPICH 4.0.2 + UCX leaves one now and then) ends FinalizeBoundEnv
// after every rank passed the barrier before it, saying so, with the exit
// status its tests gave: a failure stays a failure. Open MPI ignores the
// bound (its mpirun fails a job whose rank ended before MPI_Finalize
// returned, whatever its status, and Open MPI 4.1's could hang in its own
// teardown then): rank 0 says so, nothing is left running, and the job ends
// with the ranks' status.
func TestUnderLauncherFinalizeBoundEndsAStuckFinalize(t *testing.T) {
	const np = 4
	for _, status := range []int{0, 3} {
		t.Run(fmt.Sprintf("status%d", status), func(t *testing.T) {
			start := time.Now()
			var more []string
			if Family() == "mpich" {
				more = []string{"-disable-auto-cleanup"} // else Hydra kills the ranks still in their bound
			}
			out, err := runRanksWith(t, np, more, "^TestRankValues$", finalizeEnv+"=stall1", FinalizeBoundEnv+"=1s", exitEnv+"="+strconv.Itoa(status))
			took := time.Since(start)
			if Family() == "openmpi" {
				// Open MPI ignores the bound (its mpirun fails a job whose
				// rank leaves MPI_Finalize running, and can hang in its own
				// teardown then), so nothing stalls: every rank finalizes
				// and ends with its status.
				// mpirun ends the job when the first rank exits with a
				// status other than 0, perhaps before another has said it
				// passed its checks: then one must have.
				want := np
				if status != 0 {
					want = 1
				}
				expectBoundIgnored(t, want, out)
				var exit *exec.ExitError
				switch {
				case status == 0 && err != nil:
					t.Errorf("the ranks' tests passed, but mpirun returned %v", err)
				case status != 0 && (!errors.As(err, &exit) || exit.ExitCode() != status):
					t.Errorf("the ranks exited with status %d, but mpirun returned %v", status, err)
				}
				if t.Failed() {
					t.Logf("output:\n%s", out)
				}
				return
			}
			if n := strings.Count(out, "MPI_Finalize had not returned 1s after every rank passed the barrier"); n != np {
				t.Errorf("%d of %d ranks said they left MPI_Finalize running", n, np)
			}
			if took > 40*time.Second {
				t.Errorf("the job took %v, with MPI_Finalize stalled 1 minute and bounded at 1 s", took)
			}
			// Each rank ends with its own status. Hydra 4.0.2 does not
			// always report it: a rank whose PMI connection closed before
			// PMI's finalize gets a provisional status 1, which stands when
			// the proxy reads the close after it reaped the rank (about 1
			// run in 4 here); mpiexec then says the job ended on signal 1.
			ends := fmt.Sprintf(": ends with status %d\n", status)
			hydraOne := strings.Contains(out, hydraProvisionalStatus)
			var exit *exec.ExitError
			switch {
			case strings.Count(out, "finalize checks passed") != np:
				t.Errorf("not every rank passed its finalize checks")
			case strings.Count(out, ends) != np:
				t.Errorf("%d of %d ranks said they end with status %d", strings.Count(out, ends), np, status)
			case strings.Contains(out, "fatal error") || strings.Contains(out, "goroutine "):
				t.Errorf("a rank crashed after leaving MPI_Finalize")
			case status == 0 && err != nil && !(hydraOne && errors.As(err, &exit) && exit.ExitCode() == 1):
				t.Errorf("the ranks' tests passed, but the launcher returned %v", err)
			case status != 0 && (!errors.As(err, &exit) || (exit.ExitCode() != status && !hydraOne)):
				t.Errorf("the ranks exited with status %d, but the launcher returned %v", status, err)
			}
			if hydraOne {
				t.Logf("Hydra reported its provisional status 1 for a rank it reaped before reading its PMI close (%v); the ranks' own statuses are above", err)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// expectBoundIgnored checks an Open MPI job started with FinalizeBoundEnv
// set: rank 0 said once that it is ignored, no rank left MPI_Finalize
// running, and at least passed ranks passed their finalize checks.
func expectBoundIgnored(t *testing.T, passed int, out string) {
	t.Helper()
	if n := strings.Count(out, FinalizeBoundEnv+"=1s ignored under Open MPI"); n != 1 {
		t.Errorf("the job said %d times that Open MPI ignores %s, want once (rank 0); output:\n%s", n, FinalizeBoundEnv, out)
	}
	if strings.Contains(out, "MPI_Finalize had not returned") {
		t.Errorf("a rank left MPI_Finalize running under Open MPI; output:\n%s", out)
	}
	if n := strings.Count(out, "finalize checks passed"); n < passed {
		t.Errorf("%d ranks passed their finalize checks, want at least %d; output:\n%s", n, passed, out)
	}
}

// hydraProvisionalStatus is what MPICH 4.0.2's mpiexec prints when a
// rank's reported wait status is 1: the provisional status its proxy gives
// a rank whose PMI connection closed before PMI's finalize.
const hydraProvisionalStatus = "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Hangup (signal 1)"

// The bound counts from the barrier before MPI_Finalize: a rank that
// reaches Finalize late holds the others in the barrier, longer than the
// bound, and no one gives up.
func TestUnderLauncherFinalizeBoundWaitsForTheLastRank(t *testing.T) {
	const np = 3
	out, err := runRanks(t, np, "^TestRankValues$", finalizeEnv+"=late", FinalizeBoundEnv+"=1s")
	expectRanksPass(t, np, out, err)
	if Family() == "openmpi" {
		expectBoundIgnored(t, np, out)
		return
	}
	if strings.Contains(out, "MPI_Finalize had not returned") {
		t.Fatalf("a rank gave up on MPI_Finalize while rank 1 was %v late; output:\n%s", lateBy, out)
	}
	// Rank 0 reached Finalize at most a second before rank 1's sleep began.
	m := regexp.MustCompile(`rank 0: Finalize returned after ([^ ]+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("rank 0 did not say how long Finalize took; output:\n%s", out)
	}
	if took, err := time.ParseDuration(m[1]); err != nil || took < lateBy-time.Second {
		t.Fatalf("rank 0's Finalize returned after %s, want about %v, waiting for rank 1; output:\n%s", m[1], lateBy, out)
	}
}

func TestUnderLauncherAbortEndsTheJob(t *testing.T) {
	const np = 2
	out, err := runRanks(t, np, "^TestRankAbortEndsTheJob$", abortEnv+"=1")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 || strings.Contains(out, "finalize checks passed") {
		t.Fatalf("Abort(7) on rank 1: launcher returned %v, want a non-zero exit; output:\n%s", err, out)
	}
	t.Logf("launcher exit code %d", exit.ExitCode())
}

// ---- memory outside the Go heap ----

// arena is host memory from mmap, outside the Go heap, as device memory would
// be. It is mapped once and never unmapped, so no MPI registration cache can
// go stale; every test starts again at its beginning.
type arena struct {
	mem []byte
	off int
}

var testArena arena

const arenaSize = 64 << 20

// newArena resets the arena for one test.
func newArena(t *testing.T) *arena {
	t.Helper()
	if testArena.mem == nil {
		m, err := syscall.Mmap(-1, 0, arenaSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Fatalf("mmap: %v", err)
		}
		testArena.mem = m
	}
	testArena.off = 0
	return &testArena
}

const guardBytes = 64

// buf is n bytes of the arena followed by a guard that no call may touch.
type buf struct {
	all []byte
	n   int
}

func (a *arena) alloc(t *testing.T, n int) buf {
	t.Helper()
	need := (n + guardBytes + 63) &^ 63
	if a.off+need > len(a.mem) {
		t.Fatalf("arena exhausted: %d + %d bytes", a.off, need)
	}
	b := buf{all: a.mem[a.off : a.off+n+guardBytes : a.off+n+guardBytes], n: n}
	a.off += need
	b.poison()
	return b
}

func (b buf) bytes() []byte { return b.all[:b.n:b.n] }

func (b buf) addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b.all))) }

const poisonByte = 0xa5

func (b buf) poison() {
	for i := range b.all {
		b.all[i] = poisonByte
	}
}

func (b buf) guardIntact() bool {
	for _, v := range b.all[b.n:] {
		if v != poisonByte {
			return false
		}
	}
	return true
}
