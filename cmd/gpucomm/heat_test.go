package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/localtest"
	"github.com/gpucomm/gpucomm/solver"
)

func runHeatCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("GPUCOMM_BACKEND", "")
	var out, errOut bytes.Buffer
	code = run(append([]string{"heat"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHeatReportsStepTimeBandwidthHaloWaitAndTheReferenceResidual(t *testing.T) {
	cases := []struct {
		args   []string
		steps  int
		header string
		cfg    solver.Config
	}{
		{[]string{"-n", "40", "-steps", "20", "-np", "2", "-k", "5"}, 20,
			"heat: 40×40 grid, 2 ranks on local", solver.Config{N: 40, M: 40, ResidualEvery: 5, Seed: 1, Boundary: solver.Boundary{Top: 1}}},
		{[]string{"-n", "30", "-m", "21", "-steps", "12", "-np", "2", "-decomp", "2d", "-px", "1", "-py", "2", "-overlap=false", "-k", "4", "-seed", "7"}, 12,
			"heat: 30×21 grid, 2 ranks on local", solver.Config{N: 30, M: 21, ResidualEvery: 4, Seed: 7, Boundary: solver.Boundary{Top: 1}}},
		{[]string{"-n", "33", "-m", "25", "-steps", "9", "-np", "3", "-dtype", "float32", "-k", "1", "-seed", "3"}, 9,
			"heat: 33×25 grid, 3 ranks on local", solver.Config{N: 33, M: 25, ResidualEvery: 1, Seed: 3, Boundary: solver.Boundary{Top: 1}, DType: solver.Float32}},
	}
	for _, c := range cases {
		code, out, errOut := runHeatCLI(t, c.args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", c.args, code, out, errOut)
		}
		if errOut != "" {
			t.Errorf("%v: stderr is not a terminal, so no progress bar: %q", c.args, errOut)
		}
		if h := localtest.LineStarting(t, out, "heat: "); !strings.HasPrefix(h, c.header) {
			t.Errorf("%v: header %q, want it to start %q", c.args, h, c.header)
		}
		if l := localtest.LineStarting(t, out, "steps: "); l != fmt.Sprintf("steps: %d", c.steps) {
			t.Errorf("%v: %q", c.args, l)
		}
		var perStep string
		if _, err := fmt.Sscanf(localtest.LineStarting(t, out, "time per step: "), "time per step: %s", &perStep); err != nil || perStep == "0s" {
			t.Errorf("%v: time per step %q (%v)", c.args, perStep, err)
		}
		var bw float64
		var unit string
		if _, err := fmt.Sscanf(localtest.LineStarting(t, out, "bandwidth: "), "bandwidth: %g %s", &bw, &unit); err != nil || bw <= 0 || !strings.HasSuffix(unit, "B/s") {
			t.Errorf("%v: bandwidth %v %q (%v)", c.args, bw, unit, err)
		}
		if h := localtest.LineStarting(t, out, "heat: "); !strings.HasSuffix(h, ", "+c.cfg.DType.String()) {
			t.Errorf("%v: header %q does not end with the element type %v", c.args, h, c.cfg.DType)
		}
		if want := fmt.Sprintf("(%d bytes a step", 2*c.cfg.DType.Size()*c.cfg.N*c.cfg.M); !strings.Contains(localtest.LineStarting(t, out, "bandwidth: "), want) {
			t.Errorf("%v: bandwidth line lacks %q", c.args, want)
		}
		var share float64
		if _, err := fmt.Sscanf(localtest.LineStarting(t, out, "halo wait: "), "halo wait: %g%%", &share); err != nil || share < 0 || share > 100 {
			t.Errorf("%v: halo wait %v%% (%v)", c.args, share, err)
		}
		// The residual printed is the solver's, which agrees with the
		// one-rank reference.
		_, res, err := solver.Reference(c.cfg, c.steps)
		if err != nil {
			t.Fatal(err)
		}
		var got float64
		if _, err := fmt.Sscanf(localtest.LineStarting(t, out, "residual: "), "residual: %g", &got); err != nil || fmt.Sprintf("%.4e", got) != fmt.Sprintf("%.4e", res) {
			t.Errorf("%v: residual %v, reference %v (%v)", c.args, got, res, err)
		}
	}
}

func TestHeatBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "2"},
		{"-steps", "0"},
		{"-k", "-1"},
		{"-np", "0"},
		{"-decomp", "3d"},
		{"-dtype", "float16"},
		{"-px", "2"},
		{"-n", "10", "-np", "9"},        // more ranks than interior rows
		{"-n", "64", "-np", "10000000"}, // refused before ten million ranks are made (that took minutes)
		{"-n", "10", "-np", "4", "-decomp", "2d", "-px", "3"},   // 3×0 ranks
		{"-n", "10", "-np", "2", "-backend", "nosuch"},          // unknown backend
		{"-n", "10", "-np", "2", "-backend", "mpi", "-np", "2"}, // -np is for local
		{"stray"},
	} {
		code, out, errOut := runHeatCLI(t, args...)
		if code != exitUsage || out != "" || errOut == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 with a message on stderr", args, code, out, errOut)
		}
	}
	if code, _, errOut := runHeatCLI(t, "-h"); code != exitOK || !strings.Contains(errOut, "-decomp") || !strings.Contains(errOut, "-overlap") || !strings.Contains(errOut, "-dtype") {
		t.Errorf("heat -h: exit %d, %q", code, errOut)
	}
}

