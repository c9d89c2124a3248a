package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// A two-socket machine as NVML and sysfs would give it: node 0 has CPUs
// 0-7, node 1 CPUs 8-15; GPU 1 hangs off node 1.
var (
	twoSockets = numaLayout{
		CPUs: map[int][]int{0: {0, 1, 2, 3, 4, 5, 6, 7}, 1: {8, 9, 10, 11, 12, 13, 14, 15}},
		Dist: map[int][]int{0: {10, 21}, 1: {21, 10}},
	}
	gpuOnNode1 = devmem.TopoDevice{Index: 1, NUMANode: 1, CPUs: []int{8, 9, 10, 11, 12, 13, 14, 15}}
)

func TestBindingFarFromTheGPUIsAWarningWithTheDistance(t *testing.T) {
	f := bindingFinding([]int{2, 3}, 1, gpuOnNode1, twoSockets)
	if f.Level != levelWarn || !strings.Contains(f.Detail, "bound far from the GPU: this rank may run on CPUs 2-3, none of them near GPU 1 (NUMA node 1, CPUs 8-15)") ||
		!strings.Contains(f.Detail, "NUMA distance from the GPU's node node 0: 21 (local is 10)") || !strings.Contains(f.Fix, "numactl --cpunodebind=1") {
		t.Errorf("%+v", f)
	}
	// Without sysfs's distances the warning stands, without a distance.
	f = bindingFinding([]int{2, 3}, 1, gpuOnNode1, numaLayout{})
	if f.Level != levelWarn || strings.Contains(f.Detail, "distance") {
		t.Errorf("no distances: %+v", f)
	}
}

func TestBindingNearOrPartlyNearTheGPU(t *testing.T) {
	if f := bindingFinding([]int{9, 10}, 1, gpuOnNode1, twoSockets); f.Level != levelOK || !strings.Contains(f.Detail, "all of this rank's CPUs (9-10) are near GPU 1") {
		t.Errorf("near: %+v", f)
	}
	all := make([]int, 16)
	for i := range all {
		all[i] = i
	}
	if f := bindingFinding(all, 1, gpuOnNode1, twoSockets); f.Level != levelInfo || !strings.Contains(f.Detail, "8 of this rank's 16 CPUs (8-15) are near GPU 1") || f.Fix == "" {
		t.Errorf("unbound: %+v", f)
	}
	noAff := gpuOnNode1
	noAff.CPUs, noAff.NUMANode = nil, -1
	if f := bindingFinding([]int{2}, 1, noAff, twoSockets); f.Level != levelInfo || !strings.Contains(f.Detail, "NVML gives no CPU affinity") {
		t.Errorf("no affinity: %+v", f)
	}
}

// topoOf builds a topology of n GPUs whose pair links are given by link.
func topoOf(n int, link func(i, j int) devmem.Link) *devmem.Topo {
	t := &devmem.Topo{Links: make([][]devmem.Link, n)}
	for i := range n {
		t.Devices = append(t.Devices, devmem.TopoDevice{Index: i, NUMANode: -1})
		t.Links[i] = make([]devmem.Link, n)
		for j := range n {
			if i == j {
				t.Links[i][j] = devmem.Link{Path: devmem.PathSelf}
			} else {
				t.Links[i][j] = link(min(i, j), max(i, j))
			}
		}
	}
	return t
}

func TestLinkFindingsOfSyntheticNodes(t *testing.T) {
	// An HGX node: NVSwitch, 18 links every pair.
	fs := linkFindings(topoOf(8, func(i, j int) devmem.Link { return devmem.Link{Path: devmem.PathSys, NVLinks: 18} }))
	if len(fs) != 1 || fs[0].Level != levelOK || !strings.Contains(fs[0].Detail, "NVLink between every pair of this node's 8 GPUs (at least NV18 a pair)") {
		t.Errorf("NVSwitch node: %+v", fs)
	}
	// PCIe only: GPUs 0-1 under one switch, 2-3 under another, the two
	// halves on different sockets; 0-1 also have a bridge.
	fs = linkFindings(topoOf(4, func(i, j int) devmem.Link {
		switch {
		case i == 0 && j == 1:
			return devmem.Link{Path: devmem.PathPIX, NVLinks: 4}
		case i == 2 && j == 3:
			return devmem.Link{Path: devmem.PathPXB}
		}
		return devmem.Link{Path: devmem.PathSys}
	}))
	if len(fs) != 2 || fs[0].Level != levelInfo || fs[0].Detail != "peer access: no NVLink between GPU2-GPU3 PXB: peer copies go over PCIe" ||
		fs[1].Level != levelWarn || !strings.Contains(fs[1].Detail, "peer access unlikely between GPU0-GPU2 SYS, GPU0-GPU3 SYS, GPU1-GPU2 SYS, GPU1-GPU3 SYS:") || fs[1].Fix == "" {
		t.Errorf("PCIe node: %+v", fs)
	}
	if fs := linkFindings(topoOf(1, nil)); len(fs) != 1 || fs[0].Level != levelInfo {
		t.Errorf("one GPU: %+v", fs)
	}
}

