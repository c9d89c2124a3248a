package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/internal/launcher"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Exit statuses of Main, the same as every gpucomm subcommand's.
const (
	ExitOK    = 0
	ExitFail  = 1 // an error, or wrong results
	ExitUsage = 2
)

// CommandSummary is the one-line description of the bench command.
const CommandSummary = "measure collectives and point-to-point transfers, nccl-tests and OSU style"

const description = `Bench times collectives in the manner of NVIDIA's nccl-tests (size, count,
type, redop, root, time, algbw, busbw, #wrong) and point-to-point latency
and bandwidth in the manner of the OSU micro-benchmarks, over a size sweep.
Each row is the median over the timed iterations (p10 and p90 beside it);
results are checked against values computed in Go on -c iterations per size.
Where a backend has a library underneath (MPI, NCCL), the same operation is
also timed from a C loop straight to that library, and the base, time/base
and busbw/base columns show gpucomm's overhead.

With the local backend every rank is a goroutine of this process (-np of
them). With any other backend run it under mpirun, one process a rank:

	mpirun -np 8 gpucomm bench -backend mpi -op allreduce,pingpong

Every process then measures; rank 0 prints. GPUCOMM_BACKEND, when set,
overrides -backend.`

// listFlag collects a flag given several times or as a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}

// options are Main's flags, parsed.
type options struct {
	backend, device, ops, dtype, redop, min, max, step string
	np, factor, root, iters, warmup, checks, window    int
	timeout                                            time.Duration
	json, csv, noBaseline, noProgress, wall, noStream  bool
	plot, label, cpuProfile                            string
	compare                                            listFlag
	set                                                map[string]bool
}

// dtypeAliases accepts nccl-tests' -d names besides gpucomm's own.
var dtypeAliases = map[string]comm.DType{
	"char": comm.Int8, "int": comm.Int32, "half": comm.Float16, "float": comm.Float32, "double": comm.Float64,
	"fp16": comm.Float16, "bf16": comm.BFloat16, "fp32": comm.Float32, "fp64": comm.Float64,
}

func parseDType(s string) (comm.DType, error) {
	if d, ok := dtypeAliases[strings.ToLower(s)]; ok {
		return d, nil
	}
	var names []string
	for _, d := range comm.DTypes() {
		if d.String() == strings.ToLower(s) {
			return d, nil
		}
		names = append(names, d.String())
	}
	return 0, fmt.Errorf("unknown dtype %q (want %s, or nccl-tests' char, int, half, float, double, or fp16, bf16, fp32, fp64)", s, strings.Join(names, ", "))
}

func parseRedop(s string) (comm.Op, error) {
	var names []string
	for _, o := range comm.Ops() {
		if o.String() == strings.ToLower(s) {
			return o, nil
		}
		names = append(names, o.String())
	}
	return 0, fmt.Errorf("unknown reduction %q (want %s)", s, strings.Join(names, ", "))
}

// Main is the bench command: it parses args, runs, prints rank 0's report
// and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, fs, code := parseArgs(args, stderr)
	if o == nil {
		return code
	}
	return o.run(ctx, fs, stdout, stderr)
}

// CheckArgs says, as Main would and without running anything, what is
// wrong with args: Main's usage status (ExitUsage, the message on stderr)
// for a flag, a sweep or a -compare file that Main would refuse before it
// starts, ExitOK (0) for -h and for arguments Main would run with. A
// caller that runs part of a benchmark itself (gpucomm bench -pairs) holds
// its arguments to bench's rules so. Under a launcher of several ranks the
// -compare files are left to Main, which reads them on rank 0 and stops
// every rank together when they are not reports.
func CheckArgs(args []string, stderr io.Writer) int {
	o, fs, code := parseArgs(args, stderr)
	if o == nil {
		return code
	}
	if _, err := o.config(); err != nil {
		return usageError(fs, "%v", err)
	}
	if _, multi := launchedRank(); multi {
		// Main reads them on rank 0 once the ranks can agree on the
		// outcome: a rank that stopped here alone, where the file is
		// missing on its node, left the others waiting for it.
		o.compare = nil
	}
	for _, path := range o.compare {
		if _, err := ReadReport(path); err != nil {
			return usageError(fs, "-compare: %v", err)
		}
	}
	if _, err := comm.DefaultOptions(); err != nil {
		fmt.Fprintf(stderr, "gpucomm bench: %v\n", err)
		return ExitUsage
	}
	return ExitOK
}

