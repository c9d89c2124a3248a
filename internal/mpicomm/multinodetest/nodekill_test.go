package multinodetest

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// The drill with a whole node killed: the ranks of nodeB kill themselves
// (SIGKILL) as they enter the third of a run of content-checked AllReduces,
// so that nodeB is gone at once; every rank of nodeA must end that
// collective with an error naming ranks 2 and 3 within GPUCOMM_TIMEOUT plus
// a few seconds, and the job must end (Close calls MPI_Abort). Under Open
// MPI (TCP) the survivors' collective times out (ErrTimeout); under MPICH
// 4.0.2 (ch4:ucx) their next message to nodeB fails inside MPI at once (UCX
// "Endpoint timeout"), and the error names the failed request's peer and
// the ranks that never announced the collective. Either way the launcher
// must let the survivors live to say so: Open MPI's orte_enable_recovery,
// Hydra's -disable-auto-cleanup.

// killTimeout is GPUCOMM_TIMEOUT in the drill; slack is what the survivors
// may take beyond it.
const (
	killTimeout = 2 * time.Second
	slack       = 4 * time.Second
)

// survivorLine is what a rank of nodeA prints once its collective failed.
var survivorLine = regexp.MustCompile(`rank (\d+) on (node[A-Z]) ended collective 3 after ([0-9.]+)s: (.*)`)

// runtimeDied is the first line of a Go runtime's fatal error or panic.
var runtimeDied = regexp.MustCompile(`(?m)^(fatal error: |panic: ).*`)

func TestMultinodeWholeNodeKilledIsNamedBySurvivors(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			upNodes(t)
			// Open MPI's mpirun kills every rank as soon as one dies, before
			// the others' timeouts: orte_enable_recovery lets the survivors
			// live to fail on their own (MPICH ignores the variable). Hydra
			// does the same unless told -disable-auto-cleanup.
			env := []string{"GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND=", "GPUCOMM_TIMEOUT=" + killTimeout.String(),
				mpitest.ScenarioEnv + "=node-killed", "GPUCOMM_NODEKILL_BACKEND=" + backend,
				"OMPI_MCA_orte_enable_recovery=1"}
			if mpi.Family() == "mpich" {
				env = append(env, launcherArgsEnv+"=-disable-auto-cleanup")
			}
			j := mpitest.RunRanks(t, np, "^TestRankScenarioNodeKilled$", time.Minute, env...)
			// Under recovery, Open MPI's mpirun exits 0 even after MPI_Abort:
			// the abort in the output, or a failure status, ends the job. The
			// abort is the launcher's notice, or a rank's own line just
			// before its call: Open MPI 4.1's help messages under recovery
			// sometimes arrive garbled ("Data unpack would read past end of
			// buffer in file .../show_help.c"), the notice lost (one test.sh
			// run in the cudaaware leg, 2026-12-05).
			aborted := strings.Contains(j.Output, "MPI_ABORT was invoked") || strings.Contains(j.Output, "calling MPI_Abort so that no rank hangs")
			if j.Err == nil && !aborted {
				t.Fatalf("the job succeeded with a node killed, and no rank aborted it; output:\n%s", j.Output)
			}
			if strings.Contains(j.Output, "want ErrTimeout or MPI") || strings.Contains(j.Output, "every collective passed") {
				t.Fatalf("a rank failed otherwise than by a timeout or MPI's failure; output:\n%s", j.Output)
			}
			// nodeB's ranks die of SIGKILL and print nothing: a Go runtime's
			// last words are a survivor's, dead of something else than the
			// drill (once, MPICH: Hydra's SIGUSR1 notice of nodeB's death
			// stopped rank 1's runtime, "non-Go code set up signal handler
			// without SA_ONSTACK flag", before it entered collective 3, and
			// rank 0 named it with 2 and 3).
			if m := runtimeDied.FindString(j.Output); m != "" {
				t.Errorf("a survivor's Go runtime died (%q), not of the drill; output:\n%s", m, j.Output)
			}
			named := map[int]bool{}
			for _, m := range survivorLine.FindAllStringSubmatch(j.Output, -1) {
				r, _ := strconv.Atoi(m[1])
				took, _ := strconv.ParseFloat(m[3], 64)
				named[r] = true
				switch {
				case m[2] != "nodeA" || nodeOf(r) != "nodeA":
					t.Errorf("rank %d on %s reported, but only nodeA survives", r, m[2])
				case !strings.Contains(m[4], "ranks that never arrived: 2, 3"):
					t.Errorf("rank %d's error does not name the missing ranks 2, 3: %s", r, m[4])
				case time.Duration(took*float64(time.Second)) > killTimeout+slack:
					t.Errorf("rank %d took %.1fs to fail, more than GPUCOMM_TIMEOUT %v + %v", r, took, killTimeout, slack)
				}
			}
			if !named[0] || !named[1] {
				t.Fatalf("want both ranks of nodeA (0 and 1) to report the failure, got %v; output:\n%s", named, j.Output)
			}
			if j.Elapsed > time.Minute {
				t.Errorf("the job ran %v after the node died", j.Elapsed)
			}
			t.Logf("job ended after %v:\n%s", j.Elapsed.Round(time.Millisecond), j.Output)
		})
	}
}

