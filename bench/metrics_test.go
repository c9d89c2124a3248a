package bench

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
)

func TestBusFactorIsNcclTestsFactorForEachOperationAndRankCount(t *testing.T) {
	cases := []struct {
		op   Operation
		n    int
		want float64
	}{
		{AllReduce, 1, 0}, {AllReduce, 2, 1}, {AllReduce, 4, 1.5}, {AllReduce, 8, 1.75},
		{AllGather, 1, 0}, {AllGather, 2, 0.5}, {AllGather, 4, 0.75}, {AllGather, 8, 0.875},
		{ReduceScatter, 2, 0.5}, {ReduceScatter, 4, 0.75}, {ReduceScatter, 3, 2.0 / 3},
		{AllToAll, 2, 0.5}, {AllToAll, 4, 0.75}, {AllToAll, 8, 0.875},
		{Broadcast, 1, 1}, {Broadcast, 4, 1}, {Broadcast, 8, 1},
		{Reduce, 2, 1}, {Reduce, 8, 1},
		{PingPong, 2, 1}, {Bandwidth, 4, 1},
		{AllReduce, 0, 0},
	}
	for _, c := range cases {
		if got := BusFactor(c.op, c.n); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("BusFactor(%v, %d) = %g, want %g", c.op, c.n, got, c.want)
		}
	}
}

func TestShapeFollowsNcclTestsSizeConvention(t *testing.T) {
	cases := []struct {
		name string
		op   Operation
		size int64
		elt  int
		n    int
		want Shape
	}{
		{"allreduce: the whole array on every rank", AllReduce, 1024, 4, 4, Shape{256, 256, 256, 1024}},
		{"allreduce: bytes not divisible by the dtype round down", AllReduce, 10, 4, 2, Shape{2, 2, 2, 8}},
		{"allreduce: less than one element", AllReduce, 7, 8, 2, Shape{0, 0, 0, 0}},
		{"broadcast", Broadcast, 100, 8, 3, Shape{12, 12, 12, 96}},
		{"reduce", Reduce, 64, 2, 8, Shape{32, 32, 32, 64}},
		{"allgather: count is per rank, S the gathered array", AllGather, 1024, 4, 4, Shape{64, 64, 256, 1024}},
		{"allgather: elements not divisible by ranks round down", AllGather, 100, 4, 4, Shape{6, 6, 24, 96}},
		{"allgather: three ranks", AllGather, 1000, 1, 3, Shape{333, 333, 999, 999}},
		{"reducescatter: send holds every rank's block", ReduceScatter, 1024, 4, 4, Shape{64, 256, 64, 1024}},
		{"reducescatter: odd bytes", ReduceScatter, 37, 2, 3, Shape{6, 18, 6, 36}},
		{"alltoall: count per peer", AllToAll, 1024, 4, 4, Shape{64, 256, 256, 1024}},
		{"alltoall: fewer elements than ranks", AllToAll, 12, 4, 4, Shape{0, 0, 0, 0}},
		{"pingpong: the message", PingPong, 4096, 8, 2, Shape{512, 512, 512, 4096}},
		{"bw: odd message", Bandwidth, 4097, 4, 2, Shape{1024, 1024, 1024, 4096}},
	}
	for _, c := range cases {
		got, err := ShapeOf(c.op, c.size, c.elt, c.n)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: ShapeOf(%v, %d, %d, %d) = %+v, want %+v", c.name, c.op, c.size, c.elt, c.n, got, c.want)
		}
	}
	bad := []struct {
		op     Operation
		size   int64
		elt, n int
	}{{0, 8, 4, 2}, {AllReduce, -1, 4, 2}, {AllReduce, 8, 0, 2}, {AllReduce, 8, 4, 0}, {AllReduce, 1 << 40, 1, 2}}
	for _, b := range bad {
		if _, err := ShapeOf(b.op, b.size, b.elt, b.n); err == nil {
			t.Errorf("ShapeOf(%v, %d, %d, %d) succeeded", b.op, b.size, b.elt, b.n)
		}
	}
}