// parseArgs parses Main's flags into options; nil options and the status
// to exit with when there is nothing to run (-h, a flag error, a stray
// argument).
func parseArgs(args []string, stderr io.Writer) (*options, *flag.FlagSet, int) {
	fs := flag.NewFlagSet("gpucomm bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gpucomm bench [-backend NAME] [-np N] [-op LIST] [-b MIN] [-e MAX] [-f FACTOR] [flags]\n\n%s\n\nFlags:\n", description)
		fs.PrintDefaults()
	}
	def := DefaultConfig()
	var o options
	fs.StringVar(&o.backend, "backend", local.Name, "backend `NAME`: "+strings.Join(comm.Backends(), ", ")+" or auto")
	fs.IntVar(&o.np, "np", 4, "number of in-process ranks `N` (local backend only; under MPI, mpirun sets the rank count)")
	fs.StringVar(&o.device, "device", "", "device `SPEC`: auto, host, cuda or cuda:N (default GPUCOMM_DEVICE, else auto)")
	fs.StringVar(&o.ops, "op", "all", "operations, comma-separated `LIST`: allreduce, allgather, reducescatter, broadcast, reduce, alltoall, pingpong, bw, or all")
	fs.StringVar(&o.min, "b", FormatSize(def.MinBytes), "smallest size in `BYTES` (K, M, G suffixes allowed)")
	fs.StringVar(&o.max, "e", FormatSize(def.MaxBytes), "largest size in `BYTES`")
	fs.IntVar(&o.factor, "f", def.StepFactor, "multiply the size by `FACTOR` at each step (1: add -i instead)")
	fs.StringVar(&o.step, "i", FormatSize(def.StepBytes), "with -f 1, add `BYTES` at each step")
	fs.StringVar(&o.dtype, "d", def.DType.String(), "element `TYPE`: int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64, or nccl-tests' char, int, half, float, double (and fp16, bf16, fp32, fp64)")
	fs.StringVar(&o.redop, "o", def.Op.String(), "reduction `OP` of allreduce, reducescatter and reduce: sum, prod, min, max, avg")
	fs.IntVar(&o.root, "r", def.Root, "`ROOT` rank of broadcast and reduce")
	fs.IntVar(&o.iters, "n", def.Iters, "timed iterations `N` per size")
	fs.IntVar(&o.warmup, "w", def.Warmup, "untimed warm-up iterations `N` per size")
	fs.IntVar(&o.checks, "c", def.Checks, "check the results of `N` of each size's timed iterations, spread evenly (0: none)")
	fs.IntVar(&o.window, "window", def.Window, "sends per window `N` of the bw test")
	fs.DurationVar(&o.timeout, "timeout", 0, "bound each operation by `DURATION` (0: GPUCOMM_TIMEOUT or none)")
	fs.BoolVar(&o.noBaseline, "nobaseline", false, "skip the C-loop baseline")
	fs.BoolVar(&o.wall, "wall", false, "time by wall clock with a barrier before each iteration, also on a GPU (for ranks sharing one GPU)")
	fs.BoolVar(&o.noStream, "nostream", false, "issue each operation on no stream (it returns when done), as the C loop calls MPI; times by wall clock")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON instead of the table")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to `FILE` (each rank under MPI: FILE.RANK)")
	fs.BoolVar(&o.csv, "csv", false, "print the report as CSV instead of the table")
	fs.StringVar(&o.plot, "plot", "", "draw bandwidth and time against size to `FILE` (.png or .svg)")
	fs.Var(&o.compare, "compare", "overlay earlier -json reports from `FILE`s in the plot (repeat or comma-separate)")
	fs.StringVar(&o.label, "label", "", "name this run `NAME` in plots and JSON (default: backend and rank count)")
	ProgressFlags(fs, &o.noProgress, "no progress bar, even on a terminal", "deprecated: -progress=false is -noprogress (as in heat)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, fs, ExitOK
		}
		return nil, fs, ExitUsage
	}
	if fs.NArg() > 0 {
		return nil, fs, usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return &o, fs, ExitOK
}

