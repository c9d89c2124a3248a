package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/localtest"
)

func trainAll(t *testing.T, np int, cfg config) ([]result, string) {
	t.Helper()
	results := make([]result, np)
	outs := make([]bytes.Buffer, np)
	_, errs := localtest.Run(t, np, func(c comm.Communicator) error {
		var err error
		results[c.Rank()], err = train(c, cfg, &outs[c.Rank()])
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return results, outs[0].String()
}

func TestDDPOnFourLocalRanksLowersTheLossWithIdenticalParameters(t *testing.T) {
	cfg := defaultConfig
	cfg.Steps = 40
	results, out := trainAll(t, 4, cfg)
	var first, last float64
	if _, err := fmt.Sscanf(localtest.LineStarting(t, out, "loss at start:"), "loss at start: %g", &first); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(localtest.LineStarting(t, out, "loss at end:"), "loss at end: %g", &last); err != nil {
		t.Fatal(err)
	}
	if !(last < 0.8*first) || math.Abs(first-math.Ln2) > 0.05 {
		t.Errorf("loss from %v to %v: want a start near ln 2 and a clear fall", first, last)
	}
	if l := localtest.LineStarting(t, out, "parameters identical"); l != "parameters identical on every rank after each of 40 steps" {
		t.Errorf("%q", l)
	}
	if !strings.HasPrefix(out, "ddp: 4 ranks on local, 65 parameters in 5 buckets of up to 16, 512 samples a rank\n") {
		t.Errorf("header: %q", out)
	}
	for r, res := range results {
		if res.reductions != 40*5 || res.parameterChecks != 40 {
			t.Errorf("rank %d: %d reductions, %d checks", r, res.reductions, res.parameterChecks)
		}
		for j, v := range res.params {
			if math.Float64bits(v) != math.Float64bits(results[0].params[j]) {
				t.Fatalf("rank %d parameter %d = %v, rank 0 has %v", r, j, v, results[0].params[j])
			}
		}
	}
}

// Averaging the shards' gradients is the gradient of the whole batch, so four
// ranks of 512 samples train like one rank of 2048, up to rounding.
func TestDDPMatchesOneRankOnTheWholeData(t *testing.T) {
	cfg := defaultConfig
	cfg.Steps = 30
	four, _ := trainAll(t, 4, cfg)
	whole := cfg
	whole.PerRank = 4 * cfg.PerRank
	one, _ := trainAll(t, 1, whole)
	for j, v := range one[0].params {
		if d := math.Abs(v - four[0].params[j]); d > 1e-9*math.Max(1, math.Abs(v)) {
			t.Fatalf("parameter %d: one rank %v, four ranks %v", j, v, four[0].params[j])
		}
	}
	if d := math.Abs(one[0].last - four[0].last); d > 1e-9 {
		t.Fatalf("final loss: one rank %v, four ranks %v", one[0].last, four[0].last)
	}
}

// A rank that steps differently, as a bug or a broken backend would make it,
// must be caught by the per-step check on every rank.
func TestDDPNoticesDivergedParameters(t *testing.T) {
	_, errs := localtest.Run(t, 2, func(c comm.Communicator) error {
		cfg := defaultConfig
		cfg.Steps = 3
		if c.Rank() == 1 {
			cfg.LR = 0.25
		}
		_, err := train(c, cfg, &bytes.Buffer{})
		return err
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "parameters differ") {
			t.Errorf("rank %d: %v, want a parameter mismatch", r, err)
		}
	}
}