func TestBandwidthsComeFromSizeAndMedianTime(t *testing.T) {
	cfg := DefaultConfig()
	cases := []struct {
		op           Operation
		size         int64
		n            int
		samples      []float64 // seconds
		algbw, busbw float64
	}{
		// 4 MB in a median of 2 ms is 2 GB/s; allreduce on 4 ranks has factor 1.5.
		{AllReduce, 4_000_000, 4, []float64{0.003, 0.001, 0.002}, 2, 3},
		// allgather of 1 MB total on 2 ranks in 1 ms: 1 GB/s, factor 1/2.
		{AllGather, 1_000_000, 2, []float64{0.001}, 1, 0.5},
		// broadcast: factor 1; the median of an even count is the middle mean.
		{Broadcast, 8_000_000, 8, []float64{0.001, 0.003, 0.005, 0.100}, 2, 2},
		{AllToAll, 4_000_000, 4, []float64{0.004, 0.004}, 1, 0.75},
	}
	for _, c := range cases {
		sh, err := ShapeOf(c.op, c.size, cfg.DType.Size(), c.n)
		if err != nil {
			t.Fatal(err)
		}
		res := newResult(step{c.op, c.size, sh}, cfg, c.n, c.samples, nil)
		if math.Abs(res.AlgBW-c.algbw) > 1e-9 || math.Abs(res.BusBW-c.busbw) > 1e-9 {
			t.Errorf("%v of %d B on %d ranks: algbw %g busbw %g, want %g and %g", c.op, c.size, c.n, res.AlgBW, res.BusBW, c.algbw, c.busbw)
		}
		if res.Wrong != -1 {
			t.Errorf("%v: unchecked result has #wrong %d, want -1", c.op, res.Wrong)
		}
	}
	if GBps(100, 0) != 0 || GBps(100, -1) != 0 || GBps(100, math.NaN()) != 0 {
		t.Error("GBps of a non-positive time is not 0")
	}
}

func TestBaselineRatiosCompareMediansAndBusBandwidths(t *testing.T) {
	cfg := DefaultConfig()
	sh, _ := ShapeOf(AllReduce, 1<<20, 4, 4)
	st := step{AllReduce, 1 << 20, sh}
	res := newResult(st, cfg, 4, []float64{0.002, 0.002, 0.002}, []int64{0, 0})
	res.setBaseline(baselineTimes{samples: []float64{0.001, 0.001, 0.004}}, st, 4)
	b := res.Baseline
	if b == nil || b.Error != "" {
		t.Fatalf("baseline %+v", b)
	}
	if math.Abs(b.TimeRatio-2) > 1e-9 || math.Abs(b.BusBWRatio-0.5) > 1e-9 {
		t.Errorf("time ratio %g and busbw ratio %g, want 2 and 0.5", b.TimeRatio, b.BusBWRatio)
	}
	if res.Wrong != 0 {
		t.Errorf("#wrong %d, want 0", res.Wrong)
	}
	res.setBaseline(baselineTimes{err: "no MPI"}, st, 4)
	if res.Baseline.Error != "no MPI" || res.Baseline.TimeRatio != 0 {
		t.Errorf("failed baseline gives %+v", res.Baseline)
	}
}

func TestPercentilesInterpolateBetweenNearestRanks(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	cases := []struct {
		sorted []float64
		p      float64
		want   float64
	}{
		{ten, 50, 5.5}, {ten, 10, 1.9}, {ten, 90, 9.1}, {ten, 0, 1}, {ten, 100, 10},
		{ten, -5, 1}, {ten, 150, 10},
		{[]float64{4}, 10, 4}, {[]float64{4}, 90, 4},
		{[]float64{1, 3}, 50, 2}, {[]float64{1, 2, 100}, 50, 2},
	}
	for _, c := range cases {
		if got := Percentile(c.sorted, c.p); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Percentile(%v, %g) = %g, want %g", c.sorted, c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile of no samples is not NaN")
	}
}

func TestSummarizeLeavesSamplesAloneAndOrdersTheSpread(t *testing.T) {
	samples := []float64{9, 1, 5, 3, 7}
	orig := slices.Clone(samples)
	s := Summarize(samples)
	if !slices.Equal(samples, orig) {
		t.Errorf("Summarize reordered its input: %v", samples)
	}
	want := Summary{Min: 1, P10: 1.8, Median: 5, P90: 8.2, Max: 9, Mean: 5, N: 5}
	if math.Abs(s.P10-want.P10) > 1e-12 || math.Abs(s.P90-want.P90) > 1e-12 {
		t.Errorf("p10 %g p90 %g, want %g %g", s.P10, s.P90, want.P10, want.P90)
	}
	s.P10, s.P90 = want.P10, want.P90
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if got := Summarize(nil); got != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v", got)
	}
	if got := s.Scale(1e6); got.Median != 5e6 || got.N != 5 {
		t.Errorf("Scale: %+v", got)
	}
}