// launcherArgsEnv is nodes.sh's variable for more launcher options.
const launcherArgsEnv = "GPUCOMM_MULTINODE_LAUNCHER_ARGS"

func TestRankScenarioNodeKilled(t *testing.T) {
	mpitest.RankOnly(t)
	if mpitest.Scenario() != "node-killed" {
		t.Skip("ends the job on purpose: run by TestMultinodeWholeNodeKilledIsNamedBySurvivors")
	}
	backend := os.Getenv("GPUCOMM_NODEKILL_BACKEND")
	c, err := comm.Open(backend, comm.WithDevice("host")) // GPUCOMM_TIMEOUT sets the timeout
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	const n = 4096
	send, err := devmem.AllocSlice[float64](c.Device(), n)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := devmem.AllocSlice[float64](c.Device(), n)
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= 5; s++ {
		if err := errors.Join(send.CopyFrom(values(c.Rank()+10*s, n), nil), recv.CopyFrom(slices.Repeat([]float64{-1}, n), nil)); err != nil {
			t.Fatal(err)
		}
		if s == 3 && host == "nodeB" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		start := time.Now()
		err := comm.AllReduce(c, send, recv, comm.Sum, nil)
		if err != nil {
			// Straight to the job's output: testing's log dies with the process.
			fmt.Fprintf(os.Stderr, "rank %d on %s ended collective %d after %.2fs: %v\n", c.Rank(), host, s, time.Since(start).Seconds(), err)
			// MPI's own failure of a message to a dead rank is a *comm.Error
			// wrapping an *mpi.Error, not a bad argument.
			var me *mpi.Error
			if !errors.Is(err, comm.ErrTimeout) && (!errors.As(err, &me) || errors.Is(err, comm.ErrInvalidArgument)) {
				fmt.Fprintf(os.Stderr, "rank %d: want ErrTimeout or MPI's failure, got %v\n", c.Rank(), err)
			}
			// Close ends the job (MPI_Abort: the communicator is broken).
			// Under MPICH one survivor's message to nodeB can fail at once
			// while the other's fails only at its timeout: wait that long,
			// so that the first abort does not kill the other survivor
			// before it has reported.
			time.Sleep(time.Until(start.Add(killTimeout + time.Second)))
			c.Close()
			return
		}
		got, err := recv.ToHost(nil)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, n)
		for r := range c.Size() {
			for i, v := range values(r+10*s, n) {
				want[i] += v
			}
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("collective %d element %d: %v, want %v", s, i, got[i], want[i])
			}
		}
	}
	t.Errorf("rank %d on %s: every collective passed, but nodeB was to die in the third", c.Rank(), host)
	c.Close()
}
