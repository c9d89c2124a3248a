package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm/local"
)

// With one rank, Send/Recv has no peer and is not run: its probe says it
// was not measured, and the verdict neither times it (no "0 µs") nor counts
// it among the operations that passed, but names it as not measured.
func TestCheckWithOneRankSaysSendRecvWasNotMeasured(t *testing.T) {
	cs, err := local.NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	ops := probeGroup(cs, 2*time.Minute)
	if len(ops) != len(probeOps) {
		t.Fatalf("%d results, want %d: %+v", len(ops), len(probeOps), ops)
	}
	for _, o := range ops {
		switch {
		case o.Op == "Send/Recv" && (!o.Skipped || !o.OK || o.Micros != 0 || o.Bytes != 0 || !strings.Contains(o.Problem, "not measured")):
			t.Errorf("Send/Recv with one rank: %+v; want skipped, not failed, no time or bytes, and saying it was not measured", o)
		case o.Op != "Send/Recv" && (o.Skipped || !o.OK || o.Micros <= 0):
			t.Errorf("%s with one rank: %+v; want run, passed and timed", o.Op, o)
		}
	}
	v := probeVerdict("local", ops)
	usable, notMeasured, ok := strings.Cut(v, "; ")
	if !ok || !strings.HasPrefix(usable, "local: usable for every probed operation: Broadcast (") || strings.Contains(usable, "Send/Recv") ||
		notMeasured != "Send/Recv not measured: with one rank there is nothing to send to" {
		t.Errorf("verdict %q; want the measured operations, then Send/Recv as not measured with one rank", v)
	}

	for _, k := range []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"} {
		t.Setenv(k, "")
	}
	code, out, errOut := runCLI(t, "check", "-np", "1", "-probe-only")
	if code != exitOK || !strings.Contains(out, "op Send/Recv  skipped  not measured: with one rank there is nothing to send to") ||
		!strings.Contains(out, "; Send/Recv not measured: with one rank") || strings.Contains(out, "Send/Recv (") {
		t.Errorf("check -np 1 -probe-only: exit %d; want 0 and Send/Recv said not measured, not timed\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// A verdict names the skipped operations after the judged ones, whatever
// the judgement.
func TestProbeVerdictNamesSkippedOperationsApart(t *testing.T) {
	skip := probeOp{Op: "Send/Recv", OK: true, Skipped: true, Problem: "not measured: why"}
	good := probeOp{Op: "Broadcast", OK: true, Micros: 12, Bytes: 256 << 10}
	bad := probeOp{Op: "AllGather", Problem: "wrong content"}
	for _, c := range []struct {
		ops  []probeOp
		want string
	}{
		{[]probeOp{skip, good}, "b: usable for every probed operation: Broadcast (12 µs for 256 KiB a rank); Send/Recv not measured: why"},
		{[]probeOp{skip, good, bad}, "b: NOT recommended for AllGather, which gave wrong results or failed; usable only for Broadcast (12 µs for 256 KiB a rank); Send/Recv not measured: why"},
		{[]probeOp{skip, bad}, "b: NOT usable: every probed operation failed (AllGather); Send/Recv not measured: why"},
		{[]probeOp{skip}, "b: not probed; Send/Recv not measured: why"},
		{nil, "b: not probed"},
	} {
		if got := probeVerdict("b", c.ops); got != c.want {
			t.Errorf("probeVerdict(%+v)\n got %q\nwant %q", c.ops, got, c.want)
		}
	}
}