// ProgressFlags defines -noprogress on fs, which sets *noProgress, and its
// other spelling -progress, whose value sets the opposite: the pair every
// gpucomm command with a progress bar takes.
func ProgressFlags(fs *flag.FlagSet, noProgress *bool, noUsage, progressUsage string) {
	fs.BoolVar(noProgress, "noprogress", false, noUsage)
	fs.BoolFunc("progress", progressUsage, func(v string) error {
		on, err := strconv.ParseBool(v)
		if err == nil {
			*noProgress = !on
		}
		return err
	})
}

func usageError(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fmt.Fprintf(fs.Output(), "Run '%s -h' for usage.\n", fs.Name())
	return ExitUsage
}

// config turns the flags into a Config, or says which flag is wrong.
func (o *options) config() (Config, error) {
	cfg := DefaultConfig()
	var err error
	if o.ops != "all" {
		if cfg.Ops, err = ParseOperations(o.ops); err != nil {
			return cfg, fmt.Errorf("-op: %v", err)
		}
	}
	if cfg.MinBytes, err = ParseSize(o.min); err != nil {
		return cfg, fmt.Errorf("-b: %v", err)
	}
	if cfg.MaxBytes, err = ParseSize(o.max); err != nil {
		return cfg, fmt.Errorf("-e: %v", err)
	}
	if cfg.StepBytes, err = ParseSize(o.step); err != nil {
		return cfg, fmt.Errorf("-i: %v", err)
	}
	if _, err := Sweep(cfg.MinBytes, cfg.MaxBytes, o.factor, cfg.StepBytes); err != nil {
		return cfg, err
	}
	cfg.StepFactor = o.factor
	if cfg.DType, err = parseDType(o.dtype); err != nil {
		return cfg, fmt.Errorf("-d: %v", err)
	}
	if cfg.Op, err = parseRedop(o.redop); err != nil {
		return cfg, fmt.Errorf("-o: %v", err)
	}
	for _, v := range []struct {
		name     string
		val, min int
	}{{"r", o.root, 0}, {"n", o.iters, 1}, {"w", o.warmup, 0}, {"c", o.checks, 0}, {"window", o.window, 1}} {
		if v.val < v.min {
			return cfg, fmt.Errorf("-%s %d: want %d or more", v.name, v.val, v.min)
		}
	}
	if o.json && o.csv {
		return cfg, fmt.Errorf("-json and -csv: pick one")
	}
	if o.timeout < 0 {
		return cfg, fmt.Errorf("-timeout %v: want 0 or more", o.timeout)
	}
	if o.plot != "" {
		if ext := strings.ToLower(o.plot); !strings.HasSuffix(ext, ".png") && !strings.HasSuffix(ext, ".svg") {
			return cfg, fmt.Errorf("-plot %s: want a .png or .svg file", o.plot)
		}
	} else if len(o.compare) > 0 {
		return cfg, fmt.Errorf("-compare draws into the -plot file: give -plot too")
	}
	cfg.Root, cfg.Iters, cfg.Warmup, cfg.Checks, cfg.Window = o.root, o.iters, o.warmup, o.checks, o.window
	cfg.NoBaseline = o.noBaseline
	cfg.Wall = o.wall
	cfg.NoStream = o.noStream
	return cfg, nil
}

