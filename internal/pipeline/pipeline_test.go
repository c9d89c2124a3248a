package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/errs"
)

// These tests drive real pipelines of copies on the host device. Their
// transport is none (requests of type none, never started) or loop, an
// in-memory loopback between two pipes: a second transport, not a stand-in
// for MPI, whose own tests run the pipeline under mpirun.

type none struct{}

// quiet completes nothing (no request ever starts) and records whether a
// failure left it requests.
type quiet struct{ abandoned atomic.Int64 }

func (q *quiet) Wait([]none) error { return nil }
func (q *quiet) Abandon(reqs [][]none, _ bool, _ error) bool {
	for _, r := range reqs {
		q.abandoned.Add(int64(len(r)))
	}
	return true
}
func (q *quiet) Label() string { return "test" }

// bare is an engine on a host device with slots of at least chunk bytes.
func bare(t *testing.T, chunk int) *Engine {
	t.Helper()
	dev := devmem.NewHostDevice()
	e := &Engine{Pool: NewPool(dev, chunk)}
	var err error
	if e.D2H, err = dev.NewStream(); err != nil {
		t.Fatal(err)
	}
	if e.H2D, err = dev.NewStream(); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *Engine) closeBare(t *testing.T) {
	t.Helper()
	dev := e.Pool.dev
	if err := errors.Join(e.Pool.Close(), e.D2H.Destroy(), e.H2D.Destroy()); err != nil {
		t.Fatal(err)
	}
	if st := dev.Stats(); st != (devmem.Stats{}) {
		t.Errorf("after closing the pool and streams: %+v", st)
	}
}

func randomBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// Every byte goes device → slot → host work → slot → device, whatever the
// number of chunks against the four slots, and nothing past the range moves.
func TestPipelineCarriesEveryChunkThroughTheSlots(t *testing.T) {
	const chunk, guard = 1000, 64
	for _, n := range []int{0, 1, 999, 1000, 1001, 2000, 3999, 4000, 4001, 17*chunk + 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := bare(t, chunk)
			dev := e.Pool.dev
			src := randomBytes(uint64(n), n)
			in, err := dev.Alloc(n + guard)
			if err != nil {
				t.Fatal(err)
			}
			out, err := dev.Alloc(n + guard)
			if err != nil {
				t.Fatal(err)
			}
			poison := bytes.Repeat([]byte{0xa5}, n+guard)
			if err := errors.Join(devmem.CopyFromHost(in, append(append([]byte{}, src...), poison[:guard]...), nil),
				devmem.CopyFromHost(out, poison, nil)); err != nil {
				t.Fatal(err)
			}
			var seen []int
			err = Run(e, &quiet{}, Pipe[none]{
				Bytes: n, Cut: Cut{Chunk: chunk},
				In: CopyIn(in),
				Post: func(s *Slot, off, m int, _ []none) error {
					seen = append(seen, off)
					for i, b := range s.Bytes(m) {
						s.Bytes(m)[i] = b ^ 0x5a
					}
					return nil
				},
				Out: CopyOut(out, 0),
			})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n+guard)
			if err := devmem.CopyToHost(got, out, nil); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if got[i] != src[i]^0x5a {
					t.Fatalf("byte %d: got %#x, want %#x", i, got[i], src[i]^0x5a)
				}
			}
			if !bytes.Equal(got[n:], poison[:guard]) {
				t.Errorf("bytes past the %d moved were written", n)
			}
			for k, off := range seen {
				if off != k*chunk {
					t.Fatalf("chunks reached the host in the order %v", seen)
				}
			}
			if want := (n + chunk - 1) / chunk; len(seen) != want {
				t.Errorf("%d chunks, want %d", len(seen), want)
			}
			if free := e.Pool.Free(e.Pool.Class(chunk)); e.Pool.Lent() != 0 || free != min(Slots, len(seen)) {
				t.Errorf("pool after the transfer: %d lent, %d free", e.Pool.Lent(), free)
			}
			if err := errors.Join(in.Free(), out.Free()); err != nil {
				t.Fatal(err)
			}
			e.closeBare(t)
		})
	}
}

