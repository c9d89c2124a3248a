package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

// onDevice is a local communicator that says its device is d: what
// probeTopo asks of a rank (its device and its local rank).
type onDevice struct {
	comm.Communicator
	d *devmem.Device
}

func (c onDevice) Device() *devmem.Device { return c.d }

// With NVML and a GPU (GPUCOMM_GPU_TESTS=1): the binding finding of a rank
// on GPU 0 is the one the affinity mask and NVML's cores give, and local
// rank 0 describes the links of every pair of the node's GPUs.
func TestProbeTopologyOnGPU(t *testing.T) {
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		t.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU")
	}
	topo, err := devmem.Topology()
	if err != nil {
		t.Fatalf("NVML: %v", err)
	}
	d, err := devmem.Open("cuda:0", 0)
	if err != nil {
		t.Fatalf("cuda:0: %v", err)
	}
	td, err := topo.DeviceOf(d)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := local.NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer cs[0].Close()
	var p probeReport
	probeTopo(&p, onDevice{cs[0], d})
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	near := 0
	for _, c := range allowed {
		if slices.Contains(td.CPUs, c) {
			near++
		}
	}
	want := levelInfo
	switch {
	case len(td.CPUs) > 0 && near == 0:
		want = levelWarn
	case len(td.CPUs) > 0 && near == len(allowed):
		want = levelOK
	}
	var binding, links int
	for _, f := range p.Findings {
		t.Logf("%s %s %s -> %s", f.Area, f.Level, f.Detail, f.Fix)
		if f.Level == levelError {
			t.Errorf("error finding: %+v", f)
		}
		if strings.Contains(f.Detail, "GPU 0") && (strings.Contains(f.Detail, "CPU binding") || strings.Contains(f.Detail, "bound far")) {
			binding++
			if f.Level != want {
				t.Errorf("binding %s, want %s (%d of %d allowed CPUs near GPU 0's %s)", f.Level, want, near, len(allowed), devmem.FormatCPUList(td.CPUs))
			}
		}
		if strings.HasPrefix(f.Detail, "peer access") {
			links++
		}
	}
	if binding != 1 || links == 0 {
		t.Errorf("%d binding findings (want 1), %d peer-access findings (want some)", binding, links)
	}
	if n := len(topo.Devices); n > 1 {
		all := linkFindings(topo)
		if len(all) == 0 || len(all) > 2 {
			t.Errorf("%d GPUs: %+v", n, all)
		}
	}
}