func (o *options) run(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	cfg, err := o.config()
	if err != nil {
		return usageError(fs, "%v", err)
	}
	// A malformed variable is a usage error, found before anything runs, as
	// check and heat find it (Open would refuse it too, as a failure).
	if _, err := comm.DefaultOptions(); err != nil {
		fmt.Fprintf(stderr, "gpucomm bench: %v\n", err)
		return ExitUsage
	}
	// note ends each error that the choice of backend causes.
	var note string
	o.backend, note = BackendFromEnv("gpucomm bench", o.backend, o.set["backend"], stderr)
	var opts []comm.Option
	if o.timeout > 0 {
		opts = append(opts, comm.WithTimeout(o.timeout))
	}
	// auto is resolved first, as check and drill resolve it, so that what
	// it picks meets the checks below: on a machine where it means local,
	// -np applies (it was refused) and its default holds (it ran 1 rank).
	name := o.backend
	if name == "auto" || name == "" {
		if name, err = comm.Auto(); err != nil {
			fmt.Fprintf(stderr, "gpucomm bench: %v%s\n", err, note)
			if errors.Is(err, comm.ErrInvalidArgument) {
				return ExitUsage
			}
			return ExitFail
		}
		note = fmt.Sprintf(" (-backend %s picked %s)%s", o.backend, name, note)
	} else if _, err := comm.Probe(name); err != nil {
		fmt.Fprintf(stderr, "gpucomm bench: %v%s\n", err, note)
		return ExitUsage
	}
	if name == local.Name {
		if o.np < 1 || o.np > local.MaxRanks {
			return usageError(fs, "-np %d: want 1 to %d ranks", o.np, local.MaxRanks)
		}
		if d := strings.ToLower(o.device); d != "" && d != "auto" && d != "host" {
			return usageError(fs, "-device %s: the local backend runs on simulated host devices only%s", o.device, note)
		}
		if _, _, err := cfg.resolve(o.np); err != nil {
			return usageError(fs, "%v", err)
		}
		// Under mpirun -np 4 each process would be a job of its own, and
		// GPUCOMM_DEVICE=cuda would be ignored: both are refused.
		if err := errors.Join(comm.CheckLauncher(local.Name), local.CheckDeviceSetting(o.device)); err != nil {
			fmt.Fprintf(stderr, "gpucomm bench: %v%s\n", err, note)
			return ExitFail
		}
		// One process holds every rank: its files fail before any rank
		// waits for another.
		stop, compare, err := o.prepare(true)
		if err != nil {
			if errors.As(err, new(configError)) {
				return usageError(fs, "%v", err)
			}
			fmt.Fprintf(stderr, "gpucomm bench: %v\n", err)
			return ExitFail
		}
		defer stop()
		bar := newBar(stderr, o.noProgress)
		rep, err := RunLocal(ctx, o.np, cfg, bar.progress, opts...)
		bar.finish()
		return o.report(rep, err, compare, stdout, stderr)
	}
	if o.set["np"] && o.np != 1 {
		return usageError(fs, "-np applies to the local backend only; %s takes one rank a process, so set the rank count with mpirun -np%s", name, note)
	}
	if o.device != "" {
		opts = append(opts, comm.WithDevice(o.device))
	}
	c, err := comm.Open(name, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "gpucomm bench: %v%s\n", err, note)
		if errors.Is(err, comm.ErrInvalidArgument) {
			return ExitUsage
		}
		return ExitFail
	}
	defer c.Close()
	// The files come after Open, and a rank's failure with them goes to
	// run's set-up, which every rank agrees on: a rank that stopped here
	// alone waited in MPI_Finalize while the others waited for it in
	// Open's MPI_Comm_dup, for ever.
	stop, compare, err := o.prepare(c.Rank() == 0)
	defer stop()
	return o.runRank(ctx, c, cfg, compare, prepared{err: err}, stdout, stderr)
}

// prepare does this process's file work for the run: it starts the CPU
// profile (-cpuprofile) and, where reports is true (rank 0, which alone
// draws the plot), reads the -compare reports. stop ends the profile, and
// does nothing when none started. A -compare file that is no report is a
// configError: the usage status, as a bad flag.
func (o *options) prepare(reports bool) (stop func(), compare []*Report, err error) {
	stop = func() {}
	if reports {
		for _, path := range o.compare {
			r, err := ReadReport(path)
			if err != nil {
				return stop, nil, configError{fmt.Errorf("-compare: %w", err)}
			}
			compare = append(compare, r)
		}
	}
	if o.cpuProfile != "" {
		s, err := startProfile(o.cpuProfile)
		if err != nil {
			return stop, nil, fmt.Errorf("-cpuprofile: %w", err)
		}
		stop = s
	}
	return stop, compare, nil
}

// runRank runs one rank of a job of processes and reports: rank 0 speaks
// for the job, the others report only their own errors. A rank whose run
// fails where the others may be waiting for it (not at a point every rank
// stops at together) aborts the job once it has said why (comm.Aborter:
// MPI_Abort under the MPI backends, which does not return), so that the
// others do not wait for it for ever when no timeout is set. pre is what
// this rank prepared, which the ranks agree on at set-up.
func (o *options) runRank(ctx context.Context, c comm.Communicator, cfg Config, compare []*Report, pre prepared, stdout, stderr io.Writer) int {
	var code int
	var bar *bar
	var progress Progress
	if c.Rank() == 0 {
		bar = newBar(stderr, o.noProgress)
		progress = bar.progress
	}
	rep, shared, err := run(ctx, c, cfg, progress, pre)
	if c.Rank() == 0 {
		bar.finish()
		code = o.report(rep, err, compare, stdout, stderr)
	} else if err != nil {
		fmt.Fprintf(stderr, "gpucomm bench: rank %d: %v\n", c.Rank(), err)
		code = ExitFail
		if errors.As(err, new(configError)) {
			code = ExitUsage // as rank 0's, which report gives
		}
	}
	if err != nil && !shared {
		comm.Abort(c, fmt.Errorf("bench: rank %d failed where the other ranks may be waiting for it: %w", c.Rank(), err))
	}
	return code
}

