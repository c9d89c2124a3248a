package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// argsEnv, set by the launching test, makes each rank of the launched test
// binary run ipcshare itself with these arguments, as the program would.
const argsEnv = "GPUCOMM_IPCSHARE_TEST_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(argsEnv); ok && mpitest.InRanks() {
		os.Exit(run(strings.Fields(args), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// launchIpcshare runs ipcshare on np ranks of the mpi backend under the
// build's MPI launcher; it skips without one.
func launchIpcshare(t *testing.T, np int, args string) mpitest.Job {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mpitest.Launch(t, np, 90*time.Second, []string{argsEnv + "=" + args, "GPUCOMM_BACKEND=mpi", "GPUCOMM_DEVICE=host"}, exe)
}

// One host under mpirun: SplitNode finds one node of all the ranks, as the
// launcher's local rank says.
func TestUnderLauncherFourRanksOnOneHostShareOneBuffer(t *testing.T) {
	j := launchIpcshare(t, 4, "-n 200")
	// Ranks write 200, 237, 274, 311 elements.
	for _, want := range []string{"4 rank(s) wrote 1022 elements (ranks [0 1 2 3], counts [200 237 274 311])", "job: 1 node(s), 4 rank(s), 1022 of 1022 elements"} {
		if !strings.Contains(j.Output, want) {
			t.Fatalf("output lacks %q (launcher: %v):\n%s", want, j.Err, j.Output)
		}
	}
	if j.Err != nil && !j.Orphaned || strings.Count(j.Output, ": matches") != 2 || strings.Contains(j.Output, "MISMATCH") {
		t.Fatalf("launcher: %v; want one node line and the job line, both matching:\n%s", j.Err, j.Output)
	}
}

// Five MPI processes split into two simulated nodes: one buffer a group,
// the groups' roots add up over their own communicator.
func TestUnderLauncherFiveRanksOnTwoSimulatedNodes(t *testing.T) {
	j := launchIpcshare(t, 5, "-n 100 -nodes 2")
	// Node k holds ranks [5k/2, 5(k+1)/2): {0,1,2} and {3,4}.
	for _, want := range []string{
		"simulated node 0: 3 rank(s) wrote 411 elements (ranks [0 1 2], counts [100 137 174])",
		"simulated node 1: 2 rank(s) wrote 459 elements (ranks [3 4], counts [211 248])",
		"job: 2 node(s), 5 rank(s), 870 of 870 elements",
	} {
		if !strings.Contains(j.Output, want) {
			t.Fatalf("output lacks %q (launcher: %v):\n%s", want, j.Err, j.Output)
		}
	}
	if j.Err != nil && !j.Orphaned || strings.Count(j.Output, ": matches") != 3 || strings.Contains(j.Output, "MISMATCH") {
		t.Fatalf("launcher: %v; want two node lines and the job line, all matching:\n%s", j.Err, j.Output)
	}
}

// -np under a launcher of several ranks would make each process a job of
// its own, every one printing that it matches: each rank refuses instead,
// and the job fails without a result line.
func TestUnderLauncherInProcessRanksAreRefused(t *testing.T) {
	j := launchIpcshare(t, 2, "-np 3 -n 50")
	if j.Err == nil || strings.Contains(j.Output, "matches") || !strings.Contains(j.Output, "ipcshare: -np:") {
		t.Fatalf("ipcshare -np 3 on 2 launched ranks: launcher %v; want every rank refused with no result line:\n%s", j.Err, j.Output)
	}
}
