package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// rankEnv makes the test binary run the program itself (a rank of
// TestProgramUnderLauncher's job), with the arguments in argsEnv.
const (
	rankEnv = "GPUCOMM_PINGPONG_TEST_RANK"
	argsEnv = "GPUCOMM_PINGPONG_TEST_ARGS"
)

func TestMain(m *testing.M) {
	if os.Getenv(rankEnv) == "1" {
		os.Args = append([]string{os.Args[0]}, strings.Split(os.Getenv(argsEnv), "\x1f")...)
		main() // aborts the job on an error
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestDefaultSizesAreBenchsSweepByFourEndingAtMax(t *testing.T) {
	cases := []struct {
		max  string
		want []int
	}{
		{"1K", []int{8, 32, 128, 512, 1024}},
		{"512", []int{8, 32, 128, 512}},
		{"100", []int{8, 32, 100}},
		{"4", []int{4}},
		{"8", []int{8}},
	}
	for _, c := range cases {
		got, err := defaultSizes(c.max)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("-max %s: %v, %v; want %v", c.max, got, err, c.want)
		}
	}
	for _, bad := range []string{"0", "-8", "2G", "lots"} {
		if got, err := defaultSizes(bad); err == nil {
			t.Errorf("-max %s: %v, want an error", bad, got)
		}
	}
}

func TestParseSizesReadsBenchsUnitsAndRefusesWhatMPICannotCount(t *testing.T) {
	got, err := parseSizes("8, 1K,,1.5M")
	if want := []int{8, 1024, 3 << 19}; err != nil || !slices.Equal(got, want) {
		t.Errorf("parseSizes = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"2G", "8,-1", "8,x"} {
		if got, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) = %v, want an error", bad, got)
		}
	}
}

func TestMedianAndBandwidthAreBenchs(t *testing.T) {
	us := func(v ...float64) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x*1e3))
		}
		return d
	}
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{us(5, 1, 3), 3 * time.Microsecond},
		{us(4, 1, 3, 2), 2500 * time.Nanosecond}, // the mean of the middle two
		{us(-2, 7), 2500 * time.Nanosecond},      // differences of two sides may be negative
		{us(9), 9 * time.Microsecond},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if got, want := gbps(1<<20, 2*time.Millisecond), bench.GBps(1<<20, 0.002); got != want || got != float64(1<<20)/0.002/1e9 {
		t.Errorf("gbps = %v, want %v", got, want)
	}
}

// TestMeasureRoundsTakesSidesInTurnAndRotates checks the order the sides
// are measured in (round r starts at side r) and that each side's times come
// back in round order.
func TestMeasureRoundsTakesSidesInTurnAndRotates(t *testing.T) {
	var order []int
	calls := 0
	times, err := measureRounds(3, 3, func(i int) (time.Duration, error) {
		order = append(order, i)
		calls++
		return time.Duration(100*i + calls), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2, 1, 2, 0, 2, 0, 1}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	want := [][]time.Duration{{1, 6, 8}, {102, 104, 109}, {203, 205, 207}}
	for i := range want {
		if !slices.Equal(times[i], want[i]) {
			t.Errorf("side %d: times %v, want %v", i, times[i], want[i])
		}
	}
	stop := fmt.Errorf("side 1 failed")
	if _, err := measureRounds(2, 3, func(i int) (time.Duration, error) {
		if i == 1 {
			return 0, stop
		}
		return 1, nil
	}); err != stop {
		t.Errorf("a failing side: %v, want its error", err)
	}
}

func TestPairDiffsAreMediansOfRoundByRoundDifferences(t *testing.T) {
	var w strings.Builder
	names := []string{"host MPI", "a", "b"}
	times := [][]time.Duration{{1, 1, 1}, {10000, 12000, 11000}, {9000, 9500, 12500}}
	pairDiffs(&w, 4096, names, times)
	want := "  4K: a − b, per round: median +1.00 µs (from -1.50 to +2.50 over 3 rounds)\n"
	if w.String() != want {
		t.Errorf("pairDiffs wrote %q, want %q", w.String(), want)
	}
}

// TestProgramUnderLauncher runs the program on two ranks of the host
// device with every table asked for. Each side checks the bytes that
// arrived after its timed trips and the program aborts the job on any
// error, so a pass means every side moved the data right; the output must
// hold every table, every side and every size.
func TestProgramUnderLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts an MPI job")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-sizes", "8,4K,1M", "-budget", "2M", "-rounds", "2", "-cudaaware", "-chunks", "64K",
		"-copies", "-memload", "-only", "staged,cudaaware,MPI on device"}
	env := []string{rankEnv + "=1", argsEnv + "=" + strings.Join(args, "\x1f"),
		"GPUCOMM_DEVICE=host", "GPUCOMM_CUDA_AWARE=1", "GPUCOMM_BACKEND="}
	j := mpitest.Launch(t, 2, 3*time.Minute, env, exe)
	if j.Err != nil {
		t.Fatalf("the job failed: %v\n%s", j.Err, j.Output)
	}
	out := j.Output
	for _, want := range []string{
		"Point-to-point ping-pong, ranks 0 and 1",
		"AllReduce of float32 (sum, in place) over 2 ranks",
		"Chunk size: each stage's bandwidth",
		"Copies: one D2H then one H2D copy",
		"Copies against host memcpy on rank 0",
		"host MPI µs", "staged µs", "cudaaware GB/s", "MPI on device µs",
		"1M: staged − cudaaware, per round", "4K: cudaaware − MPI on device, per round",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	for _, absent := range []string{"staged via MPI µs", "unpipelined µs", "arrived wrong"} {
		if strings.Contains(out, absent) {
			t.Errorf("the output holds %q, which -only left out or which means bad data:\n%s", absent, out)
		}
	}
	// Each size is a row of the ping-pong, AllReduce, copies and memload
	// tables: four rows that start with it.
	for _, size := range []string{"8", "4K", "1M"} {
		rows := 0
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == size {
				rows++
			}
		}
		if rows != 4 {
			t.Errorf("size %s starts %d rows, want 4 (ping-pong, AllReduce, copies, memload):\n%s", size, rows, out)
		}
	}
}

// An error line names the rank only where MPI has given it one: a binary
// without MPI said "pingpong rank -1".
func TestErrorLinesNameOnlyARealRank(t *testing.T) {
	for rank, want := range map[int]string{-1: "pingpong", 0: "pingpong rank 0", 3: "pingpong rank 3"} {
		if got := who(rank); got != want {
			t.Errorf("who(%d) = %q, want %q", rank, got, want)
		}
	}
}
