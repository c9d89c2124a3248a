package mpitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// orphanGrace is how long a launcher may outlive every process it started
// before the watchdog ends it (a variable for the watchdog's own test).
var orphanGrace = 15 * time.Second

// watchLauncher waits for cmd (started) and returns whether the watchdog
// killed it, and cmd's Wait error. The watchdog kills a launcher that is
// still running orphanGrace after every process it started has ended: Debian's
// Open MPI 4.1.4 mpirun can deadlock in its own PMIx_server_finalize after a
// job ends (seen after MPI_Abort), with its ranks left as zombies it never
// reaps. Then the ranks' outcome is in their output, and the test judges it
// from there instead of waiting for the job's bound.
func watchLauncher(cmd *exec.Cmd) (orphaned bool, err error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	pid := cmd.Process.Pid
	var sawChildren bool
	var allEnded time.Time
	for {
		select {
		case err := <-done:
			return false, err
		case <-tick.C:
		}
		live, ended := children(pid)
		if live+ended > 0 {
			sawChildren = true
		}
		if !sawChildren || live > 0 {
			allEnded = time.Time{}
			continue
		}
		if allEnded.IsZero() {
			allEnded = time.Now()
		} else if time.Since(allEnded) > orphanGrace {
			select {
			case err := <-done: // it ended after all
				return false, err
			default:
			}
			cmd.Process.Kill()
			return true, <-done
		}
	}
}

// children counts the processes whose parent is pid: those still running
// and those ended but not reaped (zombies). It reads /proc; elsewhere it
// finds none, and the watchdog never fires.
func children(pid int) (live, ended int) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	want := strconv.Itoa(pid)
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 || fields[1] != want {
			continue
		}
		if fields[0] == "Z" || fields[0] == "X" {
			ended++
		} else {
			live++
		}
	}
	return live, ended
}