// A point-to-point message of 0 bytes is still one message.
func TestPipelineSendsOneMessageForZeroBytes(t *testing.T) {
	e := bare(t, 64)
	calls := 0
	err := Run(e, &quiet{}, Pipe[none]{Bytes: 0, Cut: Cut{Chunk: 64}, AtLeastOne: true,
		Start: func(s *Slot, off, n int) ([]none, error) { calls++; return nil, nil }})
	if err != nil || calls != 1 {
		t.Errorf("run = %v after %d transport calls; want one call", err, calls)
	}
	e.closeBare(t)
}

// A failing stage stops the pipeline, returns its error, and gives the
// slots back once their copies are done, leaving the transport no request.
func TestPipelineFailureReturnsTheSlots(t *testing.T) {
	e := bare(t, 100)
	buf, err := e.Pool.dev.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	q := &quiet{}
	err = Run(e, q, Pipe[none]{Bytes: 1000, Cut: Cut{Chunk: 100}, In: CopyIn(buf),
		Post: func(s *Slot, off, n int, _ []none) error {
			if off == 300 {
				return boom
			}
			return nil
		},
		Out: CopyOut(buf, 0)})
	if !errors.Is(err, boom) {
		t.Fatalf("run = %v, want boom", err)
	}
	if e.Pool.Lent() != 0 || q.abandoned.Load() != 0 {
		t.Errorf("after the failure: %d slots lent, %d requests abandoned", e.Pool.Lent(), q.abandoned.Load())
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	e.closeBare(t)
}

// A failure in the copy-in stage or in starting the transport stops the
// other stages too, and nothing stays lent.
func TestPipelineFailureInAnyStageStopsEveryStage(t *testing.T) {
	boom := errors.New("boom")
	for _, where := range []string{"in", "mpi"} {
		t.Run(where, func(t *testing.T) {
			e := bare(t, 100)
			buf, err := e.Pool.dev.Alloc(5000)
			if err != nil {
				t.Fatal(err)
			}
			var outs atomic.Int64
			in := CopyIn(buf)
			p := Pipe[none]{Bytes: 5000, Cut: Cut{Chunk: 100},
				In: func(s *Slot, off, n int, st *devmem.Stream) error {
					if where == "in" && off == 700 {
						return boom
					}
					return in(s, off, n, st)
				},
				Start: func(s *Slot, off, n int) ([]none, error) {
					if where == "mpi" && off == 1200 {
						return nil, boom
					}
					return nil, nil
				},
				Out: func(s *Slot, off, n int, st *devmem.Stream) error { outs.Add(1); return nil },
			}
			if err := Run(e, &quiet{}, p); !errors.Is(err, boom) {
				t.Fatalf("run = %v, want boom", err)
			}
			if n := outs.Load(); n >= 50 {
				t.Errorf("%d chunks finished after the failure; want the pipeline stopped", n)
			}
			if e.Pool.Lent() != 0 {
				t.Errorf("%d slots lent after the failure", e.Pool.Lent())
			}
			if err := buf.Free(); err != nil {
				t.Fatal(err)
			}
			e.closeBare(t)
		})
	}
}

// Chunks double from the first up to the cap, cut by index alone (a longer
// message's cuts extend a shorter one's), never below one chunk or past the
// cap, and slots come in sizes that hold them.
func TestChunksGrowAlongTheMessage(t *testing.T) {
	p := Cut{Chunk: 1 << 20, MaxChunk: 4 << 20}
	want := [][2]int{{0, 1 << 20}, {1 << 20, 2 << 20}, {3 << 20, 4 << 20}, {7 << 20, 4 << 20}, {11 << 20, 4 << 20}, {15 << 20, 4 << 20}, {19 << 20, 1 << 20}}
	if got := p.Spans(20<<20, false); !slices.Equal(got, want) {
		t.Errorf("spans of 20 MiB = %v, want %v", got, want)
	}
	short := 5<<20 + 3
	for i, sp := range p.Spans(short, false) {
		if full := p.Spans(20<<20, false)[i]; sp[0] != full[0] || (sp[1] != full[1] && sp[0]+sp[1] != short) {
			t.Errorf("chunk %d of the shorter message %v does not line up with %v", i, sp, full)
		}
	}
	fixed := Cut{Chunk: 1000}
	if got := fixed.Spans(2500, false); !slices.Equal(got, [][2]int{{0, 1000}, {1000, 1000}, {2000, 500}}) {
		t.Errorf("without growth: %v", got)
	}
	if got := (Cut{Chunk: 8}).Spans(0, true); !slices.Equal(got, [][2]int{{0, 0}}) {
		t.Errorf("an empty point-to-point message: %v, want one empty chunk", got)
	}
	pol := Policy{Chunk: 1 << 20}
	if p3, p8 := pol.Cut(3), pol.Cut(8); p3.Chunk != (1<<20)/3*3 || p3.MaxChunk != (4<<20)/3*3 || p8.MaxChunk != 4<<20 {
		t.Errorf("Cut(3) = %+v, Cut(8) = %+v", p3, p8)
	}
	if big := (Policy{Chunk: 16 << 20}).Cut(4); big.MaxChunk != 16<<20 {
		t.Errorf("an agreed chunk above the cap: MaxChunk = %d, want it kept", big.MaxChunk)
	}
	if w := pol.Widened(); w.Chunk != 1<<18 || w.SlotBytes != 1<<20 || w.MaxChunk != 0 {
		t.Errorf("Widened() = %+v, want chunks of a quarter in slots of the agreed chunk", w)
	}
	if w := (Policy{Chunk: 3}).Widened(); w.Chunk != 1 || w.SlotBytes != 4 {
		t.Errorf("Widened() of a 3-byte chunk = %+v, want 1 byte in 4", w)
	}
	if b := (Policy{Chunk: 3}).PoolBase(); b != 8 {
		t.Errorf("PoolBase of a 3-byte chunk = %d, want room for 8", b)
	}
	pl := &Pool{base: 1 << 20}
	for n, want := range map[int]int{1: 1 << 20, 1 << 20: 1 << 20, 1<<20 + 1: 2 << 20, 3 << 20: 4 << 20} {
		if got := pl.Class(n); got != want {
			t.Errorf("slot class for %d bytes = %d, want %d", n, got, want)
		}
	}
}

// GPUCOMM_TRACE_PIPELINE=SKIP,COUNT traces COUNT transfers of two chunks or
// more after SKIP, a line a chunk, each stage's times in order; a malformed
// value is an error.
func TestTraceWritesTheChosenTransfersTimelines(t *testing.T) {
	for _, bad := range []string{"3", "a,1", "1,0", "-1,2", "1,2,3"} {
		if tr, err := NewTracer(bad); tr != nil || !errors.Is(err, errs.ErrInvalidArgument) {
			t.Errorf("%s=%q: %v, %v; want ErrInvalidArgument", TraceEnv, bad, tr, err)
		}
	}
	if tr, err := NewTracer(""); tr != nil || err != nil {
		t.Errorf("unset: %v, %v; want no tracer", tr, err)
	}
	tr, err := NewTracer("1, 2")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	tr.w = &out
	const chunk = 1000
	e := bare(t, chunk)
	e.Trace = tr
	n := 7*chunk + 5 // chunks of 1000, 2000, 4000 and 5 bytes
	buf, err := e.Pool.dev.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 { // the one-chunk transfer is never counted
		size := n
		if i == 2 {
			size = chunk
		}
		p := Pipe[none]{Bytes: size, Cut: Cut{Chunk: chunk, MaxChunk: 8 * chunk}, In: CopyIn(buf), Out: CopyOut(buf, 0),
			Start: func(*Slot, int, int) ([]none, error) { return nil, nil }}
		if err := Run(e, &quiet{}, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	e.closeBare(t)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2*5 || strings.Count(out.String(), ", 4 chunks, ") != 2 || strings.Count(out.String(), ": test, ") != 2 {
		t.Fatalf("want two transfers of 4 chunks traced (the 2nd and 3rd of those with several chunks), labelled by the transport; got:\n%s", out.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, "chunk ") {
			continue
		}
		var j, bytes, at int
		var in0, in1, m0, m1, o0, o1 float64
		if _, err := fmt.Sscanf(l, "trace rank 0:   chunk %d (%d bytes at %d): in %f–%f, mpi %f–%f, out %f–%f",
			&j, &bytes, &at, &in0, &in1, &m0, &m1, &o0, &o1); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if !(0 < in0 && in0 <= in1 && in1 <= m0 && m0 <= m1 && m1 <= o0 && o0 <= o1) {
			t.Errorf("chunk %d's stages out of order: %q", j, l)
		}
	}
}
