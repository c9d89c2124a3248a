package multinode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpi"
)

// Environment variables of the harness.
const (
	// EnableEnv must be "1" for Up to make nodes: they need root, and they
	// are a CI phase of their own (scripts/multinode/ci.sh).
	EnableEnv = "GPUCOMM_MULTINODE"
	// DirEnv is the state directory of a set of nodes, for nodes.sh and the
	// launchers in scripts/multinode.
	DirEnv = "GPUCOMM_MULTINODE_DIR"
	// ScriptsEnv names the scripts/multinode directory, where this source
	// tree's is not the one to use.
	ScriptsEnv = "GPUCOMM_MULTINODE_SCRIPTS"
	// launcherEnv is internal/mpicomm/mpitest's LauncherEnv (a test helper
	// package this one must not import).
	launcherEnv = "GPUCOMM_MPIRUN"
)

// Families of launchers Launch runs, as internal/mpi.Family names them.
const (
	OpenMPI = "openmpi"
	MPICH   = "mpich"
)

// skipStatus is what nodes.sh exits with where it cannot run.
const skipStatus = 77

// ScriptDir is the directory that holds nodes.sh: ScriptsEnv, else
// scripts/multinode of the source tree this package was built from.
func ScriptDir() (string, error) {
	dir := os.Getenv(ScriptsEnv)
	if dir == "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			return "", errors.New("cannot tell where the source tree is: set " + ScriptsEnv)
		}
		dir = filepath.Join(filepath.Dir(file), "..", "..", "scripts", "multinode")
	}
	if _, err := os.Stat(filepath.Join(dir, "nodes.sh")); err != nil {
		return "", fmt.Errorf("no nodes.sh in %s (set %s to scripts/multinode): %w", dir, ScriptsEnv, err)
	}
	return filepath.Clean(dir), nil
}

// Available returns why simulated nodes cannot be made here (not root, a
// capability or command missing), or "" when they can. It makes nothing.
func Available() string {
	dir, err := ScriptDir()
	if err != nil {
		return err.Error()
	}
	out, err := exec.Command(filepath.Join(dir, "nodes.sh"), "available").CombinedOutput()
	if err != nil {
		return strings.TrimPrefix(strings.TrimSpace(string(out)), "SKIP: ") + exitNote(err)
	}
	return ""
}

func exitNote(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == skipStatus {
		return ""
	}
	return fmt.Sprintf(" (%v)", err)
}

// Nodes is a set of simulated nodes that Up brought up.
type Nodes struct {
	// N is the number of nodes.
	N int
	// Dir is their state directory (DirEnv).
	Dir     string
	scripts string
}

var upCount atomic.Int64

// Up brings n nodes up for t in a state directory of their own and
// registers their teardown with t.Cleanup. It skips t unless EnableEnv is
// "1" and the machine allows it (Available), and fails t when nodes.sh up
// fails.
func Up(t testing.TB, n int) *Nodes {
	t.Helper()
	if os.Getenv(EnableEnv) != "1" {
		t.Skipf("simulated nodes: set %s=1 to run (needs root: makes network namespaces; scripts/multinode/ci.sh does)", EnableEnv)
	}
	if why := Available(); why != "" {
		t.Skip("simulated nodes unavailable: " + why)
	}
	if n < 1 || n > 26 {
		t.Fatalf("multinode.Up: %d nodes; 1 to 26 can be made", n)
	}
	scripts, err := ScriptDir()
	if err != nil {
		t.Fatal(err)
	}
	base := "/run"
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		base = os.TempDir()
	}
	nodes := &Nodes{N: n, scripts: scripts,
		Dir: filepath.Join(base, fmt.Sprintf("gpucomm-multinode-%d-%d", os.Getpid(), upCount.Add(1)))}
	t.Cleanup(func() {
		if out, err := nodes.script("down").CombinedOutput(); err != nil {
			t.Errorf("nodes.sh down: %v\n%s", err, out)
		}
	})
	start := time.Now()
	out, err := nodes.script("up", strconv.Itoa(n)).CombinedOutput()
	if err != nil {
		t.Fatalf("nodes.sh up %d: %v\n%s", n, err, out)
	}
	t.Logf("%d simulated nodes up in %v (%s)", n, time.Since(start).Round(time.Millisecond), nodes.Dir)
	return nodes
}

