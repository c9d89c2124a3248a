package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCountCPUList(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-15": 16, "0-3,8,10-11": 7, "": 0, "x": 0, "3-1": 0, "0-": 0} {
		if got := countCPUList(in); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestPlacementWarnsOnlyWhenBoundToOneCPU(t *testing.T) {
	cases := []struct {
		p    placement
		warn bool
	}{
		{placement{CPUs: 1, Online: 16}, true},
		{placement{CPUs: 1, Online: 0}, true},  // unknown machine size: still one CPU
		{placement{CPUs: 1, Online: 1}, false}, // a one-CPU machine: nothing to change
		{placement{CPUs: 4, Online: 16}, false},
	}
	for _, c := range cases {
		msg := c.p.warning()
		if (msg != "") != c.warn {
			t.Errorf("%+v: warning %q, want one: %v", c.p, msg, c.warn)
		}
		if c.warn && !strings.Contains(msg, "--bind-to none") {
			t.Errorf("%+v: warning %q does not say how to launch instead", c.p, msg)
		}
	}
}

func TestPlacementSectionDescribesThisProcess(t *testing.T) {
	var b bytes.Buffer
	if err := writePlacement(&b); err != nil {
		t.Fatal(err)
	}
	p := readPlacement()
	if !strings.HasPrefix(b.String(), "Placement: ") || !strings.Contains(b.String(), "GOMAXPROCS") || p.CPUs < 1 {
		t.Errorf("placement section %q (read %+v)", b.String(), p)
	}
}