func TestSweepStepsAsNcclTests(t *testing.T) {
	cases := []struct {
		min, max int64
		factor   int
		step     int64
		want     []int64
	}{
		{8, 128, 2, 0, []int64{8, 16, 32, 64, 128}},
		{8, 100, 2, 0, []int64{8, 16, 32, 64}},
		{8, 1000, 3, 0, []int64{8, 24, 72, 216, 648}},
		{7, 1000, 5, 0, []int64{7, 35, 175, 875}},
		{1, 1, 2, 0, []int64{1}},
		{64, 64, 1, 0, []int64{64}},
		{10, 50, 1, 15, []int64{10, 25, 40}},
		{1 << 20, 4 << 20, 1, 1 << 20, []int64{1 << 20, 2 << 20, 3 << 20, 4 << 20}},
		{1 << 61, 1<<62 + 1, 4, 0, []int64{1 << 61}},
	}
	for _, c := range cases {
		got, err := Sweep(c.min, c.max, c.factor, c.step)
		if err != nil {
			t.Errorf("Sweep(%d, %d, %d, %d): %v", c.min, c.max, c.factor, c.step, err)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Sweep(%d, %d, %d, %d) = %v, want %v", c.min, c.max, c.factor, c.step, got, c.want)
		}
	}
	for _, bad := range [][4]int64{{0, 8, 2, 0}, {-8, 8, 2, 0}, {16, 8, 2, 0}, {8, 16, 0, 0}, {8, 16, -2, 0}, {8, 16, 1, 0}, {1, 1 << 30, 1, 1}} {
		if got, err := Sweep(bad[0], bad[1], int(bad[2]), bad[3]); err == nil {
			t.Errorf("Sweep(%v) = %d sizes, want an error", bad, len(got))
		}
	}
}

func TestParseSizeReadsNcclTestsSizes(t *testing.T) {
	cases := map[string]int64{
		"8": 8, "0": 0, "1K": 1024, "1k": 1024, "64K": 64 << 10, "128M": 128 << 20, "1G": 1 << 30,
		"1.5K": 1536, "0.5M": 512 << 10, " 32M ": 32 << 20, "64KB": 64 << 10, "1MiB": 1 << 20, "100B": 100, "10.9": 10,
	}
	for in, want := range cases {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "abc", "-1", "-1K", "1T", "NaN", "Inf", "K", "1e30G", "B"} {
		if got, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", bad, got)
		}
	}
	for n, want := range map[int64]string{8: "8", 1024: "1K", 1536: "1.5K", 32 << 20: "32M", 1 << 30: "1G"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseOperations(t *testing.T) {
	got, err := ParseOperations("allreduce, bw,allreduce,all_gather,latency")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Operation{AllReduce, Bandwidth, AllGather, PingPong}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if all, _ := ParseOperations("all"); !slices.Equal(all, Operations) {
		t.Errorf("all = %v", all)
	}
	for _, bad := range []string{"", ",", "allreduce,gather", "nope", "allreduce,,bw", "allreduce,", " , bw"} {
		if _, err := ParseOperations(bad); err == nil {
			t.Errorf("ParseOperations(%q) succeeded", bad)
		}
	}
	var o Operation
	if err := o.UnmarshalText([]byte("reducescatter")); err != nil || o != ReduceScatter {
		t.Errorf("UnmarshalText: %v, %v", o, err)
	}
	if _, err := Operation(0).MarshalText(); err == nil {
		t.Error("MarshalText of an invalid operation succeeded")
	}
}

func TestCheckedIterationsAreSpreadFromFirstToLast(t *testing.T) {
	cases := []struct {
		n, k int
		want []int
	}{
		{20, 2, []int{0, 19}}, {20, 1, []int{0}}, {20, 0, nil}, {3, 5, []int{0, 1, 2}}, {10, 3, []int{0, 4, 9}}, {1, 2, []int{0}},
	}
	for _, c := range cases {
		var got []int
		for i := range checkedIterations(c.n, c.k) {
			got = append(got, i)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("checkedIterations(%d, %d) = %v, want %v", c.n, c.k, got, c.want)
		}
	}
}

func TestConfigRejectsBadInputWithInvalidArgument(t *testing.T) {
	edits := map[string]func(*Config){
		"no operations":       func(c *Config) { c.Ops = []Operation{} },
		"invalid operation":   func(c *Config) { c.Ops = []Operation{42} },
		"pingpong on 1 rank":  func(c *Config) { c.Ops = []Operation{PingPong} },
		"invalid dtype":       func(c *Config) { c.DType = 0 },
		"invalid reduction":   func(c *Config) { c.Op = 0 },
		"root out of range":   func(c *Config) { c.Root = 1 },
		"negative root":       func(c *Config) { c.Root = -1 },
		"no iterations":       func(c *Config) { c.Iters = 0 },
		"negative warm-up":    func(c *Config) { c.Warmup = -1 },
		"negative checks":     func(c *Config) { c.Checks = -1 },
		"empty window":        func(c *Config) { c.Window = 0 },
		"max below min":       func(c *Config) { c.MaxBytes = 4 },
		"zero factor":         func(c *Config) { c.StepFactor = 0 },
		"zero smallest bytes": func(c *Config) { c.MinBytes = 0 },
	}
	for name, edit := range edits {
		cfg := DefaultConfig()
		edit(&cfg)
		if _, _, err := cfg.resolve(1); !errors.Is(err, comm.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	cfg, _, err := DefaultConfig().resolve(1)
	if err != nil || slices.Contains(cfg.Ops, PingPong) || len(cfg.Ops) != 6 {
		t.Errorf("default ops on 1 rank: %v, %v; want the six collectives", cfg.Ops, err)
	}
}
