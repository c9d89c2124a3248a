package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpucomm/gpucomm/comm"
)

// Report is one run: how it was measured and a result per operation and
// size. It is what -json writes and -compare reads.
type Report struct {
	Backend    string   `json:"backend"`
	Ranks      int      `json:"ranks"`
	Device     string   `json:"device"`
	Timing     string   `json:"timing"` // "events" (device time), "wall", or "wall, no stream" (Config.NoStream)
	Baseline   string   `json:"baseline"`
	DType      string   `json:"dtype"`
	Op         string   `json:"op"`
	Root       int      `json:"root"`
	Iters      int      `json:"iters"`
	Warmup     int      `json:"warmup"`
	Checks     int      `json:"checks"`
	Window     int      `json:"window"`
	MinBytes   int64    `json:"min_bytes"`
	MaxBytes   int64    `json:"max_bytes"`
	StepFactor int      `json:"step_factor"`
	Date       string   `json:"date"`
	Label      string   `json:"label,omitempty"` // names the run in plots; backend and ranks when empty
	Results    []Result `json:"results"`
}

// Result is one operation at one size. Times are in microseconds, gathered
// per iteration as the slowest rank's; bandwidths come from the median time.
type Result struct {
	Operation Operation       `json:"operation"`
	Size      int64           `json:"size"`  // bytes, S in nccl-tests' convention
	Count     int             `json:"count"` // the count argument, in elements
	Type      string          `json:"type"`
	Redop     string          `json:"redop"` // "none" for operations without one
	Root      int             `json:"root"`  // -1 for operations without one
	Time      Summary         `json:"time_us"`
	AlgBW     float64         `json:"algbw_gbps"`
	BusBW     float64         `json:"busbw_gbps"`
	Wrong     int64           `json:"wrong"` // wrong elements over all ranks, worst checked iteration; -1 unchecked
	Baseline  *BaselineResult `json:"baseline,omitempty"`
}

// BaselineResult is the C loop's timing of the same operation and size.
type BaselineResult struct {
	Time       Summary `json:"time_us"`
	AlgBW      float64 `json:"algbw_gbps"`
	BusBW      float64 `json:"busbw_gbps"`
	TimeRatio  float64 `json:"time_ratio"`  // gpucomm's median time over the baseline's
	BusBWRatio float64 `json:"busbw_ratio"` // gpucomm's busbw over the baseline's
	Error      string  `json:"error,omitempty"`
}

// Name is what plots call the run: its label, or its backend and ranks.
func (r *Report) Name() string {
	if r == nil {
		return ""
	}
	if r.Label != "" {
		return r.Label
	}
	return fmt.Sprintf("%s, %d ranks", r.Backend, r.Ranks)
}

func newResult(st step, cfg Config, n int, samples []float64, wrongs []int64) Result {
	res := Result{
		Operation: st.op, Size: st.shape.Bytes, Count: st.shape.Count, Type: cfg.DType.String(),
		Redop: "none", Root: -1, Time: Summarize(samples).Scale(1e6), Wrong: -1,
	}
	if st.op.Reduces() {
		res.Redop = cfg.Op.String()
	}
	if st.op.Rooted() {
		res.Root = cfg.Root
	}
	res.AlgBW = GBps(st.shape.Bytes, res.Time.Median/1e6)
	res.BusBW = res.AlgBW * BusFactor(st.op, n)
	for _, w := range wrongs {
		res.Wrong = max(res.Wrong, w)
	}
	return res
}

func (res *Result) setBaseline(b baselineTimes, st step, n int) {
	if b.err != "" {
		res.Baseline = &BaselineResult{Error: b.err}
		return
	}
	bt := Summarize(b.samples).Scale(1e6)
	br := &BaselineResult{Time: bt, AlgBW: GBps(st.shape.Bytes, bt.Median/1e6)}
	br.BusBW = br.AlgBW * BusFactor(st.op, n)
	if bt.Median > 0 {
		br.TimeRatio = res.Time.Median / bt.Median
	}
	if br.BusBW > 0 {
		br.BusBWRatio = res.BusBW / br.BusBW
	}
	res.Baseline = br
}

// fmtTime writes microseconds as nccl-tests does: fewer decimals as the
// number grows.
func fmtTime(us float64) string {
	switch {
	case us >= 10000:
		return strconv.FormatFloat(us, 'f', 0, 64)
	case us >= 100:
		return strconv.FormatFloat(us, 'f', 1, 64)
	}
	return strconv.FormatFloat(us, 'f', 2, 64)
}

