package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
)

// Bench's point-to-point tests (pingpong, bw) run between ranks 0 and 1 of
// its communicator. The -pairs flag, which gpucomm bench reads before the
// package sees its arguments, measures them between other pairs too, in the
// same run: ranks 0 and 1 inside bench's own run (with its C baseline),
// every other pair (a, b) on a communicator split from one of the whole
// job that puts a first and b second, while the other ranks wait. Across
// nodes the default is one pair inside rank 0's node and one across nodes,
// so that the table shows intra-node against inter-node figures.

// pairsUsage is -pairs in bench's -h.
const pairsUsage = `
gpucomm bench also takes:
  -pairs LIST
    	point-to-point PAIRS to measure pingpong and bw between: auto, or
    	A:B,C:D,... (rank A sends first). auto: ranks 0 and 1 on one node;
    	across nodes rank 0 with the first other rank of its node and with
    	the first rank of another node, each line labelled intra-node or
    	inter-node with the two hosts (default "auto"; not with -csv)
`

// rankPair is a point-to-point pair: [0] initiates.
type rankPair [2]int

var firstPair = rankPair{0, 1}

func (p rankPair) String() string { return fmt.Sprintf("%d-%d", p[0], p[1]) }

// takePairsFlag removes -pairs and its value from args, which bench does
// not know. given says whether it was there.
func takePairsFlag(args []string) (spec string, given bool, rest []string, err error) {
	spec = "auto"
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			rest = append(rest, args[i:]...)
			break
		}
		k, v, hasV := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if k != "pairs" {
			rest = append(rest, a)
			// A non-boolean flag's value is the next argument: keep it.
			if !hasV && !benchBoolFlag(k) && i+1 < len(args) {
				rest = append(rest, args[i+1])
				i++
			}
			continue
		}
		if !hasV {
			if i+1 >= len(args) {
				return "", true, nil, errors.New("flag needs an argument: -pairs")
			}
			v = args[i+1]
			i++
		}
		spec, given = v, true
	}
	return spec, given, rest, nil
}

// benchBoolFlag reports whether bench's flag name takes no value.
func benchBoolFlag(name string) bool {
	switch name {
	case "json", "csv", "nobaseline", "noprogress", "wall", "nostream", "h", "help", "progress":
		return true
	}
	return false
}

// parsePairs reads -pairs: "auto" (nil, nil) or A:B,C:D,... checked
// against size ranks.
func parsePairs(spec string, size int) ([]rankPair, error) {
	if strings.TrimSpace(spec) == "auto" {
		return nil, nil
	}
	var pairs []rankPair
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		as, bs, ok := strings.Cut(f, ":")
		a, errA := strconv.Atoi(as)
		b, errB := strconv.Atoi(bs)
		switch {
		case !ok || errA != nil || errB != nil:
			return nil, fmt.Errorf("-pairs %q: %q is no pair of ranks A:B", spec, f)
		case a < 0 || a >= size || b < 0 || b >= size:
			return nil, fmt.Errorf("-pairs %q: %s names a rank outside 0..%d", spec, f, size-1)
		case a == b:
			return nil, fmt.Errorf("-pairs %q: %s pairs a rank with itself", spec, f)
		case slices.Contains(pairs, rankPair{a, b}):
			return nil, fmt.Errorf("-pairs %q: %s twice", spec, f)
		}
		pairs = append(pairs, rankPair{a, b})
	}
	return pairs, nil
}

// autoPairs are the default pairs: rank 0 with the first other rank of its
// node (intra-node), then with the first rank of another node (inter-node);
// ranks 0 and 1 alone where they are all there is.
func (l nodeLayout) autoPairs() []rankPair {
	var pairs []rankPair
	if i := slices.Index(l.hosts[min(1, len(l.hosts)):], l.hosts[0]); i >= 0 {
		pairs = append(pairs, rankPair{0, i + 1})
	}
	if i := slices.IndexFunc(l.hosts, func(h string) bool { return h != l.hosts[0] }); i >= 0 {
		pairs = append(pairs, rankPair{0, i})
	}
	return pairs
}

