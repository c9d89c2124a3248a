package bench

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpucomm/gpucomm/comm"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The plot's geometry: one row of two panels (bandwidth, time) per
// operation, PlotWidth wide and PlotRowHeight tall each, at PlotDPI for PNG.
const (
	PlotWidth     = 10 * vg.Inch
	PlotRowHeight = 3 * vg.Inch
	PlotDPI       = 96
)

// PlotPixels is the size of the PNG that WritePlot makes for rows operations.
func PlotPixels(rows int) (w, h int) {
	return int(math.Round(float64(PlotWidth / vg.Inch * PlotDPI))), int(math.Round(float64(vg.Length(rows) * PlotRowHeight / vg.Inch * PlotDPI)))
}

// PlotFile draws reports to path, as PNG or SVG by its extension.
// The plot is drawn first and written to a new file beside path, which
// then replaces path: a plot that fails leaves path as it was.
func PlotFile(path string, reports []*Report) (err error) {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if format != "png" && format != "svg" {
		return fmt.Errorf("plot %s: want a .png or .svg file", path)
	}
	var buf bytes.Buffer
	if err := WritePlot(&buf, format, reports); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("plot %s: not a regular file", path)
		}
		mode = fi.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	_, err = f.Write(buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, mode)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// WritePlot draws, for each operation measured in any report, the bus
// bandwidth (bandwidth for point-to-point) and the time against size on
// log-scale size axes, one line per report and a dashed one per baseline.
// format is "png" or "svg".
func WritePlot(w io.Writer, format string, reports []*Report) (err error) {
	// What the checks below miss that gonum cannot draw is an error too.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plot: cannot draw these results: %v", r)
		}
	}()
	var ops []Operation
	seen := map[Operation]bool{}
	for i, r := range reports {
		if r == nil {
			return fmt.Errorf("plot: report %d is nil: %w", i, comm.ErrInvalidArgument)
		}
		for _, res := range r.Results {
			if !plottable(res) {
				continue
			}
			if !seen[res.Operation] {
				seen[res.Operation] = true
				ops = append(ops, res.Operation)
			}
		}
	}
	if len(ops) == 0 {
		return fmt.Errorf("plot: no results to draw (none has a positive size and a finite bandwidth)")
	}
	height := vg.Length(len(ops)) * PlotRowHeight
	var canvas vg.CanvasWriterTo
	switch format {
	case "png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(PlotWidth, height), vgimg.UseDPI(PlotDPI),
			vgimg.UseBackgroundColor(color.White))}
	case "svg":
		canvas = vgsvg.New(PlotWidth, height)
	default:
		return fmt.Errorf("plot: format %q: want png or svg", format)
	}
	plots := make([][]*plot.Plot, len(ops))
	for i, op := range ops {
		bw, t, err := opPlots(op, reports)
		if err != nil {
			return err
		}
		plots[i] = []*plot.Plot{bw, t}
	}
	tiles := draw.Tiles{Rows: len(ops), Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	dc := draw.New(canvas)
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j, p := range plots[i] {
			p.Draw(canvases[i][j])
		}
	}
	_, err = canvas.WriteTo(w)
	return err
}