// script is nodes.sh with args, on these nodes.
func (n *Nodes) script(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(n.scripts, "nodes.sh"), args...)
	cmd.Env = append(os.Environ(), n.Env()...)
	return cmd
}

// Env is what a command needs in its environment to reach these nodes
// through the scripts in scripts/multinode.
func (n *Nodes) Env() []string { return []string{DirEnv + "=" + n.Dir} }

// Name is the i-th node's name: nodeA, nodeB, ...
func Name(i int) string { return "node" + string(rune('A'+i)) }

// Addr is the i-th node's address on the nodes' bridge.
func Addr(i int) string { return fmt.Sprintf("10.99.0.%d", i+1) }

// Names lists the nodes' names.
func (n *Nodes) Names() []string {
	names := make([]string, n.N)
	for i := range names {
		names[i] = Name(i)
	}
	return names
}

// Exec runs argv on node (a name from Names) with this process's
// environment and returns its combined output.
func (n *Nodes) Exec(t testing.TB, node string, argv ...string) (string, error) {
	t.Helper()
	out, err := n.script(append([]string{"exec", node}, argv...)...).CombinedOutput()
	return string(out), err
}

// Job is the outcome of a job Launch ran.
type Job struct {
	// Output holds every rank's output and the launcher's, interleaved.
	Output string
	// Err is the launcher's exit error (an *exec.ExitError for a failure
	// status), or says that the job was killed at its bound.
	Err     error
	Elapsed time.Duration
	// Lingered: LaunchUntil's done said the work was over, and the job was
	// ended FinalizeGrace later, or (MPICH) a rank ended by the finalize
	// bound made Hydra report status 1 whatever the ranks' statuses: the
	// output decides.
	Lingered bool
}

// syncBuffer is a bytes.Buffer that the watchdog reads while the job writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Launch runs argv on perNode ranks on each node under family's launcher
// (OpenMPI or MPICH), with env added to this process's environment (Open
// MPI passes GPUCOMM_*, GO*, UCX_* and a few other variables to the ranks
// on the other nodes, MPICH's Hydra the whole environment). A job still
// running after limit gets SIGTERM, then SIGKILL 10 s later, and its Err
// says so. It skips t when the family's launcher is not installed.
func (n *Nodes) Launch(t testing.TB, family string, perNode int, limit time.Duration, env []string, argv ...string) Job {
	t.Helper()
	return n.LaunchUntil(t, family, perNode, limit, nil, env, argv...)
}

// FinalizeGrace is how long LaunchUntil lets a job run once its output says
// that its work is done.
const FinalizeGrace = 20 * time.Second

var finalizeGrace = FinalizeGrace // shorter in this package's tests