// BackendFromEnv applies GPUCOMM_BACKEND, which overrides -backend, to a
// command's -backend value (given: whether the command line set it). It
// returns the backend to run and, when the variable chose it, a note that
// each error the choice causes ends with, so that a shell that still holds
// the variable does not leave the user wondering where the backend came
// from; the note is "" when the variable is unset or agrees with -backend.
// Where the variable overrides a -backend the command line gave, it also
// says so at once on stderr, prefixed with cmd ("gpucomm bench"), whether
// or not an error follows. bench, check and heat all read the variable
// through it.
func BackendFromEnv(cmd, flagValue string, given bool, stderr io.Writer) (backend, note string) {
	env := os.Getenv("GPUCOMM_BACKEND")
	switch {
	case env == "":
		return flagValue, ""
	case given && env == flagValue:
		return env, ""
	case given:
		fmt.Fprintf(stderr, "%s: GPUCOMM_BACKEND=%s overrides -backend %s\n", cmd, env, flagValue)
		return env, fmt.Sprintf(" (the backend came from GPUCOMM_BACKEND=%s in the environment, which overrides -backend %s; "+
			"unset it to choose with -backend)", env, flagValue)
	}
	return env, fmt.Sprintf(" (the backend came from GPUCOMM_BACKEND=%s in the environment; "+
		"unset it to choose with -backend, whose default is %s)", env, flagValue)
}

// report prints rank 0's report and plot, then gives the exit status.
func (o *options) report(rep *Report, runErr error, compare []*Report, stdout, stderr io.Writer) int {
	code := ExitOK
	if runErr != nil {
		for _, line := range errorLines(runErr) {
			fmt.Fprintf(stderr, "gpucomm bench: %s\n", line)
		}
		code = ExitFail
		if errors.As(runErr, new(configError)) {
			code = ExitUsage // the flags asked for what no run can do
		}
	}
	if rep == nil {
		return code
	}
	rep.Label = o.label
	var err error
	switch {
	case o.json:
		err = rep.WriteJSON(stdout)
	case o.csv:
		err = rep.WriteCSV(stdout)
	default:
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpucomm bench: %v\n", err)
		code = ExitFail
	}
	if o.plot != "" && len(rep.Results)+len(compare) > 0 {
		if err := PlotFile(o.plot, append([]*Report{rep}, compare...)); err != nil {
			fmt.Fprintf(stderr, "gpucomm bench: %v\n", err)
			code = ExitFail
		}
	}
	if n := rep.Wrong(); n > 0 {
		fmt.Fprintf(stderr, "gpucomm bench: %d wrong elements: the backend returned incorrect results\n", n)
		code = ExitFail
	}
	return code
}

// bar is a progress bar on stderr when it is a terminal; otherwise it does
// nothing, so logs and pipes stay clean.
type bar struct {
	w   io.Writer
	off bool
	pb  *progressbar.ProgressBar
}

func newBar(stderr io.Writer, off bool) *bar {
	f, ok := stderr.(*os.File)
	return &bar{w: stderr, off: off || !ok || !term.IsTerminal(int(f.Fd()))}
}

func (b *bar) progress(done, total int) {
	if b.off {
		return
	}
	if b.pb == nil {
		b.pb = progressbar.NewOptions(total, progressbar.OptionSetWriter(b.w), progressbar.OptionSetDescription("bench"),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond))
	}
	_ = b.pb.Set(done)
}

func (b *bar) finish() {
	if b.pb != nil {
		_ = b.pb.Finish()
	}
}

// startProfile starts a CPU profile into path, or path.RANK when a launcher
// started several ranks (each rank its own file); stop ends and closes it.
func startProfile(path string) (stop func(), err error) {
	if r, ok := launchedRank(); ok {
		path += "." + strconv.Itoa(r)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// launchedRank is this process's rank as its launcher says it, if one
// started several.
func launchedRank() (int, bool) {
	job, ok := launcher.FromEnv()
	return job.Rank, ok && job.MultiRank()
}
