package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// wantLine is the line ipcshare prints for np ranks and base count n.
func wantLine(np, n int) *regexp.Regexp {
	total, counts := 0, []string{}
	var want float64
	for r := range np {
		total += n + 37*r
		counts = append(counts, fmt.Sprint(n+37*r))
	}
	for g := range total {
		want += float64(g%7+1) * float64(g%5+1) / 4
	}
	return regexp.MustCompile(fmt.Sprintf(`^ipcshare: %d rank\(s\) wrote %d elements \(counts \[%s\]\) into one buffer on host:\d+ \(host\): u·v = %s, expected %s: matches\n$`,
		np, total, strings.Join(counts, " "), regexp.QuoteMeta(fmt.Sprintf("%g", want)), regexp.QuoteMeta(fmt.Sprintf("%g", want))))
}

func TestRunPrintsMatchingDotProduct(t *testing.T) {
	t.Setenv("GPUCOMM_BACKEND", "local")
	t.Setenv("GPUCOMM_DEVICE", "host")
	cases := []struct {
		args  []string
		np, n int
	}{
		{nil, 1, 1000},
		{[]string{"-n", "0"}, 1, 0},
		{[]string{"-np", "1", "-n", "17"}, 1, 17},
		{[]string{"-np", "4"}, 4, 1000},
		{[]string{"-np", "7", "-n", "3"}, 7, 3},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb strings.Builder
			if code := run(tc.args, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if re := wantLine(tc.np, tc.n); !re.MatchString(out.String()) {
				t.Fatalf("output %q does not match %s", out.String(), re)
			}
		})
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-np", "-1"}, {"-n", "-5"}, {"-bogus"}} {
		var out, errb strings.Builder
		if code := run(args, &out, &errb); code != 2 || out.Len() != 0 {
			t.Errorf("%v: exit %d, output %q", args, code, out.String())
		}
	}
}

// The program as users build it, run as a process.
func TestBuiltProgramPrintsMatch(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build the example with")
	}
	bin := filepath.Join(t.TempDir(), "ipcshare")
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-np", "3", "-n", "250")
	cmd.Env = append(cmd.Environ(), "GPUCOMM_DEVICE=host")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ipcshare -np 3: %v\n%s", err, out)
	}
	if re := wantLine(3, 250); !re.MatchString(string(out)) {
		t.Fatalf("output %q does not match %s", out, re)
	}
}