// LaunchUntil is Launch with a watchdog for a job that finishes its work but
// never ends: once done(output so far) is true, the job has FinalizeGrace
// to end, then it gets SIGTERM and Job.Lingered is set. Debian's MPICH 4.0.2
// (ch4:ucx, UCX 1.13) leaves a rank in MPI_Finalize now and then between
// nodes (one rank spinning in ucp_worker_progress, the others waiting in the
// PMI barrier); the test then judges the job by its output and says so. A
// nil done is Launch. nodes.sh now gives MPICH jobs
// GPUCOMM_MPI_FINALIZE_BOUND=5s, which ends such a rank first with its own
// status (internal/mpi): the grace is the second line.
func (n *Nodes) LaunchUntil(t testing.TB, family string, perNode int, limit time.Duration, done func(output string) bool, env []string, argv ...string) Job {
	t.Helper()
	if family != OpenMPI && family != MPICH {
		t.Fatalf("multinode.Launch: family %q; want %q or %q", family, OpenMPI, MPICH)
	}
	if perNode < 1 || len(argv) == 0 {
		t.Fatalf("multinode.Launch: %d ranks a node, command %q: want at least one of each", perNode, argv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.scripts, "nodes.sh"),
		append([]string{"launch-" + family, strconv.Itoa(perNode)}, argv...)...)
	cmd.Env = append(append(os.Environ(), n.Env()...), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	cmd.Env = append(cmd.Env, env...)
	// nodes.sh execs into the launcher: SIGTERM reaches mpirun/mpiexec,
	// which ends its ranks on every node.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	var lingered atomic.Bool
	err := cmd.Start()
	if err == nil {
		stop := make(chan struct{})
		if done != nil {
			go func() {
				tick := time.NewTicker(250 * time.Millisecond)
				defer tick.Stop()
				var since time.Time
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					switch {
					case since.IsZero() && done(out.String()):
						since = time.Now()
					case !since.IsZero() && time.Since(since) > finalizeGrace:
						lingered.Store(true)
						cmd.Process.Signal(syscall.SIGTERM)
						return
					}
				}
			}()
		}
		err = cmd.Wait()
		close(stop)
	}
	j := Job{Output: out.String(), Err: err, Elapsed: time.Since(start), Lingered: lingered.Load()}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == skipStatus && strings.HasPrefix(j.Output, "SKIP: ") {
		t.Skip(strings.TrimSpace(strings.TrimPrefix(j.Output, "SKIP: ")))
	}
	switch {
	case ctx.Err() != nil:
		j.Err = fmt.Errorf("killed after %v, the bound for this job: %w (%v)", limit, ctx.Err(), err)
	case j.Lingered:
		j.Err = fmt.Errorf("still running %v after its output said it was done, ended: %w", finalizeGrace, err)
		t.Logf("%s: the job was still running %v after its work was done, and was ended (a rank left in MPI_Finalize, as Debian's MPICH 4.0.2 + UCX does now and then); its output decides", family, finalizeGrace)
	case done != nil && done(j.Output) && mpi.HydraFinalizeBounded(family, j.Output, err):
		// A rank the finalize bound ended closed its PMI connection
		// before PMI's finalize: Hydra 4.0.2's proxy gives it status 1
		// until it reaps it, and keeps the 1 when it reads the close
		// after the reaping, whatever status the rank ended with; or
		// mpiexec writes to the closed connection and dies of SIGPIPE.
		j.Lingered = true
		j.Err = fmt.Errorf("after its work was done, Hydra failed as it does when a rank ended with MPI_Finalize unfinished (GPUCOMM_MPI_FINALIZE_BOUND): %w", err)
		t.Logf("%s: a rank ended with MPI_Finalize unfinished after the job's work was done, and Hydra reported its provisional status 1 or died of SIGPIPE (%v); its output decides", family, err)
	}
	t.Logf("%s, %d nodes × %d ranks: %v", family, n.N, perNode, j.Elapsed.Round(time.Millisecond))
	return j
}

// LauncherPath is the launcher with mpirun's command line ("[options] -np
// NP CMD...") that starts family's jobs across the nodes, NP/N ranks a node
// rounded up, filling nodeA first; it needs Env in its environment.
func (n *Nodes) LauncherPath(family string) string {
	name := map[string]string{OpenMPI: "mpirun-openmpi", MPICH: "mpiexec-mpich"}[family]
	if name == "" {
		return ""
	}
	return filepath.Join(n.scripts, name)
}

// UseForMPITests makes internal/mpicomm/mpitest's launches in t (RunRanks,
// CheckCommand, ...) run across these nodes with family's launcher: it sets
// GPUCOMM_MPIRUN and DirEnv for the rest of t.
func (n *Nodes) UseForMPITests(t testing.TB, family string) {
	t.Helper()
	p := n.LauncherPath(family)
	if p == "" {
		t.Fatalf("multinode.UseForMPITests: family %q; want %q or %q", family, OpenMPI, MPICH)
	}
	t.Setenv(launcherEnv, p)
	t.Setenv(DirEnv, n.Dir)
}
