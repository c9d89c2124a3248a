package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/launcher"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// The probe check runs before the conformance suite: what the launcher
// and the MPI library say of the job, and whether they agree; the
// placement of this rank; each backend's verdict; and, on the
// communicators under test, each data operation the backends are judged
// by (Send/Recv, Broadcast, AllReduce, AllGather), content-checked on the
// communicator's own device (a GPU's memory under cudaaware: that is the
// CUDA-awareness of each operation) and bounded in time, with its measured
// cost. A backend is recommended only for the operations that passed.

// Finding levels.
const (
	levelOK    = "ok"
	levelInfo  = "info"
	levelWarn  = "warn"
	levelError = "error"
)

// probeFinding is one thing the probe found, with what to do about it.
type probeFinding struct {
	Area   string `json:"area"` // launcher, mpi, placement, nccl, backend
	Level  string `json:"level"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// probeOp is one data operation's probe on this rank.
type probeOp struct {
	Op     string  `json:"op"`
	OK     bool    `json:"ok"`
	Micros float64 `json:"us"`    // one operation's time, the best of a few
	Bytes  int     `json:"bytes"` // what each rank sent
	// Skipped says the operation had nothing to do here and was not run
	// (Send/Recv with one rank), so not measured: OK, no time, no bytes;
	// Problem says why.
	Skipped bool   `json:"skipped,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// probeReport is the probe's part of check's report.
type probeReport struct {
	Findings []probeFinding `json:"findings"`
	Ops      []probeOp      `json:"ops,omitempty"`
	Verdict  string         `json:"verdict"` // for the backend under test
}

func (p *probeReport) add(area, level, detail, fix string) {
	p.Findings = append(p.Findings, probeFinding{Area: area, Level: level, Detail: detail, Fix: fix})
}

// failed reports whether the probe found an error or an operation that failed.
func (p *probeReport) failed() bool {
	for _, f := range p.Findings {
		if f.Level == levelError {
			return true
		}
	}
	for _, o := range p.Ops {
		if !o.OK {
			return true
		}
	}
	return false
}

// probeJob reports the launcher against the MPI library: before a
// communicator opens (the family: a binary of one MPI under the other's
// launcher cannot join its job), and after (the world's size and rank
// against the launcher's). c is nil before.
func probeJob(p *probeReport, backend string, c comm.Communicator) {
	job, under := launcher.FromEnv()
	if c == nil {
		if !under {
			p.add("launcher", levelInfo, "not under a launcher: this process is the whole job", "")
		} else {
			p.add("launcher", levelInfo, "started by "+job.String(), "")
		}
		if mpi.Built() {
			v := strings.TrimSpace(mpi.Version())
			if i := strings.IndexByte(v, '\n'); i >= 0 {
				v = v[:i]
			}
			p.add("mpi", levelInfo, fmt.Sprintf("built for %s; library %s %s", mpi.Family(), mpi.LibraryFile(), v), "")
			if err := mpi.JoinError(); err != nil {
				p.add("mpi", levelError, err.Error(), "start it with the launcher of the MPI it is built for, or rebuild it for the launcher's")
			}
		} else {
			p.add("mpi", levelInfo, "MPI is not in this binary: "+mpiBuildAdvice(), "")
		}
		return
	}
	if !under {
		return
	}
	if job.Size > 0 && (c.Size() != job.Size || c.Rank() != job.Rank) {
		p.add("launcher", levelError, fmt.Sprintf("%s started rank %d of %d, but backend %s made rank %d of %d: the library did not join the launcher's job",
			job.Launcher, job.Rank, job.Size, backend, c.Rank(), c.Size()),
			"launch with the mpirun/mpiexec of the MPI this binary is built for (gpucomm info names it); under srun, pass --mpi=pmix or pmi2")
		return
	}
	p.add("launcher", levelOK, fmt.Sprintf("%s and backend %s agree: rank %d of %d", job.Launcher, backend, c.Rank(), c.Size()), "")
}

// probePlacement reports where this rank runs: CPUs, binding, ranks per
// GPU and MPS.
func probePlacement(p *probeReport, c comm.Communicator) {
	pl := readPlacement()
	if msg := pl.warning(); msg != "" {
		p.add("placement", levelWarn, msg, "")
	} else {
		p.add("placement", levelOK, fmt.Sprintf("%d of %d CPUs usable, GOMAXPROCS %d", pl.CPUs, pl.Online, pl.Procs), "")
	}
	if c == nil || pl.GPUs == 0 {
		return
	}
	perGPU := (c.LocalSize() + pl.GPUs - 1) / pl.GPUs
	mps := os.Getenv("CUDA_MPS_PIPE_DIRECTORY") != ""
	if _, err := os.Stat("/tmp/nvidia-mps/control"); err == nil {
		mps = true
	}
	switch {
	case perGPU > 1 && !mps:
		p.add("placement", levelWarn, fmt.Sprintf("%d ranks on this node share %d GPUs (%d a GPU) without MPS: their kernels take turns", c.LocalSize(), pl.GPUs, perGPU),
			"start the MPS daemon (nvidia-cuda-mps-control -d), or run one rank a GPU; NCCL refuses two ranks on one GPU")
	case perGPU > 1:
		p.add("placement", levelInfo, fmt.Sprintf("%d ranks a GPU, MPS active", perGPU), "")
	default:
		p.add("placement", levelOK, fmt.Sprintf("%d ranks on this node, %d GPUs: one rank a GPU at most", c.LocalSize(), pl.GPUs), "")
	}
}

// probeBackends gives every registered backend's verdict here (NCCL's
// names its version, or why it cannot load).
func probeBackends(p *probeReport) {
	for _, name := range comm.Backends() {
		v, err := comm.Probe(name)
		switch {
		case err != nil:
			p.add("backend", levelWarn, fmt.Sprintf("%s: %v", name, err), "")
		case v.Usable:
			p.add("backend", levelInfo, fmt.Sprintf("%s: usable here: %s", name, v.Reason), "")
		default:
			p.add("backend", levelInfo, fmt.Sprintf("%s: not usable here: %s", name, shortReason(v.Reason)), "")
		}
	}
}

// probeOps are the operations probed, in order.
var probeOps = []string{"Send/Recv", "Broadcast", "AllReduce", "AllGather"}

// probeElems is each probe's size: 64 Ki float32 (256 KiB) a rank.
const probeElems = 64 << 10

// probeGroup runs each operation on every communicator of group (the
// ranks of this process: several for local, one under MPI) and returns
// this process's first rank's results, with the other ranks' problems
// folded in. An operation that does not finish within bound is reported
// and ends the probe: the communicator may be stuck in it.
func probeGroup(group []comm.Communicator, bound time.Duration) []probeOp {
	var out []probeOp
	for _, name := range probeOps {
		res := make([]probeOp, len(group))
		done := make(chan struct{})
		go func() {
			var wg sync.WaitGroup
			for i, c := range group {
				wg.Go(func() { res[i] = probeOne(c, name) })
			}
			wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(bound):
			out = append(out, probeOp{Op: name, Problem: fmt.Sprintf("did not finish within %v: a rank is stuck in it (or the bound, -timeout, is too short)", bound)})
			return out
		}
		r := res[0]
		for i, o := range res[1:] {
			if !o.OK && r.OK {
				r.OK, r.Problem = false, fmt.Sprintf("rank %d: %s", group[i+1].Rank(), o.Problem)
			}
		}
		out = append(out, r)
	}
	return out
}

// probeOne runs one operation a few times on c: inputs random with a
// fixed seed per rank, outputs poisoned before each run, every element
// checked; its time is the best run's.
func probeOne(c comm.Communicator, name string) probeOp {
	res := probeOp{Op: name, Bytes: probeElems * 4}
	fail := func(format string, args ...any) probeOp {
		res.OK, res.Problem = false, fmt.Sprintf(format, args...)
		return res
	}
	me, size := c.Rank(), c.Size()
	if name == "Send/Recv" && size == 1 {
		return probeOp{Op: name, OK: true, Skipped: true, Problem: "not measured: with one rank there is nothing to send to"}
	}
	n := probeElems
	recvN := n
	if name == "AllGather" {
		recvN = n * size
	}
	send, err := devmem.AllocSlice[float32](c.Device(), n)
	if err != nil {
		return fail("%v", err)
	}
	defer send.Free()
	recv, err := devmem.AllocSlice[float32](c.Device(), recvN)
	if err != nil {
		return fail("%v", err)
	}
	defer recv.Free()
	input := func(r int) []float32 {
		rng := rand.New(rand.NewPCG(20261203, uint64(r)))
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.IntN(1 << 12)) // exact in any order of summing
		}
		return v
	}
	var want []float32
	switch name {
	case "Send/Recv":
		want = input((me - 1 + size) % size)
	case "Broadcast":
		want = input(0)
	case "AllReduce":
		want = make([]float32, n)
		for r := range size {
			for i, v := range input(r) {
				want[i] += v
			}
		}
	case "AllGather":
		for r := range size {
			want = append(want, input(r)...)
		}
	}
	if err := send.CopyFrom(input(me), nil); err != nil {
		return fail("%v", err)
	}
	poison := make([]float32, recvN)
	for i := range poison {
		poison[i] = -7
	}
	best := time.Duration(1 << 62)
	for run := range 3 {
		if err := recv.CopyFrom(poison, nil); err != nil {
			return fail("%v", err)
		}
		start := time.Now()
		switch name {
		case "Send/Recv":
			// A ring: rank r sends to r+1 and receives from r-1, in one group.
			err = c.GroupP2P([]comm.P2P{
				comm.SendTo((me+1)%size, send.Buffer(), n, comm.Float32),
				comm.RecvFrom((me-1+size)%size, recv.Buffer(), n, comm.Float32),
			}, nil)
		case "Broadcast":
			err = comm.Broadcast(c, send, recv, 0, nil)
		case "AllReduce":
			err = comm.AllReduce(c, send, recv, comm.Sum, nil)
		case "AllGather":
			err = comm.AllGather(c, send, recv, nil)
		}
		took := time.Since(start)
		if err != nil {
			return fail("run %d: %v", run+1, err)
		}
		got, err := recv.ToHost(nil)
		if err != nil {
			return fail("%v", err)
		}
		bad, first := 0, -1
		for i := range want {
			if got[i] != want[i] {
				if first < 0 {
					first = i
				}
				bad++
			}
		}
		if bad > 0 {
			return fail("wrong content on rank %d: %d of %d elements differ, the first at %d (%v, want %v)", me, bad, len(want), first, got[first], want[first])
		}
		best = min(best, took)
	}
	res.OK, res.Micros = true, float64(best.Nanoseconds())/1e3
	return res
}