// choosePairs is the pairs -pairs spec asks for on this layout.
func (l nodeLayout) choosePairs(spec string) ([]rankPair, error) {
	if len(l.hosts) < 2 {
		if strings.TrimSpace(spec) != "auto" {
			return nil, fmt.Errorf("-pairs %q: %d rank, and a pair needs 2", spec, len(l.hosts))
		}
		return nil, nil
	}
	pairs, err := parsePairs(spec, len(l.hosts))
	if err != nil || pairs != nil {
		return pairs, err
	}
	return l.autoPairs(), nil
}

// splitOps is -op split into the point-to-point operations and the rest;
// ok is false where bench would refuse the list (and say why itself).
func splitOps(spec string, ranks int) (p2p, others []bench.Operation, ok bool) {
	ops := bench.Operations
	if spec != "all" {
		var err error
		if ops, err = bench.ParseOperations(spec); err != nil {
			return nil, nil, false
		}
	}
	for _, o := range ops {
		if o.PointToPoint() {
			if ranks >= 2 || spec != "all" {
				p2p = append(p2p, o)
			}
		} else {
			others = append(others, o)
		}
	}
	return p2p, others, true
}

func opList(ops []bench.Operation) string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = o.String()
	}
	return strings.Join(s, ",")
}

// withFlag is args with every -name dropped and -name value appended (or
// -name alone for a boolean, value "").
func withFlag(args []string, name, value string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			out = append(out, args[i:]...)
			break
		}
		k, _, hasV := strings.Cut(strings.TrimLeft(a, "-"), "=")
		bool := benchBoolFlag(k)
		if k == name {
			if !hasV && !bool {
				i++ // and its value
			}
			continue
		}
		out = append(out, a)
		if !hasV && !bool && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
	}
	if value == "" {
		return append(out, "-"+name)
	}
	return append(out, "-"+name, value)
}

// pairRun is what a pair phase needs of bench's flags: the configuration
// and how to open the ranks.
type pairRun struct {
	cfg     bench.Config
	backend string
	np      int
	opts    []comm.Option
}

// pairConfig reads bench's flags as bench does, for the pair phases; bench
// itself has checked them (and refused bad ones) by the time they run.
// Every flag of bench's must be defined here (a test holds it to that).
func pairConfig(args []string, ops []bench.Operation) (pairRun, error) {
	fs := pairFlagSet()
	if err := fs.Parse(args); err != nil {
		return pairRun{}, err
	}
	get := func(name string) string { return fs.Lookup(name).Value.String() }
	num := func(name string) int { n, _ := strconv.Atoi(get(name)); return n }
	cfg := bench.DefaultConfig()
	cfg.Ops = ops
	var err error
	if cfg.MinBytes, err = bench.ParseSize(get("b")); err != nil {
		return pairRun{}, fmt.Errorf("-b: %v", err)
	}
	if cfg.MaxBytes, err = bench.ParseSize(get("e")); err != nil {
		return pairRun{}, fmt.Errorf("-e: %v", err)
	}
	if cfg.StepBytes, err = bench.ParseSize(get("i")); err != nil {
		return pairRun{}, fmt.Errorf("-i: %v", err)
	}
	if cfg.DType, err = benchDType(get("d")); err != nil {
		return pairRun{}, fmt.Errorf("-d: %v", err)
	}
	cfg.StepFactor, cfg.Iters, cfg.Warmup, cfg.Checks, cfg.Window = num("f"), num("n"), num("w"), num("c"), num("window")
	cfg.Wall, cfg.NoStream = get("wall") == "true", get("nostream") == "true"
	// Bench's C baseline times ranks 0 and 1 of MPI_COMM_WORLD: no other pair.
	cfg.NoBaseline = true
	r := pairRun{cfg: cfg, backend: get("backend"), np: num("np")}
	if env := os.Getenv("GPUCOMM_BACKEND"); env != "" { // as bench reads it
		r.backend = env
	}
	if timeout, _ := time.ParseDuration(get("timeout")); timeout > 0 {
		r.opts = append(r.opts, comm.WithTimeout(timeout))
	}
	if dev := get("device"); dev != "" && r.backend != local.Name {
		r.opts = append(r.opts, comm.WithDevice(dev))
	}
	return r, nil
}

