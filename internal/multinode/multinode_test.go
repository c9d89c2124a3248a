package multinode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpi"
)

// Each node is its own host: its hostname, its /etc/hosts naming every
// node, its own boot_id and machine-id (not the machine's), only its own
// interfaces in /sys, and a /dev/shm its processes share with each other
// and with no other node. A second up with the same N changes nothing, one
// with another N is refused, and after the test's cleanup nothing is left:
// no state directory, no mount, no process that ran in a node.
func TestNodesAreDistinctHostsAndLeaveNothingBehind(t *testing.T) {
	var dir string
	var sleeper int
	t.Run("Up", func(t *testing.T) {
		nodes := Up(t, 2)
		dir = nodes.Dir
		hostBoot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]string{}
		for i, name := range nodes.Names() {
			out, err := nodes.Exec(t, name, "sh", "-c",
				`hostname; cat /etc/hostname /proc/sys/kernel/random/boot_id /etc/machine-id; ls /sys/class/net | tr '\n' ' '; echo; getent hosts nodeA nodeB | tr -s ' \t' ' ' | tr '\n' ';'; echo`)
			if err != nil {
				t.Fatalf("exec on %s: %v\n%s", name, err, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 6 {
				t.Fatalf("%s: want 6 lines, got:\n%s", name, out)
			}
			if lines[0] != name || lines[1] != name {
				t.Errorf("%s: hostname %q, /etc/hostname %q", name, lines[0], lines[1])
			}
			if lines[2] == strings.TrimSpace(string(hostBoot)) || seen[lines[2]] != "" {
				t.Errorf("%s: boot_id %s is the machine's or another node's (%q)", name, lines[2], seen[lines[2]])
			}
			seen[lines[2]] = name
			if len(lines[3]) != 32 || seen[lines[3]] != "" {
				t.Errorf("%s: machine-id %q is not 32 hex digits of its own", name, lines[3])
			}
			seen[lines[3]] = name
			if lines[4] != "eth0 lo " {
				t.Errorf("%s: /sys/class/net lists %q, want only eth0 and lo", name, lines[4])
			}
			if want := "10.99.0.1 nodeA;10.99.0.2 nodeB;"; lines[5] != want {
				t.Errorf("%s: hosts resolve as %q, want %q", name, lines[5], want)
			}
			if name != Name(i) {
				t.Errorf("Names()[%d] = %s, Name(%d) = %s", i, name, i, Name(i))
			}
		}
		if out, err := nodes.Exec(t, "nodeA", "sh", "-c", "echo a > /dev/shm/gpucomm-multinode-test"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if out, err := nodes.Exec(t, "nodeA", "cat", "/dev/shm/gpucomm-multinode-test"); err != nil || out != "a\n" {
			t.Errorf("a second process on nodeA does not see nodeA's /dev/shm file: %v %q", err, out)
		}
		if out, err := nodes.Exec(t, "nodeB", "ls", "/dev/shm"); err != nil || out != "" {
			t.Errorf("nodeB's /dev/shm holds %q (%v), want it empty", out, err)
		}
		if _, err := os.Stat("/dev/shm/gpucomm-multinode-test"); err == nil {
			t.Errorf("nodeA's /dev/shm file shows in the machine's /dev/shm")
		}
		if out, err := nodes.script("up", "2").CombinedOutput(); err != nil || !strings.Contains(string(out), "already up") {
			t.Errorf("a second up 2: %v\n%s", err, out)
		}
		if out, err := nodes.script("up", "3").CombinedOutput(); err == nil || !strings.Contains(string(out), "2 nodes are up") {
			t.Errorf("up 3 over 2 nodes: %v; want a refusal naming the 2 nodes up\n%s", err, out)
		}
		if out, err := nodes.Exec(t, "nodeC", "true"); err == nil || !strings.Contains(out, "no node nodeC") {
			t.Errorf("exec on nodeC of 2 nodes: %v %q; want a refusal naming it", err, out)
		}
		// A process left running in a node is ended by the cleanup.
		cmd := exec.Command(filepath.Join(nodes.scripts, "nodes.sh"), "exec", "nodeB", "sleep", "600")
		cmd.Env = append(os.Environ(), nodes.Env()...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sleeper = cmd.Process.Pid
		go cmd.Wait()
		time.Sleep(300 * time.Millisecond)
	})
	if dir == "" {
		return // skipped
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s still there after down: %v", dir, err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), dir) {
		t.Errorf("mounts under %s left after down", dir)
	}
	time.Sleep(100 * time.Millisecond)
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(sleeper) + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
		t.Errorf("the process left running on nodeB (pid %d) still runs after down", sleeper)
	}
}

// Each family's launcher places the ranks by node, filling nodeA first, and
// the launcher's own local rank restarts on each node.
func TestLaunchPlacesRanksByNode(t *testing.T) {
	nodes := Up(t, 2)
	for _, c := range []struct{ family, rank, local string }{
		{OpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
		{MPICH, "PMI_RANK", "MPI_LOCALRANKID"},
	} {
		t.Run(c.family, func(t *testing.T) {
			j := nodes.Launch(t, c.family, 2, time.Minute, []string{"GPUCOMM_MULTINODE_PROBE=passed-on"},
				"sh", "-c", `echo "rank $`+c.rank+` local $`+c.local+` on $(hostname) $GPUCOMM_MULTINODE_PROBE"`)
			if j.Err != nil {
				t.Fatalf("%v\n%s", j.Err, j.Output)
			}
			var got []string
			for _, l := range strings.Split(j.Output, "\n") {
				if strings.HasPrefix(l, "rank ") {
					got = append(got, l)
				}
			}
			slices.Sort(got)
			want := []string{
				"rank 0 local 0 on nodeA passed-on", "rank 1 local 1 on nodeA passed-on",
				"rank 2 local 0 on nodeB passed-on", "rank 3 local 1 on nodeB passed-on",
			}
			if !slices.Equal(got, want) {
				t.Errorf("ranks say\n%s\nwant\n%s\nfull output:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), j.Output)
			}
		})
	}
}

// The launcher gets the options of GPUCOMM_MULTINODE_LAUNCHER_ARGS (here
// one that sets a variable in every rank), and MPICH's ranks get
// GPUCOMM_MPI_FINALIZE_BOUND=5s unless it is set (Open MPI's none).
func TestLaunchTakesMoreOptionsAndBoundsMPICHFinalize(t *testing.T) {
	nodes := Up(t, 2)
	for _, c := range []struct{ family, args, bound string }{
		{OpenMPI, "-x GPUCOMM_MULTINODE_MARK=from-args", ""},
		{MPICH, "-genv GPUCOMM_MULTINODE_MARK from-args", "5s"},
	} {
		t.Run(c.family, func(t *testing.T) {
			t.Setenv("GPUCOMM_MPI_FINALIZE_BOUND", "") // as where CI runs: unset
			os.Unsetenv("GPUCOMM_MPI_FINALIZE_BOUND")
			os.Unsetenv("GPUCOMM_MULTINODE_MARK")
			j := nodes.Launch(t, c.family, 2, time.Minute, []string{"GPUCOMM_MULTINODE_LAUNCHER_ARGS=" + c.args},
				"sh", "-c", `echo "on $(hostname): mark=$GPUCOMM_MULTINODE_MARK bound=$GPUCOMM_MPI_FINALIZE_BOUND"`)
			if j.Err != nil {
				t.Fatalf("%v\n%s", j.Err, j.Output)
			}
			for _, node := range []string{"nodeA", "nodeB"} {
				want := fmt.Sprintf("on %s: mark=from-args bound=%s\n", node, c.bound)
				if n := strings.Count(j.Output, want); n != 2 {
					t.Errorf("%d ranks said %q, want 2; output:\n%s", n, want, j.Output)
				}
			}
		})
	}
}

// Where the harness cannot run it says why, and nodes.sh exits 77 (the
// skip status) instead of failing half-way: here as a user who is not root.
func TestWithoutRootTheScriptSaysWhyAndSkips(t *testing.T) {
	if os.Getuid() != 0 {
		if why := Available(); why == "" || !strings.Contains(why, "root") {
			t.Errorf("Available() as uid %d = %q; want a reason naming root", os.Getuid(), why)
		}
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv to drop root with")
	}
	dir, err := ScriptDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"available"}, {"up", "2"}} {
		cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", filepath.Join(dir, "nodes.sh")}, args...)...)
		cmd.Env = append(os.Environ(), DirEnv+"="+t.TempDir()+"/nodes")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != skipStatus || !strings.HasPrefix(string(out), "SKIP: ") || !strings.Contains(string(out), "needs root") {
			t.Errorf("nodes.sh %v as nobody: %v\n%s\nwant exit 77 and a SKIP line saying it needs root", args, err, out)
		}
	}
}

// A job whose work is done but which does not end is ended FinalizeGrace
// later, on every node, and says so; one that ends by itself is left alone.
func TestLaunchUntilEndsAJobThatLingersAfterItsWork(t *testing.T) {
	nodes := Up(t, 2)
	defer func(g time.Duration) { finalizeGrace = g }(finalizeGrace)
	finalizeGrace = 2 * time.Second
	done := func(out string) bool { return strings.Count(out, "work done") == 2 }
	for _, family := range []string{OpenMPI, MPICH} {
		t.Run(family, func(t *testing.T) {
			j := nodes.LaunchUntil(t, family, 1, time.Minute, done, nil, "sh", "-c", "echo work done; exec sleep 300")
			if !j.Lingered || j.Err == nil || j.Elapsed > 40*time.Second || strings.Count(j.Output, "work done") != 2 {
				t.Errorf("lingering job: Lingered %v, Err %v, after %v; want it ended soon after its work, with an error\n%s", j.Lingered, j.Err, j.Elapsed, j.Output)
			}
			time.Sleep(time.Second)
			if out, _ := nodes.script("status").CombinedOutput(); !strings.Contains(string(out), "processes in the nodes: 0") {
				t.Errorf("processes left in the nodes after the job was ended:\n%s", out)
			}
			j = nodes.LaunchUntil(t, family, 1, time.Minute, done, nil, "sh", "-c", "echo work done")
			if j.Lingered || j.Err != nil {
				t.Errorf("a job that ends: Lingered %v, Err %v\n%s", j.Lingered, j.Err, j.Output)
			}
			if family != MPICH {
				return
			}
			// Status 1 after the work, with a rank ended by the finalize
			// bound and Hydra's provisional-status line (printed here by the
			// job itself): the output decides. Without the bound's line, or
			// with another status, the failure stands.
			for _, c := range []struct {
				script string
				judged bool
			}{
				{"echo work done; echo 'gpucomm: rank 0: " + mpi.FinalizeLeftLine + " 5s'; echo '" + mpi.HydraProvisionalStatus + "'; exit 1", true},
				{"echo work done; echo '" + mpi.HydraProvisionalStatus + "'; exit 1", false},
				{"echo work done; echo 'gpucomm: rank 0: " + mpi.FinalizeLeftLine + " 5s'; echo '" + mpi.HydraProvisionalStatus + "'; exit 2", false},
			} {
				j = nodes.LaunchUntil(t, family, 1, time.Minute, done, nil, "sh", "-c", c.script)
				if j.Err == nil || j.Lingered != c.judged {
					t.Errorf("job %q: Lingered %v, Err %v; want an error and Lingered %v\n%s", c.script, j.Lingered, j.Err, c.judged, j.Output)
				}
			}
		})
	}
}