// probeVerdict is the backend's verdict from its operations: those that
// ran judge it, with their times; those skipped are named after, as not
// measured, and why.
func probeVerdict(backend string, ops []probeOp) string {
	var good, bad, skipped []string
	for _, o := range ops {
		switch {
		case o.Skipped:
			skipped = append(skipped, fmt.Sprintf("%s %s", o.Op, o.Problem))
		case o.OK:
			good = append(good, fmt.Sprintf("%s (%.0f µs for %d KiB a rank)", o.Op, o.Micros, o.Bytes>>10))
		default:
			bad = append(bad, o.Op)
		}
	}
	var v string
	switch {
	case len(good) == 0 && len(bad) == 0:
		v = fmt.Sprintf("%s: not probed", backend)
	case len(bad) == 0:
		v = fmt.Sprintf("%s: usable for every probed operation: %s", backend, strings.Join(good, ", "))
	case len(good) == 0:
		v = fmt.Sprintf("%s: NOT usable: every probed operation failed (%s)", backend, strings.Join(bad, ", "))
	default:
		v = fmt.Sprintf("%s: NOT recommended for %s, which gave wrong results or failed; usable only for %s", backend, strings.Join(bad, ", "), strings.Join(good, ", "))
	}
	if len(skipped) > 0 {
		v += "; " + strings.Join(skipped, "; ")
	}
	return v
}