// opPlots makes one operation's two panels.
func opPlots(op Operation, reports []*Report) (bw, t *plot.Plot, err error) {
	bw, t = plot.New(), plot.New()
	what := "bus bandwidth"
	if op.PointToPoint() {
		what = "bandwidth"
	}
	bw.Title.Text = fmt.Sprintf("%v: %s", op, what)
	bw.Y.Label.Text = "GB/s"
	t.Title.Text = fmt.Sprintf("%v: time", op)
	if op == PingPong {
		t.Title.Text = "pingpong: latency (half a round trip)"
	}
	t.Y.Label.Text = "µs"
	for _, p := range []*plot.Plot{bw, t} {
		p.X.Label.Text = "size (bytes)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = sizeTicks{}
		p.Add(plotter.NewGrid())
	}
	bw.Legend.Top, bw.Legend.Left = true, true
	t.Legend.Top, t.Legend.Left = true, true
	var anyTime bool
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for i, r := range reports {
		var bwPts, tPts, bbwPts, btPts plotter.XYs
		for _, res := range r.Results {
			if res.Operation != op || !plottable(res) {
				continue
			}
			x := float64(res.Size)
			xmin, xmax = min(xmin, x), max(xmax, x)
			bwPts = append(bwPts, plotter.XY{X: x, Y: res.BusBW})
			if onLog(res.Time.Median) {
				tPts = append(tPts, plotter.XY{X: x, Y: res.Time.Median})
			}
			if b := res.Baseline; b != nil && b.Error == "" {
				if finite(b.BusBW) {
					bbwPts = append(bbwPts, plotter.XY{X: x, Y: b.BusBW})
				}
				if onLog(b.Time.Median) {
					btPts = append(btPts, plotter.XY{X: x, Y: b.Time.Median})
				}
			}
		}
		name := r.Name()
		c := plotutil.Color(i)
		if err := addLine(bw, name, bwPts, c, false); err != nil {
			return nil, nil, err
		}
		if err := addLine(t, name, tPts, c, false); err != nil {
			return nil, nil, err
		}
		if err := addLine(bw, name+" baseline", bbwPts, c, true); err != nil {
			return nil, nil, err
		}
		if err := addLine(t, name+" baseline", btPts, c, true); err != nil {
			return nil, nil, err
		}
		anyTime = anyTime || len(tPts) > 0 || len(btPts) > 0
	}
	if anyTime {
		t.Y.Scale = plot.LogScale{}
		t.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if xmin > xmax {
		return nil, nil, fmt.Errorf("plot: %v has no result to draw", op)
	}
	for _, p := range []*plot.Plot{bw, t} {
		// Both panels span the sizes drawn, the time panel too when it
		// has no point (no time), which would leave a log axis at 0.
		p.X.Min, p.X.Max = xmin, xmax
		widenLog(&p.X.Min, &p.X.Max)
	}
	if anyTime {
		widenLog(&t.Y.Min, &t.Y.Max)
	}
	return bw, t, nil
}

// plottable says whether a result can be a point of a plot: a size on the
// log axis and a finite bandwidth.
func plottable(res Result) bool { return onLog(float64(res.Size)) && finite(res.BusBW) }

// onLog says whether v can go on a log axis (and widening it by a factor of
// two stays in range).
func onLog(v float64) bool { return v >= 1e-300 && v <= 1e300 }

// finite says whether v can go on a linear axis, with room to pad it.
func finite(v float64) bool { return v >= -1e300 && v <= 1e300 }

// addLine adds a series with points, dashed for a baseline; none for no data.
func addLine(p *plot.Plot, name string, pts plotter.XYs, c color.Color, dashed bool) error {
	if len(pts) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	l.Color, s.Color = c, c
	s.Radius = vg.Points(2)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		s.Shape = draw.RingGlyph{}
	}
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

// widenLog spreads a log axis that holds a single value, which would
// otherwise have no width (and a log of a non-positive bound).
func widenLog(lo, hi *float64) {
	if *lo > 0 && *lo == *hi {
		*lo, *hi = *lo/2, *hi*2
	}
}

// sizeTicks labels a byte axis at powers of two (8, 1K, 1M...), with
// unlabelled minor ticks between labels.
type sizeTicks struct{}

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	first, last := int(math.Floor(math.Log2(lo))), int(math.Ceil(math.Log2(hi)))
	step := max(1, (last-first+7)/8) // at most about eight labels
	var ticks []plot.Tick
	for e := first; e <= last; e++ {
		v := math.Exp2(float64(e))
		if v < lo || v > hi {
			continue
		}
		t := plot.Tick{Value: v}
		if (e-first)%step == 0 {
			t.Label = FormatSize(int64(v))
		}
		ticks = append(ticks, t)
	}
	return ticks
}