func TestNCCLRuleOnePerGPU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend string
		gpus    []int64
		visible int
		level   string
		want    string
	}{
		{"own GPUs", "mpi", []int64{11, 22, 33}, 3, levelOK, "allows the nccl backend: the node's 3 ranks each use a GPU of their own"},
		{"shared, mpi", "mpi", []int64{11, 22, 11, 22}, 2, levelWarn, "does not allow the nccl backend: local ranks 0 and 2, local ranks 1 and 3 use one GPU"},
		{"shared, nccl", "nccl", []int64{11, 11}, 1, levelError, "local ranks 0 and 1 use one GPU"},
		{"host, no GPU", "mpi", []int64{0, 0}, 0, levelInfo, "no GPU is visible here"},
		{"host, too few GPUs", "mpi", []int64{0, 0, 0}, 2, levelWarn, "3 ranks on this node, 2 GPUs"},
		{"host, enough GPUs", "mpi", []int64{0, 0}, 2, levelOK, "2 ranks on this node, 2 GPUs, one rank a GPU"},
	} {
		f := ncclFinding(tc.backend, tc.gpus, tc.visible)
		if f.Area != "nccl" || f.Level != tc.level || !strings.Contains(f.Detail, tc.want) || (tc.level == levelWarn || tc.level == levelError) && f.Fix == "" {
			t.Errorf("%s: %+v; want %s %q", tc.name, f, tc.level, tc.want)
		}
	}
}

// Without NVML (this machine, the host device) the topology findings are
// "unknown (no NVML)" info lines and no error; the IPC check runs for real
// on the host device, whose memory is shared.
func TestProbeNodeOnTheHostDevice(t *testing.T) {
	if _, err := devmem.Topology(); !errors.Is(err, devmem.ErrLibraryNotFound) {
		t.Skipf("NVML is here (%v): the no-NVML degradation is not what runs", err)
	}
	cs, err := local.NewGroup(3)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	var p probeReport
	runProbe(&p, "local", cs, 30*time.Second)
	if p.failed() {
		t.Fatalf("probe failed: %+v", p)
	}
	want := []string{
		"its NUMA distance from the GPU is unknown (no NVML)",
		"peer access and NVLink between this node's GPUs: unknown (no NVML)",
		"IPC: local rank 0's buffer opened by the node's 3 ranks through IPC handles on host",
	}
	for _, w := range want {
		found := false
		for _, f := range p.Findings {
			if strings.Contains(f.Detail, w) {
				found = true
				if f.Level == levelError || f.Level == levelWarn {
					t.Errorf("%q is %s", w, f.Level)
				}
			}
		}
		if !found {
			t.Errorf("no finding %q in %+v", w, p.Findings)
		}
	}
}

// A local rank that never joins the IPC check makes it an error naming the
// bound, not a hang.
func TestProbeIPCIsBounded(t *testing.T) {
	cs, err := local.NewGroup(3)
	if err != nil {
		t.Fatal(err)
	}
	fs := probeIPC("local", cs[:2], 0, 300*time.Millisecond)
	if len(fs) != 1 || fs[0].Level != levelError || !strings.Contains(fs[0].Detail, "IPC check did not finish within 300ms") {
		t.Errorf("%+v", fs)
	}
}

// Under this binary's launcher (-tags mpi: Open MPI, -tags mpich: MPICH),
// with 2 and 4 ranks on the host device: every rank opens local rank 0's
// buffer through an IPC handle and checks its content, and rank 0's JSON
// says so, with the topology's findings "unknown (no NVML)".
func TestProbeIPCUnderLauncher(t *testing.T) {
	bin := launcherCommand(t)
	for _, np := range []int{2, 4} {
		path, args, err := mpitest.Launcher(np)
		if err != nil {
			t.Skip(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, path, append(args, bin, "check", "-backend", "mpi", "-probe-only", "-json", "-timeout", "20s")...)
		cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND=")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("%d ranks: %v\nstdout:\n%s\nstderr:\n%s", np, err, stdout.String(), stderr.String())
		}
		var p probeReport
		if err := json.Unmarshal([]byte(stdout.String()), &p); err != nil {
			t.Fatalf("%d ranks: stdout is not the probe's JSON: %v\n%s", np, err, stdout.String())
		}
		var ipc, nccl, numa bool
		for _, f := range p.Findings {
			switch {
			case f.Level == levelOK && strings.Contains(f.Detail, "IPC: local rank 0's buffer opened by the node's "+string(rune('0'+np))+" ranks"):
				ipc = true
			case f.Area == "nccl":
				nccl = true
			case f.Level == levelInfo && strings.Contains(f.Detail, "unknown (no NVML)"):
				numa = true
			}
		}
		if !ipc || !nccl || (!numa && errors.Is(topoErr(), devmem.ErrLibraryNotFound)) {
			t.Errorf("%d ranks: ipc %v, nccl rule %v, no-NVML lines %v in\n%s\nstderr:\n%s", np, ipc, nccl, numa, stdout.String(), stderr.String())
		}
	}
}

func topoErr() error {
	_, err := devmem.Topology()
	return err
}