// writeProbe prints the probe as a table, before the suite's.
func writeProbe(w io.Writer, p probeReport) {
	fmt.Fprint(w, "Probe:\n")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, f := range p.Findings {
		line := f.Detail
		if f.Fix != "" {
			line += " -> " + f.Fix
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Area, f.Level, line)
	}
	for _, o := range p.Ops {
		state, what := "ok", fmt.Sprintf("%.0f µs, %d KiB a rank, content checked", o.Micros, o.Bytes>>10)
		switch {
		case o.Skipped:
			state, what = "skipped", o.Problem
		case !o.OK:
			state, what = "WRONG", o.Problem
		case o.Problem != "":
			what = o.Problem
		}
		fmt.Fprintf(tw, "  op %s\t%s\t%s\n", o.Op, state, what)
	}
	tw.Flush()
	fmt.Fprintf(w, "  verdict: %s\n\n", p.Verdict)
}

// runProbe probes the job, the placement, the operations on group, and
// then what needs the node's ranks and its GPU topology (probeNode).
func runProbe(p *probeReport, backend string, group []comm.Communicator, timeout time.Duration) {
	if len(group) == 0 {
		return
	}
	probeJob(p, backend, group[0])
	probePlacement(p, group[0])
	bound := timeout
	if bound <= 0 {
		bound = 30 * time.Second
	}
	p.Ops = probeGroup(group, bound)
	p.Verdict = probeVerdict(backend, p.Ops)
	probeNode(p, backend, group, bound)
}

// printProbeErrors is what a rank other than 0 (or any rank, when no
// communicator opened: rank -1) says of the probe: its errors only.
func printProbeErrors(w io.Writer, rank int, p probeReport) {
	who := "gpucomm check"
	if rank >= 0 {
		who = fmt.Sprintf("rank %d", rank)
	}
	for _, f := range p.Findings {
		if f.Level == levelError {
			fmt.Fprintf(w, "%s: probe: %s: %s\n", who, f.Area, f.Detail)
		}
	}
	for _, o := range p.Ops {
		if !o.OK {
			fmt.Fprintf(w, "%s: probe: op %s: %s\n", who, o.Op, o.Problem)
		}
	}
}

// finishProbeOnly reports a -probe-only run and gives its exit status.
func finishProbeOnly(p *probeReport, asJSON bool, rank int, stdout, stderr io.Writer) int {
	if rank < 0 {
		rank = rankFromEnv()
	}
	switch {
	case rank > 0:
		printProbeErrors(stderr, rank, *p)
	case asJSON:
		if err := writeJSON(stdout, p); err != nil {
			fmt.Fprintf(stderr, "gpucomm check: %v\n", err)
			return exitFail
		}
	default:
		writeProbe(stdout, *p)
	}
	if p.failed() {
		return exitFail
	}
	return exitOK
}
