package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
)

func parse(backendEnv string, args ...string) (config, error) {
	return parseConfig(args, backendEnv, io.Discard)
}

// GPUCOMM_BACKEND overrides the name comm.Open is given: with it set to
// cudaaware, the staged columns measured cudaaware under their labels.
func TestGPUCOMMBackendThatReplacesPingpongsBackendsIsRefused(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
	}{
		{"cudaaware", nil},
		{"nccl", nil},
		{"local", []string{"-sizes", "8"}},
		{"mpi", []string{"-cudaaware"}}, // would make the cudaaware sides staged
		{"cudaaware", []string{"-cudaaware"}},
	} {
		_, err := parse(c.env, c.args...)
		if err == nil || !strings.Contains(err.Error(), "GPUCOMM_BACKEND="+c.env) {
			t.Errorf("GPUCOMM_BACKEND=%s %q: %v, want a refusal naming it", c.env, c.args, err)
		}
	}
	for _, c := range []struct {
		env  string
		args []string
	}{{"", nil}, {"mpi", nil}, {"", []string{"-cudaaware"}}} {
		if _, err := parse(c.env, c.args...); err != nil {
			t.Errorf("GPUCOMM_BACKEND=%q %q: %v, want no error", c.env, c.args, err)
		}
	}
}

// -chunks 3 was refused only after every table had run, and -chunks 0
// printed a row measured at the default chunk under the label 0.
func TestChunksOutsideOpensRangeAreRefusedUpFront(t *testing.T) {
	for _, bad := range []string{"0", "3", strconv.Itoa(comm.MinChunkBytes - 1), "64K,3", strconv.Itoa(comm.MaxChunkBytes + 1)} {
		if cfg, err := parse("", "-chunks", bad); err == nil || !strings.Contains(err.Error(), "-chunks") {
			t.Errorf("-chunks %s: %v, %v; want a refusal", bad, cfg.chunks, err)
		}
	}
	good := strconv.Itoa(comm.MinChunkBytes) + ",1M," + strconv.Itoa(comm.MaxChunkBytes)
	cfg, err := parse("", "-chunks", good)
	if want := []int{comm.MinChunkBytes, 1 << 20, comm.MaxChunkBytes}; err != nil || !slices.Equal(cfg.chunks, want) {
		t.Errorf("-chunks %s: %v, %v; want %v", good, cfg.chunks, err, want)
	}
}

// -sizes 0 printed a NaN ratio and an empty AllReduce table.
func TestZeroAndNegativeSizesAreRefused(t *testing.T) {
	for _, bad := range []string{"0", "8,0", "-8"} {
		if cfg, err := parse("", "-sizes", bad); err == nil || !strings.Contains(err.Error(), "-sizes") {
			t.Errorf("-sizes %s: %v, %v; want a refusal", bad, cfg.sizes, err)
		}
	}
	if cfg, err := parse("", "-sizes", "1,3,8"); err != nil || !slices.Equal(cfg.sizes, []int{1, 3, 8}) {
		t.Errorf("-sizes 1,3,8: %v, %v", cfg.sizes, err)
	}
}

// -sizes 3,7,1 gave one AllReduce row, "4", without a word.
func TestAllReduceSizesSayWhatTheyDropAndRound(t *testing.T) {
	got, note := allReduceSizes([]int{3, 7, 1, 8})
	if !slices.Equal(got, []int{4, 8}) {
		t.Errorf("sizes %v, want [4 8]", got)
	}
	for _, want := range []string{"dropped 3, 1 bytes", "rounded 7 to 4 bytes"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	if strings.Contains(note, "\n") {
		t.Errorf("note %q: want one line", note)
	}
	if got, note := allReduceSizes([]int{4, 1024}); note != "" || !slices.Equal(got, []int{4, 1024}) {
		t.Errorf("whole float32s: %v, %q; want them all and no note", got, note)
	}
}

// -only cudaaware without -cudaaware measured host MPI alone, silently.
func TestCudaawareSidesNeedTheFlag(t *testing.T) {
	for _, side := range cudaawareSides {
		if _, err := parse("", "-only", side); err == nil || !strings.Contains(err.Error(), "-cudaaware") {
			t.Errorf("-only %q: %v, want a refusal naming -cudaaware", side, err)
		}
		if _, err := parse("", "-cudaaware", "-only", side); err != nil {
			t.Errorf("-cudaaware -only %q: %v", side, err)
		}
	}
	if cfg, err := parse("", "-only", "staged, unpipelined"); err != nil || !cfg.only["staged"] || !cfg.only["unpipelined"] {
		t.Errorf("-only staged,unpipelined: %v, %v", cfg.only, err)
	}
}

func TestOtherArgumentErrors(t *testing.T) {
	for _, args := range [][]string{{"-rounds", "0"}, {"-only", "nope"}, {"stray"}, {"-budget", "x"}, {"-max", "0"}} {
		if _, err := parse("", args...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	if _, err := parse("", "-nosuchflag"); !errors.As(err, new(reported)) {
		t.Errorf("an unknown flag: %v, want the flag set's own report", err)
	}
	if _, err := parse("", "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	cfg, err := parse("")
	if err != nil || cfg.rounds != 3 || len(cfg.sizes) == 0 || cfg.budget != 1<<30 {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
}
