package localtest

import (
	"strings"
	"testing"
)

// LineStarting returns the first line of out that starts with prefix, and
// fails tb, showing out, when none does: how the tests of the commands and
// examples read one line of a program's report.
func LineStarting(tb testing.TB, out, prefix string) string {
	tb.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	tb.Fatalf("no line starting %q in:\n%s", prefix, out)
	return ""
}
