package bench_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
)

// noPanic runs f, failing the test (not the binary) on a panic or a hang.
func noPanic(t *testing.T, name string, d time.Duration, f func() error) error {
	t.Helper()
	type out struct {
		err   error
		panic any
	}
	done := make(chan out, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- out{panic: r}
			}
		}()
		done <- out{err: f()}
	}()
	select {
	case o := <-done:
		if o.panic != nil {
			t.Errorf("%s: panic: %v", name, o.panic)
			return errors.New("panicked")
		}
		return o.err
	case <-time.After(d):
		t.Errorf("%s: no answer after %v", name, d)
		return errors.New("hung")
	}
}

func misuseConfig() bench.Config {
	c := bench.DefaultConfig()
	c.MaxBytes = 64
	c.Iters, c.Warmup = 2, 1
	c.NoBaseline = true
	return c
}

func TestReadReportRefusesImpossibleResults(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"zero size":     `{"backend":"x","results":[{"operation":"allreduce","size":0}]}`,
		"negative size": `{"backend":"x","results":[{"operation":"allreduce","size":-8}]}`,
		"negative time": `{"backend":"x","results":[{"operation":"allreduce","size":8,"busbw_gbps":1,"time_us":{"median":-3}}]}`,
		"negative bw":   `{"backend":"x","results":[{"operation":"allreduce","size":8,"busbw_gbps":-1,"time_us":{"median":3}}]}`,
		"null result":   `{"backend":"x","results":[null]}`,
		"bad baseline":  `{"backend":"x","results":[{"operation":"allreduce","size":8,"baseline":{"time_us":{"median":-1}}}]}`,
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if rep, err := bench.ReadReport(p); err == nil || !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%s: report %v, error %v; want ErrInvalidArgument", name, rep, err)
		}
	}
	p := filepath.Join(dir, "good.json")
	os.WriteFile(p, []byte(`{"backend":"x","results":[{"operation":"allreduce","size":8,"busbw_gbps":1,"time_us":{"median":3}}]}`), 0o644)
	if _, err := bench.ReadReport(p); err != nil {
		t.Errorf("good report: %v", err)
	}
}