// pairFlagSet defines bench's flags, with bench's defaults.
func pairFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("gpucomm bench -pairs", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := bench.DefaultConfig()
	for name, v := range map[string]string{
		"backend": local.Name, "device": "", "op": "all", "b": bench.FormatSize(def.MinBytes), "e": bench.FormatSize(def.MaxBytes),
		"i": bench.FormatSize(def.StepBytes), "d": def.DType.String(), "o": def.Op.String(), "timeout": "0s",
		"cpuprofile": "", "plot": "", "label": "", "compare": "",
	} {
		fs.String(name, v, "")
	}
	for name, v := range map[string]int{
		"np": 4, "f": def.StepFactor, "r": def.Root, "n": def.Iters, "w": def.Warmup, "c": def.Checks, "window": def.Window,
	} {
		fs.Int(name, v, "")
	}
	for _, name := range []string{"nobaseline", "wall", "nostream", "json", "csv", "noprogress", "progress"} {
		fs.Bool(name, false, "")
	}
	return fs
}

// benchDType reads -d as bench does: gpucomm's names or nccl-tests'.
func benchDType(s string) (comm.DType, error) {
	aliases := map[string]comm.DType{
		"char": comm.Int8, "int": comm.Int32, "half": comm.Float16, "float": comm.Float32, "double": comm.Float64,
		"fp16": comm.Float16, "bf16": comm.BFloat16, "fp32": comm.Float32, "fp64": comm.Float64,
	}
	if d, ok := aliases[strings.ToLower(s)]; ok {
		return d, nil
	}
	return comm.ParseDType(strings.ToLower(s))
}

// pairKey orders a split communicator so that p[0] is its rank 0 and p[1]
// its rank 1; the other ranks follow in their order.
func pairKey(p rankPair, rank int) int {
	switch rank {
	case p[0]:
		return 0
	case p[1]:
		return 1
	}
	return 2 + rank
}

// measurePairs runs r's point-to-point tests on each pair, on every rank of
// this process, and returns the reports (every rank gets them) and this
// process's first rank. skip, true on any rank, makes every rank skip them
// (a rank whose first phase failed).
func measurePairs(ctx context.Context, r pairRun, pairs []rankPair, skip bool) (reps []*bench.Report, rank int, err error) {
	if r.backend == local.Name {
		if skip {
			return nil, 0, nil
		}
		cs, err := local.NewGroup(r.np, r.opts...)
		if err != nil {
			return nil, 0, err
		}
		defer closeAll(cs)
		for _, p := range pairs {
			rep, err := measureLocalPair(ctx, cs, r.cfg, p)
			if err != nil {
				return reps, 0, fmt.Errorf("ranks %d and %d: %w", p[0], p[1], err)
			}
			reps = append(reps, rep)
		}
		return reps, 0, nil
	}
	c, err := comm.Open(r.backend, r.opts...)
	if err != nil {
		return nil, -1, err
	}
	defer c.Close()
	rank = c.Rank()
	stop, err := heatReduce(c, comm.Max, boolToInt(skip))
	if err != nil {
		return nil, rank, err
	}
	if stop[0] != 0 {
		return nil, rank, nil
	}
	for _, p := range pairs {
		sub, err := c.Split(0, pairKey(p, rank))
		if err != nil {
			return reps, rank, fmt.Errorf("ranks %d and %d: %w", p[0], p[1], err)
		}
		rep, err := bench.Run(ctx, sub, r.cfg, nil)
		err = errors.Join(err, sub.Close())
		if err != nil {
			return reps, rank, fmt.Errorf("ranks %d and %d: %w", p[0], p[1], err)
		}
		reps = append(reps, rep)
	}
	return reps, rank, nil
}

