package main

import (
	"bytes"
	"strings"
	"testing"
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
