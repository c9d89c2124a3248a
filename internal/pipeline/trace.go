package pipeline

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// TraceEnv asks for a timeline of pipelined transfers on standard error:
// "SKIP,COUNT" traces COUNT transfers of two chunks or more after skipping
// the first SKIP (warm-up), each as one line a chunk with when its stages
// began and ended, in µs from the transfer's start. For finding where a
// pipeline loses time; it costs nothing when unset.
const TraceEnv = "GPUCOMM_TRACE_PIPELINE"

// Tracer picks the transfers to trace; nil traces none.
type Tracer struct {
	skip, count int64
	seen        atomic.Int64
	w           io.Writer
}

// NewTracer reads TraceEnv; a malformed value is an error, so that a
// diagnostic run never silently traces nothing.
func NewTracer(v string) (*Tracer, error) {
	if v == "" {
		return nil, nil
	}
	a, b, ok := strings.Cut(v, ",")
	skip, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	count, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	if !ok || err1 != nil || err2 != nil || skip < 0 || count < 1 {
		return nil, fmt.Errorf("%s=%q: want SKIP,COUNT, e.g. 20,2: %w", TraceEnv, v, errs.ErrInvalidArgument)
	}
	return &Tracer{skip: skip, count: count, w: os.Stderr}, nil
}

// chunkTimes is one chunk's timeline; zero where a stage did not run.
type chunkTimes struct {
	inStart, inEnd, posted, mpiDone, outStart, outEnd time.Duration
}

// pipeTrace is one traced transfer. Each stage writes only its own fields
// of a row, and the rows are read after the stages have ended.
type pipeTrace struct {
	start time.Time
	rows  []chunkTimes
}

// begin returns a trace for a transfer of k chunks, or nil when this one
// is not traced.
func (t *Tracer) begin(k int) *pipeTrace {
	if t == nil || k < 2 {
		return nil
	}
	n := t.seen.Add(1) - 1
	if n < t.skip || n >= t.skip+t.count {
		return nil
	}
	return &pipeTrace{start: time.Now(), rows: make([]chunkTimes, k)}
}

// at is now, from the transfer's start.
func (p *pipeTrace) at() time.Duration { return max(time.Since(p.start), time.Nanosecond) }

// print writes the timeline, a line a chunk.
func (p *pipeTrace) print(t *Tracer, rank int, what string, spans [][2]int) {
	if p == nil {
		return
	}
	var b strings.Builder
	total := time.Since(p.start)
	fmt.Fprintf(&b, "trace rank %d: %s, %d chunks, %.1f µs\n", rank, what, len(spans), us(total))
	for j, r := range p.rows {
		fmt.Fprintf(&b, "trace rank %d:   chunk %d (%d bytes at %d): in %s, mpi %s, out %s\n", rank, j, spans[j][1], spans[j][0],
			interval(r.inStart, r.inEnd), interval(r.posted, r.mpiDone), interval(r.outStart, r.outEnd))
	}
	io.WriteString(t.w, b.String())
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func interval(a, b time.Duration) string {
	if a == 0 && b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f–%.1f", us(a), us(b))
}