// measureLocalPair runs cfg on the in-process ranks cs split for pair p.
func measureLocalPair(ctx context.Context, cs []comm.Communicator, cfg bench.Config, p rankPair) (*bench.Report, error) {
	subs := make([]comm.Communicator, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, err := c.Split(0, pairKey(p, i))
			if err == nil {
				subs[sub.Rank()] = sub
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	defer closeAll(subs)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return bench.RunGroup(ctx, subs, cfg, nil)
}

func closeAll(cs []comm.Communicator) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

// pairResults is the reports of the pairs, by pair.
type pairResults map[rankPair][]bench.Result

// pairTable writes the point-to-point results of every pair, each line
// labelled with its ranks, their hosts and intra-node or inter-node, the
// lines of one operation and size together.
func (l nodeLayout) pairTable(w io.Writer, pairs []rankPair, res pairResults, window int, baseline string) {
	var rows []pairRow
	for _, p := range pairs {
		for _, r := range res[p] {
			rows = append(rows, pairRow{p, r})
		}
	}
	slices.SortStableFunc(rows, func(a, b pairRow) int {
		if a.res.Operation != b.res.Operation {
			return int(a.res.Operation) - int(b.res.Operation)
		}
		switch {
		case a.res.Size < b.res.Size:
			return -1
		case a.res.Size > b.res.Size:
			return 1
		}
		return 0
	})
	var b strings.Builder
	fmt.Fprintf(&b, "#\n# pingpong and bw by pair (pingpong: osu_latency, half a round trip; bw: osu_bw, windows of %d sends then an ack, one message's share)\n", window)
	if slices.Contains(pairs, firstPair) {
		baseline = "ranks 0 and 1 as above; " + baseline // the main table's pair
	}
	fmt.Fprintf(&b, "# baseline: %s\n", baseline)
	var tb strings.Builder
	tw := tabwriter.NewWriter(&tb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tranks\thosts\twhere\tsize\tcount\ttype\ttime\tp10\tp90\talgbw\t#wrong\tbase\ttime/base\t")
	fmt.Fprintln(tw, "\t\t\t\t(B)\t(elements)\t\t(us)\t(us)\t(us)\t(GB/s)\t\t(us)\t\t")
	var wrong int64
	checked := false
	for _, row := range rows {
		p, r := row.pair, row.res
		base, ratio := "-", "-"
		if bl := r.Baseline; bl != nil && bl.Error == "" {
			base, ratio = strconv.FormatFloat(bl.Time.Median, 'f', 2, 64), strconv.FormatFloat(bl.TimeRatio, 'f', 2, 64)
		}
		wr := "-"
		if r.Wrong >= 0 {
			wr = strconv.FormatInt(r.Wrong, 10)
			wrong += r.Wrong
			checked = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s,%s\t%s\t%d\t%d\t%s\t%.2f\t%.2f\t%.2f\t%.3f\t%s\t%s\t%s\t\n",
			r.Operation, p, l.hosts[p[0]], l.hosts[p[1]], where(l.hosts[p[0]] != l.hosts[p[1]]), r.Size, r.Count, r.Type,
			r.Time.Median, r.Time.P10, r.Time.P90, r.AlgBW, wr, base, ratio)
	}
	tw.Flush()
	for i, line := range strings.SplitAfter(tb.String(), "\n") {
		if i < 2 && line != "" {
			line = "#" + line[1:]
		}
		b.WriteString(line)
	}
	switch {
	case !checked:
		// As bench's own footer says it: a 0 OK would claim checks never made.
		b.WriteString("#\n# Wrong elements of the pairs : not checked (-c 0)\n")
	case wrong > 0:
		fmt.Fprintf(&b, "#\n# Wrong elements of the pairs : %d FAILED\n", wrong)
	default:
		b.WriteString("#\n# Wrong elements of the pairs : 0 OK\n")
	}
	io.WriteString(w, b.String())
}

type pairRow struct {
	pair rankPair
	res  bench.Result
}