func TestWritePlotSkipsWhatALogScaleCannotHold(t *testing.T) {
	reps := func(res ...bench.Result) []*bench.Report {
		return []*bench.Report{{Backend: "x", Ranks: 2, Results: res}}
	}
	good := bench.Result{Operation: bench.AllReduce, Size: 8, BusBW: 1, Time: bench.Summary{Median: 2}}
	for name, rs := range map[string][]*bench.Report{
		"busbw, no time":        reps(bench.Result{Operation: bench.AllReduce, Size: 8, BusBW: 1}),
		"one op with size 0":    reps(good, bench.Result{Operation: bench.Broadcast, Size: 0}),
		"busbw 0, time":         reps(bench.Result{Operation: bench.AllReduce, Size: 8, Time: bench.Summary{Median: 2}}),
		"a point with size 0":   reps(good, bench.Result{Operation: bench.AllReduce, Size: 0, BusBW: 1}),
		"huge bw beside a good": reps(good, bench.Result{Operation: bench.AllReduce, Size: 16, BusBW: 1e308, Time: bench.Summary{Median: 1e-320}}),
	} {
		for _, format := range []string{"png", "svg"} {
			var b bytes.Buffer
			if err := noPanic(t, name, 20*time.Second, func() error { return bench.WritePlot(&b, format, rs) }); err != nil || b.Len() == 0 {
				t.Errorf("%s %s: error %v, %d bytes; want a plot", name, format, err, b.Len())
			}
		}
	}
	for name, rs := range map[string][]*bench.Report{
		"only size 0":   reps(bench.Result{Operation: bench.AllReduce, Size: 0}),
		"only huge":     reps(bench.Result{Operation: bench.AllReduce, Size: 8, BusBW: 1e308, Time: bench.Summary{Median: 1e-320}}),
		"nil report":    {nil},
		"nil beside ok": append(reps(good), nil),
	} {
		if err := noPanic(t, name, 20*time.Second, func() error { return bench.WritePlot(&bytes.Buffer{}, "png", rs) }); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestPlotFileLeavesFileOnFailure(t *testing.T) {
	p := filepath.Join(t.TempDir(), "keep.png")
	if err := os.WriteFile(p, []byte("PRECIOUS"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, rs := range map[string][]*bench.Report{
		"no results": {{Backend: "x"}},
		"size 0":     {{Backend: "x", Results: []bench.Result{{Operation: bench.AllReduce}}}},
	} {
		if err := noPanic(t, name, 20*time.Second, func() error { return bench.PlotFile(p, rs) }); err == nil {
			t.Errorf("%s: no error", name)
		}
		if b, _ := os.ReadFile(p); string(b) != "PRECIOUS" {
			t.Errorf("%s: file now %q", name, b)
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 1 {
		t.Errorf("directory holds %d files, want 1", len(ents))
	}
	rs := []*bench.Report{{Backend: "x", Results: []bench.Result{{Operation: bench.AllReduce, Size: 8, BusBW: 1}}}}
	if err := bench.PlotFile(p, rs); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("plot over the file: %q...", b[:min(8, len(b))])
	}
}

func TestRunGroupRefusesCommunicatorsOfDifferentGroups(t *testing.T) {
	a, _ := local.NewGroup(2)
	b, _ := local.NewGroup(2)
	q, _ := local.NewGroup(4)
	subs := make([]comm.Communicator, 4)
	errs := make(chan error, 4)
	for i := range q {
		go func() {
			s, err := q[i].Split(i%2, i)
			subs[i] = s
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range append(append(append(a, b...), q...), subs...) {
			c.Close()
		}
	})
	for name, cs := range map[string][]comm.Communicator{
		"two NewGroups":        {a[0], b[1]},
		"two colours of Split": {subs[0], subs[3]},
	} {
		err := noPanic(t, name, 20*time.Second, func() error {
			_, err := bench.RunGroup(context.Background(), cs, misuseConfig(), nil)
			return err
		})
		if !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%s: error %v; want ErrInvalidArgument", name, err)
		}
	}
	// One group's Split communicators are still fine.
	if _, err := bench.RunGroup(context.Background(), []comm.Communicator{subs[1], subs[3]}, misuseConfig(), nil); err != nil {
		t.Errorf("one Split group: %v", err)
	}
}

func TestRunRefusesASweepWithNoWholeElement(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		ops      []bench.Operation
		min, max int64
		want     string
	}{
		{"all ops below an element", 2, nil, 1, 3, "4 bytes"},
		{"allgather below an element per rank", 3, []bench.Operation{bench.AllGather}, 4, 8, "12 bytes"},
		{"one op of two left out", 3, []bench.Operation{bench.AllReduce, bench.AllToAll}, 4, 8, "alltoall"},
	} {
		cfg := misuseConfig()
		cfg.Ops, cfg.MinBytes, cfg.MaxBytes = tc.ops, tc.min, tc.max
		rep, err := bench.RunLocal(context.Background(), tc.n, cfg, nil)
		if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: report %v, error %v; want ErrInvalidArgument naming %q", tc.name, rep, err, tc.want)
		}
		if err != nil && strings.Count(err.Error(), "no size of the sweep") != 1 {
			t.Errorf("%s: %v; want the refusal said once, not by every rank", tc.name, err)
		}
	}
}

func TestNilContextAndNilReport(t *testing.T) {
	var nilCtx context.Context
	err := noPanic(t, "RunLocal nil ctx", 20*time.Second, func() error {
		_, err := bench.RunLocal(nilCtx, 2, misuseConfig(), nil)
		return err
	})
	if !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("RunLocal(nil ctx): %v; want ErrInvalidArgument", err)
	}
	g, _ := local.NewGroup(1)
	defer g[0].Close()
	if _, err := bench.Run(nilCtx, g[0], misuseConfig(), nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("Run(nil ctx): %v; want ErrInvalidArgument", err)
	}
	var r *bench.Report
	for name, f := range map[string]func() error{
		"WriteTable": func() error { return r.WriteTable(&bytes.Buffer{}) },
		"WriteCSV":   func() error { return r.WriteCSV(&bytes.Buffer{}) },
		"WriteJSON":  func() error { return r.WriteJSON(&bytes.Buffer{}) },
	} {
		if err := noPanic(t, name, 5*time.Second, f); !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("nil report %s: %v; want ErrInvalidArgument", name, err)
		}
	}
	if w := r.Wrong(); w != 0 {
		t.Errorf("nil report Wrong: %d", w)
	}
}