func fmtRatio(v float64) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func fmtWrong(w int64) string {
	if w < 0 {
		return "-"
	}
	return strconv.FormatInt(w, 10)
}

// TableColumns are the table's columns, nccl-tests' first.
var TableColumns = []string{"size", "count", "type", "redop", "root", "time", "p10", "p90", "algbw", "busbw", "#wrong", "base", "time/base", "busbw/base"}

var tableUnits = []string{"(B)", "(elements)", "", "", "", "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "", ""}

// sections groups results by operation, in the order they were measured.
func (r *Report) sections() ([]Operation, map[Operation][]Result) {
	var order []Operation
	by := map[Operation][]Result{}
	for _, res := range r.Results {
		if _, ok := by[res.Operation]; !ok {
			order = append(order, res.Operation)
		}
		by[res.Operation] = append(by[res.Operation], res)
	}
	return order, by
}

// describe says what an operation's time means.
func describe(op Operation, window int) string {
	switch op {
	case PingPong:
		return "osu_latency: time is half a round trip between ranks 0 and 1"
	case Bandwidth:
		return fmt.Sprintf("osu_bw: windows of %d sends from rank 0 to rank 1, then an ack; time is one message's share", window)
	}
	return fmt.Sprintf("nccl-tests: size is the whole array, busbw = algbw x %s", busFactorText(op))
}

func busFactorText(op Operation) string {
	switch op {
	case AllReduce:
		return "2(n-1)/n"
	case AllGather, ReduceScatter, AllToAll:
		return "(n-1)/n"
	}
	return "1"
}

// WriteTable writes the report for people, in nccl-tests' layout with the
// spread (p10, p90) and the baseline ratios added.
func (r *Report) WriteTable(w io.Writer) error {
	if r == nil {
		return errNilReport
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# gpucomm bench: backend %s, %d ranks, device %s, %s timing\n", r.Backend, r.Ranks, r.Device, r.Timing)
	fmt.Fprintf(&b, "# %d iterations per size after %d warm-up, %d checked; time is the median over iterations of the slowest rank\n", r.Iters, r.Warmup, r.Checks)
	fmt.Fprintf(&b, "# baseline: %s\n", r.Baseline)
	order, by := r.sections()
	var wrong int64
	checked := false // any row's results checked (-c 0 checks none)
	for _, op := range order {
		fmt.Fprintf(&b, "#\n# %s (%s)\n", op, describe(op, r.Window))
		// Right-aligned cells always start with padding, so the header lines
		// get their leading "#" by overwriting a space after formatting.
		var tb strings.Builder
		tw := tabwriter.NewWriter(&tb, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(TableColumns, "\t")+"\t")
		fmt.Fprintln(tw, strings.Join(tableUnits, "\t")+"\t")
		var busbw float64
		for _, res := range by[op] {
			base, tr, br := "-", "-", "-"
			if bl := res.Baseline; bl != nil && bl.Error == "" {
				base, tr, br = fmtTime(bl.Time.Median), fmtRatio(bl.TimeRatio), fmtRatio(bl.BusBWRatio)
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t\n",
				res.Size, res.Count, res.Type, res.Redop, res.Root, fmtTime(res.Time.Median), fmtTime(res.Time.P10),
				fmtTime(res.Time.P90), res.AlgBW, res.BusBW, fmtWrong(res.Wrong), base, tr, br)
			busbw += res.BusBW
			wrong += max(res.Wrong, 0)
			checked = checked || res.Wrong >= 0
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for i, line := range strings.SplitAfter(tb.String(), "\n") {
			if i < 2 && line != "" {
				line = "#" + line[1:]
			}
			b.WriteString(line)
		}
		for _, res := range by[op] {
			if bl := res.Baseline; bl != nil && bl.Error != "" {
				fmt.Fprintf(&b, "# baseline of %s failed: %s\n", op, bl.Error)
				break
			}
		}
		fmt.Fprintf(&b, "# Avg bus bandwidth    : %.4g GB/s\n", busbw/float64(len(by[op])))
	}
	verdict := fmt.Sprintf("%d OK", wrong)
	switch {
	case wrong > 0:
		verdict = fmt.Sprintf("%d FAILED", wrong)
	case !checked && r.Checks == 0:
		// "0 OK" would claim results that nobody looked at.
		verdict = "not checked (-c 0)"
	case !checked:
		verdict = "not checked"
	}
	fmt.Fprintf(&b, "#\n# Wrong elements : %s\n", verdict)
	_, err := io.WriteString(w, b.String())
	return err
}

// Wrong is the number of wrong elements over every result.
func (r *Report) Wrong() int64 {
	var n int64
	if r == nil {
		return 0
	}
	for _, res := range r.Results {
		n += max(res.Wrong, 0)
	}
	return n
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	if r == nil {
		return errNilReport
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// CSVHeader is the first row WriteCSV writes.
var CSVHeader = []string{
	"backend", "ranks", "device", "timing", "operation", "size", "count", "type", "redop", "root",
	"time_us", "time_min_us", "time_p10_us", "time_p90_us", "time_max_us", "time_mean_us",
	"algbw_gbps", "busbw_gbps", "wrong", "base_time_us", "base_busbw_gbps", "time_ratio", "busbw_ratio",
}

// WriteCSV writes one row per result, after a header row.
func (r *Report) WriteCSV(w io.Writer) error {
	if r == nil {
		return errNilReport
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, res := range r.Results {
		base := []string{"", "", "", ""}
		if bl := res.Baseline; bl != nil && bl.Error == "" {
			base = []string{f(bl.Time.Median), f(bl.BusBW), f(bl.TimeRatio), f(bl.BusBWRatio)}
		}
		t := res.Time
		row := []string{r.Backend, strconv.Itoa(r.Ranks), r.Device, r.Timing, res.Operation.String(),
			strconv.FormatInt(res.Size, 10), strconv.Itoa(res.Count), res.Type, res.Redop, strconv.Itoa(res.Root),
			f(t.Median), f(t.Min), f(t.P10), f(t.P90), f(t.Max), f(t.Mean), f(res.AlgBW), f(res.BusBW),
			strconv.FormatInt(res.Wrong, 10)}
		if err := cw.Write(append(row, base...)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadReport reads a report that WriteJSON wrote.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: not a gpucomm bench JSON report: %v", path, err)
	}
	if r.Backend == "" || r.Results == nil {
		return nil, fmt.Errorf("%s: not a gpucomm bench JSON report (no backend or results)", path)
	}
	for i, res := range r.Results {
		if err := res.check(); err != nil {
			return nil, fmt.Errorf("%s: result %d: %v: %w", path, i, err, comm.ErrInvalidArgument)
		}
	}
	return &r, nil
}

// errNilReport is the error of a nil *Report's methods that write.
var errNilReport = fmt.Errorf("bench: nil report: %w", comm.ErrInvalidArgument)

// check refuses what no measured result holds: an unknown operation, a size
// that is not positive, a negative count, and times or bandwidths that are
// negative or not finite.
func (res *Result) check() error {
	if !res.Operation.Valid() {
		return fmt.Errorf("invalid operation %d", int(res.Operation))
	}
	if res.Size <= 0 {
		return fmt.Errorf("%v: size %d: want a positive number of bytes", res.Operation, res.Size)
	}
	if res.Count < 0 {
		return fmt.Errorf("%v of %d bytes: count %d is negative", res.Operation, res.Size, res.Count)
	}
	what := func(prefix string, t Summary, alg, bus float64) error {
		for _, v := range []struct {
			name string
			v    float64
		}{{"time min", t.Min}, {"time p10", t.P10}, {"time median", t.Median}, {"time p90", t.P90},
			{"time max", t.Max}, {"time mean", t.Mean}, {"algbw", alg}, {"busbw", bus}} {
			if v.v < 0 || math.IsNaN(v.v) || math.IsInf(v.v, 0) {
				return fmt.Errorf("%v of %d bytes: %s%s %v: want a finite number, 0 or more", res.Operation, res.Size, prefix, v.name, v.v)
			}
		}
		if t.N < 0 {
			return fmt.Errorf("%v of %d bytes: %s%d samples", res.Operation, res.Size, prefix, t.N)
		}
		return nil
	}
	if err := what("", res.Time, res.AlgBW, res.BusBW); err != nil {
		return err
	}
	if b := res.Baseline; b != nil {
		if err := what("baseline ", b.Time, b.AlgBW, b.BusBW); err != nil {
			return err
		}
		for _, v := range []float64{b.TimeRatio, b.BusBWRatio} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%v of %d bytes: baseline ratio %v: want a finite number, 0 or more", res.Operation, res.Size, v)
			}
		}
	}
	return nil
}
