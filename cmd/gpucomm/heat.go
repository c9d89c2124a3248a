package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/solver"
)

func init() {
	register(&command{name: "heat", summary: "run the distributed heat solver and report time per step, bandwidth and halo wait", run: runHeat})
}

const heatDescription = `Heat runs gpucomm's distributed 2-D heat solver (explicit FTCS, float64 or,
with -dtype float32, float32) on an N×M grid for a number of steps and
reports the time per step, the stencil bandwidth achieved (every cell read
once and written once a step: 16 bytes a cell in float64, 8 in float32, over
the time) and the share of the time spent waiting for halos. The residual,
summed in float64, is reduced every K steps (-k; 1 for every step). The
last line is a checksum of the final field (every cell's bits and place,
boundary included; solver.FieldChecksum), which a run on any number of
ranks, nodes, decomposition and backend must print the same as one rank.

With the local backend every rank is a goroutine of this process (-np of
them). With any other backend run it under mpirun, one process a rank:

	mpirun -np 4 gpucomm heat -backend nccl -n 16384 -steps 1000

GPUCOMM_BACKEND, when set, overrides -backend.`

type heatFlags struct {
	backend   string
	np        int
	n, m      int
	steps     int
	decomp    string
	px, py    int
	overlap   bool
	k         int
	seed      uint64
	device    string
	noProg    bool
	dtype     string
	decompVal solver.Decomposition
	dtypeVal  solver.DType
}

