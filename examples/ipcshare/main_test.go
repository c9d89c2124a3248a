package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

func TestHelpExitsZeroAndPrintsUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-h"}, &out, &errb); code != 0 {
		t.Fatalf("ipcshare -h exited %d, want 0 (asking for the usage is no failure); stderr: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "-np") {
		t.Fatalf("ipcshare -h printed no usage naming -np: %q", errb.String())
	}
}

func TestThreeInProcessRanksFillBothVectorsExactly(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-np", "3", "-n", "500"}, &out, &errb); code != 0 {
		t.Fatalf("ipcshare -np 3 exited %d; stderr: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), ": matches") || !strings.Contains(out.String(), "3 rank(s) wrote 1611 elements") {
		t.Fatalf("want one line saying 3 ranks wrote 500+537+574 = 1611 elements and matches, got %q", out.String())
	}
}

func TestBadFlagExitsTwo(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-n", "-4"}, &out, &errb); code != 2 {
		t.Fatalf("ipcshare -n -4 exited %d, want 2", code)
	}
}

func TestSevenRanksOnThreeSimulatedNodesCheckEachNodeAndTheJob(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-np", "7", "-nodes", "3", "-n", "100"}, &out, &errb); code != 0 {
		t.Fatalf("ipcshare -np 7 -nodes 3 exited %d; stderr: %s", code, errb.String())
	}
	// Node k holds ranks [7k/3, 7(k+1)/3): {0,1,2}, {3,4}, {5,6}; rank r
	// writes 100+37r elements, so the nodes hold 411, 459 and 607.
	for _, want := range []string{
		"simulated node 0: 3 rank(s) wrote 411 elements (ranks [0 1 2], counts [100 137 174])",
		"simulated node 1: 2 rank(s) wrote 459 elements (ranks [3 4], counts [211 248])",
		"simulated node 2: 2 rank(s) wrote 607 elements (ranks [5 6], counts [285 322])",
		"job: 3 node(s), 7 rank(s), 1477 of 1477 elements",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if got := strings.Count(out.String(), ": matches\n"); got != 4 {
		t.Errorf("%d lines say matches, want 4 (3 nodes and the job):\n%s", got, out.String())
	}
	// The job's u·v is the formula's over all 1477 elements, computed here
	// independently of the program.
	var want float64
	for g := range 1477 {
		want += float64(g%7+1) * float64(g%5+1) / 4
	}
	if line := fmt.Sprintf("u·v = %g, expected %g: matches", want, want); !strings.Contains(out.String(), "1477 of 1477 elements: "+line) {
		t.Errorf("the job's line does not say %q:\n%s", line, out.String())
	}
}

func TestMoreNodesThanRanksIsAUsageError(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-np", "2", "-nodes", "3"}, &out, &errb); code != 2 {
		t.Fatalf("ipcshare -np 2 -nodes 3 exited %d, want 2", code)
	}
	if !strings.Contains(errb.String(), "more nodes than the 2 ranks") || out.Len() != 0 {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}
}

// A node root's check must catch a wrong element and a wrong product: one
// element of u is overwritten after the rank wrote it.
func TestNodeCheckCatchesAWrongElement(t *testing.T) {
	cs, err := local.NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer cs[0].Close()
	nc := comm.NodeComm(cs[0])
	u, err := devmem.NewNodeSharedSlice[float64](nc, 50)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	v, err := devmem.NewNodeSharedSlice[float64](nc, 50)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	us, vs := make([]float64, 50), make([]float64, 50)
	for g := range 50 {
		us[g], vs[g] = uAt(int64(g)), vAt(int64(g))
	}
	var out bytes.Buffer
	if err := errors.Join(u.Mine().CopyFrom(us, nil), v.Mine().CopyFrom(vs, nil)); err != nil {
		t.Fatal(err)
	}
	if p, err := checkNode(u, v, []int64{0}, 50, "n", &out); err != nil || p.wrong != 0 || p.failed != 0 {
		t.Fatalf("a correct buffer: partial %+v, err %v; %s", p, err, out.String())
	}
	us[17] += 1
	if err := u.Mine().CopyFrom(us, nil); err != nil {
		t.Fatal(err)
	}
	p, err := checkNode(u, v, []int64{0}, 50, "n", &out)
	if !errors.Is(err, errMismatch) || p.wrong != 1 || p.failed != 1 || !strings.Contains(out.String(), "MISMATCH (1 wrong elements)") {
		t.Fatalf("one wrong element: partial %+v, err %v; %s", p, err, out.String())
	}
}

// In-process ranks run on the host device only: asked for a GPU through
// GPUCOMM_DEVICE, -np refuses before it makes a rank, naming the setting.
func TestInProcessRanksRefuseAGPU(t *testing.T) {
	t.Setenv("GPUCOMM_DEVICE", "cuda")
	var out, errb bytes.Buffer
	if code := run([]string{"-np", "2", "-n", "10"}, &out, &errb); code != 2 {
		t.Fatalf("GPUCOMM_DEVICE=cuda ipcshare -np 2 exited %d, want 2; stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "GPUCOMM_DEVICE") || out.Len() != 0 {
		t.Fatalf("want a refusal naming GPUCOMM_DEVICE and no result line; stdout %q, stderr %q", out.String(), errb.String())
	}
}
