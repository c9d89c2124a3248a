package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

func init() { infoSections = append(infoSections, writePlacement) }

// placement is where this process may run: the CPUs its affinity mask
// allows (what a launcher's binding left it), the machine's online CPUs,
// the Go runtime's share, and its node-local rank and GPU.
type placement struct {
	CPUs      int // CPUs this process may run on
	Online    int // CPUs online on the machine; 0 when unknown
	Procs     int // GOMAXPROCS
	LocalRank int // -1 outside a launcher
	GPUs      int // CUDA devices visible
}

func readPlacement() placement {
	p := placement{CPUs: runtime.NumCPU(), Procs: runtime.GOMAXPROCS(0), LocalRank: -1}
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		p.Online = countCPUList(strings.TrimSpace(string(b)))
	}
	if r, ok := mpi.LocalRankFromEnv(); ok {
		p.LocalRank = r
	}
	if n, err := devmem.CUDADeviceCount(); err == nil {
		p.GPUs = n
	}
	return p
}

// countCPUList counts the CPUs of a kernel CPU list such as "0-3,8,10-11";
// 0 when it cannot be read.
func countCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// warning says what is wrong with the placement for GPU work, or "".
// A rank bound to one CPU runs its Go runtime, CUDA's driver threads and
// MPI's polling on that CPU, and every synchronisation waits for a turn.
func (p placement) warning() string {
	if p.CPUs != 1 || p.Online == 1 {
		return ""
	}
	return fmt.Sprintf("this process may run on 1 of the machine's %d CPUs (bound by the launcher): "+
		"its Go runtime, CUDA's threads and MPI's progress share that one, which slows every staged or stream-ordered transfer; "+
		"launch with mpirun --bind-to none or --map-by slot:PE=4 (Open MPI), or mpiexec -bind-to none (MPICH)", p.Online)
}

func writePlacement(w io.Writer) error {
	p := readPlacement()
	online := "unknown"
	if p.Online > 0 {
		online = strconv.Itoa(p.Online)
	}
	lr := "none (not under a launcher)"
	gpu := ""
	if p.LocalRank >= 0 {
		lr = strconv.Itoa(p.LocalRank)
		if p.GPUs > 0 {
			gpu = fmt.Sprintf(", GPU %d of %d by local rank", p.LocalRank%p.GPUs, p.GPUs)
		}
	}
	if _, err := fmt.Fprintf(w, "Placement: %d of %s CPUs usable, GOMAXPROCS %d, local rank %s%s\n",
		p.CPUs, online, p.Procs, lr, gpu); err != nil {
		return err
	}
	if msg := p.warning(); msg != "" {
		_, err := fmt.Fprintf(w, "  warning: %s\n", msg)
		return err
	}
	return nil
}

// warnPlacement tells the first rank of each node when the launcher bound
// it to one CPU, before a command that moves data.
func warnPlacement(cmd string, stderr io.Writer) {
	p := readPlacement()
	if msg := p.warning(); msg != "" && p.LocalRank <= 0 {
		fmt.Fprintf(stderr, "gpucomm %s: warning: %s\n", cmd, msg)
	}
}