func runHeat(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("heat", "heat [-n N] [-m M] [-steps S] [-dtype float64|float32] [-backend NAME] [-np P] [-decomp rows|2d] [-px X -py Y] [-overlap=false] [-k K]",
		heatDescription, stderr)
	var f heatFlags
	fs.StringVar(&f.backend, "backend", local.Name, "backend `NAME`: "+strings.Join(comm.Backends(), ", ")+" or auto")
	fs.IntVar(&f.np, "np", 4, "number of in-process ranks `P` (local backend only; under MPI mpirun sets it)")
	fs.IntVar(&f.n, "n", 4096, "grid rows `N`, boundary included")
	fs.IntVar(&f.m, "m", 0, "grid columns `M`, boundary included (default N)")
	fs.IntVar(&f.steps, "steps", 100, "number of time steps `S`")
	fs.StringVar(&f.dtype, "dtype", "float64", "element type `TYPE` of the field: float64 or float32")
	fs.StringVar(&f.decomp, "decomp", "rows", "decomposition `KIND`: rows (row slabs) or 2d (a grid of ranks)")
	fs.IntVar(&f.px, "px", 0, "2d only: ranks `X` along the rows (0 with -py 0: chosen as MPI_Dims_create does)")
	fs.IntVar(&f.py, "py", 0, "2d only: ranks `Y` along the columns")
	fs.BoolVar(&f.overlap, "overlap", true, "overlap the halo exchange with the interior update")
	fs.IntVar(&f.k, "k", solver.DefaultResidualEvery, "reduce the residual every `K` steps (0: never)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed `N` of the random initial field")
	fs.StringVar(&f.device, "device", "", "device `SPEC`: auto, host, cuda or cuda:N (default GPUCOMM_DEVICE, else auto; local runs on host devices only)")
	bench.ProgressFlags(fs, &f.noProg, "no progress bar, even on a terminal (as bench's -noprogress)", "deprecated: -progress=false is -noprogress")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	// note ends each error that the choice of backend causes.
	var note string
	f.backend, note = bench.BackendFromEnv("gpucomm heat", f.backend, set["backend"], stderr)
	if f.m == 0 {
		f.m = f.n
	}
	var err error
	switch {
	case f.n < 3 || f.m < 3:
		return usageError(fs, "-n %d -m %d: want a grid of at least 3×3", f.n, f.m)
	case f.steps < 1:
		return usageError(fs, "-steps %d: want 1 or more", f.steps)
	case f.k < 0:
		return usageError(fs, "-k %d: want 0 (never) or more", f.k)
	case f.backend != "auto" && f.backend != "":
		if _, err := comm.Probe(f.backend); err != nil {
			fmt.Fprintf(stderr, "gpucomm heat: %v%s\n", err, note)
			return exitUsage
		}
	default:
		// auto is resolved here, as check and drill resolve it, so that
		// what it picks meets the checks below: where it means local, -np
		// applies (it was refused) and its default holds (it ran 1 rank).
		name, err := resolveBackend(f.backend)
		if err != nil {
			fmt.Fprintf(stderr, "gpucomm heat: %v%s\n", err, note)
			if errors.Is(err, comm.ErrInvalidArgument) {
				return exitUsage
			}
			return exitFail
		}
		note = fmt.Sprintf(" (-backend %s picked %s)%s", f.backend, name, note)
		f.backend = name
	}
	switch {
	case f.backend == local.Name && f.np < 1:
		return usageError(fs, "-np %d: want 1 or more ranks", f.np)
	case f.backend != local.Name && set["np"] && f.np != 1:
		return usageError(fs, "-np applies to the local backend only; %s takes one rank a process, so set the rank count with mpirun -np%s", f.backend, note)
	}
	if f.decompVal, err = solver.ParseDecomposition(f.decomp); err != nil {
		return usageError(fs, "-decomp %q: want rows or 2d", f.decomp)
	}
	if f.dtypeVal, err = solver.ParseDType(f.dtype); err != nil {
		return usageError(fs, "-dtype %q: want float64 or float32", f.dtype)
	}
	if f.decompVal == solver.Rows && (f.px != 0 || f.py != 0) {
		return usageError(fs, "-px and -py apply to -decomp 2d only")
	}
	cfg := solver.Config{N: f.n, M: f.m, Decomp: f.decompVal, Px: f.px, Py: f.py, NoOverlap: !f.overlap,
		ResidualEvery: f.k, Seed: f.seed, Boundary: solver.Boundary{Top: 1}, DType: f.dtypeVal}
	if f.k == 0 {
		cfg.ResidualEvery = -1
	}

	if f.backend == local.Name { // before the ranks are made: -np may be far too many for the grid
		if err := cfg.Validate(f.np); err != nil {
			return usageError(fs, "%v", err)
		}
	}
	comms, err := heatComms(f)
	if err != nil {
		fmt.Fprintf(stderr, "gpucomm heat: %v%s\n", err, note)
		if errors.Is(err, comm.ErrInvalidArgument) {
			return exitUsage
		}
		return exitFail
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	if err := cfg.Validate(comms[0].Size()); err != nil {
		return usageError(fs, "%v", err)
	}
	bar := newHeatBar(stderr, !f.noProg)
	results := make([]heatResult, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b *heatBar
			if c.Rank() == 0 {
				b = bar
			}
			results[i] = heatRank(ctx, c, cfg, f.steps, b)
		}()
	}
	wg.Wait()
	bar.finish()

	code := exitOK
	for _, line := range rankErrors(results) {
		fmt.Fprintf(stderr, "gpucomm heat: %s\n", line)
		code = exitFail
	}
	for _, r := range results {
		if r.rank == 0 && r.err == nil {
			r.report(stdout, comms[0].Backend(), f.steps)
			if r.stopped {
				// The run asked for did not complete: a failure, as
				// bench and check say an interrupt, after the report.
				fmt.Fprintf(stderr, "gpucomm heat: interrupted after %d of %d steps\n", r.steps, f.steps)
			}
		}
		if r.stopped {
			code = exitFail
		}
	}
	return code
}

// rankErrors says each distinct error of the ranks once, with the ranks
// that met it ("ranks 0-3: ..."), in the order of the first rank to meet it.
func rankErrors(results []heatResult) []string {
	var msgs []string
	ranks := map[string][]int{}
	for _, r := range results {
		if r.err == nil {
			continue
		}
		m := r.err.Error()
		if _, seen := ranks[m]; !seen {
			msgs = append(msgs, m)
		}
		ranks[m] = append(ranks[m], r.rank)
	}
	lines := make([]string, len(msgs))
	for i, m := range msgs {
		lines[i] = rankList(ranks[m]) + ": " + m
	}
	return lines
}

