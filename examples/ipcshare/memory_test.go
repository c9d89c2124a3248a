package main

import (
	"bytes"
	"strings"
	"testing"
)

// With a host of 5 MB free, 2 in-process ranks of 100000 and 100037
// elements (48 bytes an element: the ranks' slices, the node's u and v and
// its root's copy) need 9.6 MB: refused, every rank agreeing, said once.
func TestTheRanksOfAHostAddUpWhatTheyNeedOfItsMemory(t *testing.T) {
	saved := hostMemory
	defer func() { hostMemory = saved }()
	hostMemory = func() (int, int, error) { return 5e6, 8e6, nil }
	var out, errb bytes.Buffer
	if code := run([]string{"-np", "2", "-n", "100000"}, &out, &errb); code != 1 || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q; want 1 and no result line", code, out.String())
	}
	want := "ipcshare: -n 100000: the ranks of a host need 9.6 MB of its memory for u and v, but it has 5.0 MB free of 8.0 MB: use a smaller -n\n"
	if errb.String() != want {
		t.Errorf("stderr %q, want %q", errb.String(), want)
	}
	// 10 MB free holds it.
	hostMemory = func() (int, int, error) { return 10e6, 16e6, nil }
	out.Reset()
	errb.Reset()
	if code := run([]string{"-np", "2", "-n", "100000"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "job: 1 node(s), 2 rank(s)") {
		t.Fatalf("with 10 MB free: exit %d, stdout %q, stderr %q; want 0", code, out.String(), errb.String())
	}
}