func TestHeatBarDrawsOnlyWhenOn(t *testing.T) {
	var w bytes.Buffer
	b := &heatBar{w: &w, on: true}
	b.progress(10, 20)
	b.finish()
	if got := w.String(); got != "\rheat [####################....................]  50% 10/20 steps\n" {
		t.Fatalf("bar drew %q", got)
	}
	w.Reset()
	off := newHeatBar(&w, true) // not a terminal
	off.progress(1, 2)
	off.finish()
	var none *heatBar
	none.progress(1, 2) // ranks other than 0 hold no bar
	if w.Len() != 0 {
		t.Fatalf("a bar on a non-terminal drew %q", w.String())
	}
}

// checksumOf reads the value of heat's checksum line.
func checksumOf(t *testing.T, out string) uint64 {
	t.Helper()
	var sum uint64
	if _, err := fmt.Sscanf(localtest.LineStarting(t, out, "checksum: "), "checksum: %x", &sum); err != nil {
		t.Fatalf("checksum line unreadable (%v):\n%s", err, out)
	}
	return sum
}

// The checksum line is the same on 1, 2 and 4 ranks, rows or 2-D, and is
// the checksum of the one-rank reference field; a field one cell away from
// it, or another seed, has another.
func TestHeatChecksumIsTheSameOnAnyRankCount(t *testing.T) {
	for _, dt := range []solver.DType{solver.Float64, solver.Float32} {
		cfg := solver.Config{N: 37, M: 29, Seed: 6, Boundary: solver.Boundary{Top: 1}, DType: dt}
		const steps = 25
		field, _, err := solver.Reference(cfg, steps)
		if err != nil {
			t.Fatal(err)
		}
		want, err := solver.FieldChecksum(field, cfg.N, cfg.M, dt)
		if err != nil {
			t.Fatal(err)
		}
		common := []string{"-n", "37", "-m", "29", "-steps", fmt.Sprint(steps), "-seed", "6", "-k", "5", "-dtype", dt.String()}
		var line string
		for _, extra := range [][]string{{"-np", "1"}, {"-np", "2"}, {"-np", "4"}, {"-np", "4", "-decomp", "2d"}, {"-np", "3", "-overlap=false"}} {
			code, out, errOut := runHeatCLI(t, append(append([]string{}, common...), extra...)...)
			if code != exitOK {
				t.Fatalf("%v %v: exit %d\n%s%s", dt, extra, code, out, errOut)
			}
			if got := checksumOf(t, out); got != want {
				t.Errorf("%v %v: checksum %016x, the reference field's %016x", dt, extra, got, want)
			}
			l := localtest.LineStarting(t, out, "checksum: ")
			if line == "" {
				line = l
			} else if l != line {
				t.Errorf("%v %v: checksum line %q, on one rank %q", dt, extra, l, line)
			}
		}
		for _, k := range []int{0, cfg.M + 1, len(field) / 2, len(field) - 1} {
			changed := append([]float64(nil), field...)
			changed[k] += 1.0 / 1024
			if other, _ := solver.FieldChecksum(changed, cfg.N, cfg.M, dt); other == want {
				t.Errorf("%v: cell %d changed, checksum unchanged %016x", dt, k, other)
			}
		}
		code, out, errOut := runHeatCLI(t, append(append([]string{}, common...), "-np", "2", "-seed", "7")...)
		if code != exitOK {
			t.Fatalf("seed 7: exit %d\n%s%s", code, out, errOut)
		}
		if got := checksumOf(t, out); got == want {
			t.Errorf("%v: seed 7 gives seed 6's checksum %016x", dt, got)
		}
	}
}