// rankList writes ranks as "rank 2", "ranks 0-3" or "ranks 0, 2".
func rankList(rs []int) string {
	if len(rs) == 1 {
		return "rank " + strconv.Itoa(rs[0])
	}
	if rs[len(rs)-1]-rs[0] == len(rs)-1 {
		return fmt.Sprintf("ranks %d-%d", rs[0], rs[len(rs)-1])
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return "ranks " + strings.Join(s, ", ")
}

// localReady refuses what the local backend cannot do here: run under a
// launcher of several ranks (each process would be a job of its own), or
// on the GPU that -device or GPUCOMM_DEVICE asks for.
func localReady(device string) error {
	if err := comm.CheckLauncher(local.Name); err != nil {
		return err
	}
	return local.CheckDeviceSetting(device)
}

// heatComms opens the ranks this process holds: all of them for local,
// this process's one under MPI.
func heatComms(f heatFlags) ([]comm.Communicator, error) {
	if f.backend == local.Name {
		if err := localReady(f.device); err != nil {
			return nil, err
		}
		return local.NewGroup(f.np)
	}
	var opts []comm.Option
	if f.device != "" {
		opts = append(opts, comm.WithDevice(f.device))
	}
	c, err := comm.Open(f.backend, opts...)
	if err != nil {
		return nil, err
	}
	return []comm.Communicator{c}, nil
}

// heatResult is what a rank brings back; the totals over ranks are in every
// rank's copy.
type heatResult struct {
	rank      int
	err       error
	cfg       solver.Config
	size      int
	device    string
	steps     int
	slowest   time.Duration // the slowest rank's time in Step
	elapsed   time.Duration // summed over ranks
	haloWait  time.Duration // summed over ranks
	haloBytes int64         // summed over ranks
	stencil   int64         // bytes a step must move over the whole grid
	residual  float64
	checksum  uint64 // solver.Checksum of the final field
	stopped   bool
}

// The run is cut into chunks of steps: progress is shown and an interrupt
// is agreed on between them. A chunk lasts about heatChunkTime, its size
// doubled or halved after each by the slowest rank's time for the last
// (agreed on with the interrupt, so every rank cuts the run alike), so that
// Ctrl-C stops the run within a fraction of a second and the agreement, one
// small all-reduce, costs nothing measurable. (A hundredth of the steps, as
// the chunk was, ran for minutes before Ctrl-C took effect.)
const heatChunkTime = 100 * time.Millisecond

// nextChunk is the size of the chunk after one of chunk steps that took
// took on the slowest rank.
func nextChunk(chunk int, took time.Duration) int {
	switch {
	case took < heatChunkTime/2 && chunk < math.MaxInt/2:
		return 2 * chunk
	case took > heatChunkTime:
		return max(1, chunk/2)
	}
	return chunk
}

func heatRank(ctx context.Context, c comm.Communicator, cfg solver.Config, steps int, bar *heatBar) heatResult {
	res := heatResult{rank: c.Rank(), size: c.Size(), device: c.Device().String()}
	s, err := solver.New(c, cfg)
	if err != nil {
		res.err = err
		return res
	}
	defer s.Close()
	res.cfg, res.stencil = s.Config(), s.StencilBytes()
	chunk := 1
	for done := 0; done < steps; {
		n := min(chunk, steps-done)
		start := time.Now()
		if err := s.Step(n); err != nil { // Step waits for its steps
			res.err = err
			return res
		}
		took := time.Since(start)
		done += n
		res.steps = done
		bar.progress(done, steps)
		// Every rank must stop at the same step, and cut the rest alike,
		// so they agree on both.
		agreed, err := heatReduce(c, comm.Max, boolToInt(ctx.Err() != nil), int64(took))
		if err != nil {
			res.err = err
			return res
		}
		if agreed[0] != 0 && done < steps {
			res.stopped = true
			break
		}
		chunk = nextChunk(chunk, time.Duration(agreed[1]))
	}
	st := s.Stats()
	slowest, err := heatReduce(c, comm.Max, int64(st.Elapsed))
	if err != nil {
		res.err = err
		return res
	}
	sums, err := heatReduce(c, comm.Sum, int64(st.Elapsed), int64(st.HaloWait), st.HaloBytes)
	if err != nil {
		res.err = err
		return res
	}
	res.slowest = time.Duration(slowest[0])
	res.elapsed, res.haloWait, res.haloBytes = time.Duration(sums[0]), time.Duration(sums[1]), sums[2]
	res.residual = s.Residual()
	if res.checksum, err = s.Checksum(); err != nil {
		res.err = err
	}
	return res
}

// heatReduce all-reduces a few int64 values, now.
func heatReduce(c comm.Communicator, op comm.Op, vals ...int64) ([]int64, error) {
	buf, err := devmem.AllocSlice[int64](c.Device(), len(vals))
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	if err := buf.CopyFrom(vals, nil); err != nil {
		return nil, err
	}
	if err := comm.AllReduce(c, buf, buf, op, nil); err != nil {
		return nil, err
	}
	return buf.ToHost(nil)
}

func boolToInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (r heatResult) report(w io.Writer, backend string, asked int) {
	cfg := r.cfg
	layout := fmt.Sprintf("%d×%d ranks", cfg.Px, cfg.Py)
	overlap := "on"
	if cfg.NoOverlap {
		overlap = "off"
	}
	fmt.Fprintf(w, "heat: %d×%d grid, %d ranks on %s (rank 0 on %s), %s decomposition (%s), overlap %s, %s\n",
		cfg.N, cfg.M, r.size, backend, r.device, cfg.Decomp, layout, overlap, cfg.DType)
	if r.stopped {
		fmt.Fprintf(w, "interrupted after %d of %d steps\n", r.steps, asked)
	}
	perStep := r.slowest / time.Duration(max(r.steps, 1))
	fmt.Fprintf(w, "steps: %d\n", r.steps)
	fmt.Fprintf(w, "time per step: %s (slowest rank)\n", perStep)
	if perStep > 0 {
		bw := float64(r.stencil) / perStep.Seconds()
		fmt.Fprintf(w, "bandwidth: %s/s (%d bytes a step: the grid read once and written once)\n", heatBytes(bw), r.stencil)
	}
	share := 0.0
	if r.elapsed > 0 {
		share = float64(r.haloWait) / float64(r.elapsed)
	}
	fmt.Fprintf(w, "halo wait: %.1f%% of the time (mean over ranks)\n", 100*share)
	fmt.Fprintf(w, "halo traffic: %s a step over all ranks\n", heatBytes(float64(r.haloBytes)/float64(max(r.steps, 1))))
	if cfg.ResidualEvery > 0 && r.steps >= cfg.ResidualEvery {
		fmt.Fprintf(w, "residual: %.6e (every %d steps)\n", r.residual, cfg.ResidualEvery)
	}
	fmt.Fprintf(w, "checksum: %016x (the %d×%d %s field after %d steps; the same for any ranks, decomposition and backend)\n",
		r.checksum, cfg.N, cfg.M, cfg.DType, r.steps)
}

func heatBytes(b float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	i := 0
	for b >= 1000 && i < len(units)-1 {
		b /= 1000
		i++
	}
	return fmt.Sprintf("%.3g %s", b, units[i])
}

// heatBar draws a text progress bar on a terminal and nothing elsewhere.
type heatBar struct {
	w    io.Writer
	on   bool
	mu   sync.Mutex
	last int
}

func newHeatBar(stderr io.Writer, want bool) *heatBar {
	f, ok := stderr.(*os.File)
	return &heatBar{w: stderr, on: want && ok && term.IsTerminal(int(f.Fd()))}
}

func (b *heatBar) progress(done, total int) {
	if b == nil || !b.on {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	const width = 40
	filled := width * done / total
	fmt.Fprintf(b.w, "\rheat [%s%s] %3d%% %d/%d steps", strings.Repeat("#", filled), strings.Repeat(".", width-filled), 100*done/total, done, total)
	b.last = done
}

func (b *heatBar) finish() {
	if b.on && b.last > 0 {
		fmt.Fprintln(b.w)
	}
}
