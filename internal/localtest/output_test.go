package localtest

import (
	"fmt"
	"strings"
	"testing"
)

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestLineStartingFindsTheFirstMatchAndFailsWithoutOne(t *testing.T) {
	out := "header\nsteps: 10\nresidual 1.5e-3\nsteps: 20\n"
	if got := LineStarting(t, out, "steps:"); got != "steps: 10" {
		t.Errorf("LineStarting(steps:) = %q, want the first match %q", got, "steps: 10")
	}
	if got := LineStarting(t, out, "residual"); got != "residual 1.5e-3" {
		t.Errorf("LineStarting(residual) = %q", got)
	}
	f := &fatalTB{TB: t}
	if got := LineStarting(f, out, "1.5e-3"); got != "" || !strings.Contains(f.msg, `no line starting "1.5e-3"`) || !strings.Contains(f.msg, out) {
		t.Errorf("a prefix found only inside a line: got %q, Fatalf %q; want no line and a failure showing the output", got, f.msg)
	}
}
