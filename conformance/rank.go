package conformance

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// seed fixes every input of the suite.
const seed = 0x9e3779b97f4a7c15

// poison fills outputs before a call, so a result never written shows.
const poison = 0xA5

// guard is how many poisoned bytes follow every buffer, to catch overruns.
const guard = 16

// testCase is one case; body runs once per held communicator.
type testCase struct {
	name     string
	large    bool // >= 4 MiB: left out in short mode
	minRanks int
	body     func(r *rank)
}

// caseEnv is what the held ranks of one case share.
type caseEnv struct {
	name   string
	short  bool
	held   int      // ranks this process holds
	inputs sync.Map // inputKey -> *input: generated once per process
	mu     sync.Mutex
	done   map[int]int // call -> held ranks done with its inputs
}

type inputKey struct {
	call, rank int
	tag        string
}

type input struct {
	once sync.Once
	b    []byte
}

// rank is one held communicator running a case body. Every rank issues the
// same sequence of calls whatever it finds, so no process is left waiting in
// a collective that another skipped.
type rank struct {
	c        comm.Communicator
	env      *caseEnv
	calls    int // index of the next generated call, the same on every rank
	fails    []string
	closed   bool
	finished atomic.Bool
}

func (r *rank) run(body func(*rank)) {
	defer r.finished.Store(true)
	defer func() {
		if v := recover(); v != nil {
			stack := string(debug.Stack())
			if i := strings.Index(stack, "\npanic("); i >= 0 {
				stack = stack[i+1:] // from the frame that panicked
			}
			lines := strings.SplitN(stack, "\n", 12)
			r.failf("panic: %v\n%s", v, strings.Join(lines[:len(lines)-1], "\n"))
		}
	}()
	body(r)
}

func (r *rank) id() int { return r.c.Rank() }

func (r *rank) failf(format string, args ...any) {
	r.fails = append(r.fails, fmt.Sprintf(format, args...))
}

// ok records err, if any, and reports whether there was none.
func (r *rank) ok(what string, err error) bool {
	if err != nil {
		r.failf("%s: %v", what, err)
		return false
	}
	return true
}

// next numbers a call, so that its inputs differ from every other call's.
func (r *rank) next() int {
	r.calls++
	return r.calls
}

// input is rank j's data for call number call: n bytes drawn by fill from a
// generator seeded by the case, the call, the rank and tag. Ranks of one
// process share each input, generated once.
func (r *rank) input(call, j int, tag string, fill func(*rand.Rand) []byte) []byte {
	v, _ := r.env.inputs.LoadOrStore(inputKey{call, j, tag}, &input{})
	in := v.(*input)
	in.once.Do(func() {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%s", r.env.name, call, j, tag)
		in.b = fill(rand.New(rand.NewPCG(seed, h.Sum64())))
	})
	return in.b
}

// release forgets the inputs of call once every held rank released it, so
// that a case of many large calls holds one call's inputs at a time.
func (r *rank) release(call int) {
	e := r.env
	e.mu.Lock()
	if e.done == nil {
		e.done = map[int]int{}
	}
	e.done[call]++
	last := e.done[call] >= max(e.held, 1)
	if last {
		delete(e.done, call)
	}
	e.mu.Unlock()
	if !last {
		return
	}
	e.inputs.Range(func(k, _ any) bool {
		if k.(inputKey).call == call {
			e.inputs.Delete(k)
		}
		return true
	})
}

// dbuf is one device allocation of a call, what it held before the call and
// what it must hold after.
type dbuf struct {
	name   string
	buf    devmem.Buffer // the whole allocation, guard included
	init   []byte
	want   []byte // init with the expected results written in
	loose  []byte // per byte: 0 compared exactly, 1 may hold anything
	reduce []reduced
}

// reduced is a region holding a reduction, compared within a tolerance.
type reduced struct {
	off   int
	dt    comm.DType
	op    comm.Op
	terms [][]byte
}

// newBuf allocates len(content)+guard bytes on the rank's device holding
// content then poison. On failure it records why and returns a dbuf whose
// views are the zero Buffer, so the rank still makes its calls.
func (r *rank) newBuf(name string, content []byte) *dbuf {
	return r.newBufOn(r.c.Device(), name, content)
}

// newBufOn is newBuf on another device.
func (r *rank) newBufOn(dev *devmem.Device, name string, content []byte) *dbuf {
	init := make([]byte, len(content)+guard)
	copy(init, content)
	for i := len(content); i < len(init); i++ {
		init[i] = poison
	}
	b := &dbuf{name: name, init: init, want: bytes.Clone(init)}
	s, err := devmem.AllocSlice[byte](dev, len(init))
	if !r.ok("alloc "+name, err) {
		return b
	}
	b.buf = s.Buffer()
	r.ok("fill "+name, s.CopyFrom(init, nil))
	return b
}

// poisoned is n bytes of poison.
func poisoned(n int) []byte { return bytes.Repeat([]byte{poison}, n) }

// view is bytes [off, off+n) of the allocation.
func (r *rank) view(b *dbuf, off, n int) devmem.Buffer {
	if b == nil || b.buf.IsZero() {
		return devmem.Buffer{}
	}
	v, err := b.buf.Slice(off, n)
	r.ok("view of "+b.name, err)
	return v
}

func (b *dbuf) expect(off int, want []byte) { copy(b.want[off:], want) }

func (b *dbuf) expectReduced(off int, dt comm.DType, op comm.Op, terms [][]byte) {
	b.reduce = append(b.reduce, reduced{off, dt, op, terms})
}

func (b *dbuf) expectAny(off, n int) {
	if b.loose == nil {
		b.loose = make([]byte, len(b.init))
	}
	for i := off; i < off+n; i++ {
		b.loose[i] = 1
	}
}

// verify reads the allocation back and compares it with what it must hold.
// It returns what it read (nil if nothing).
func (r *rank) verify(what string, b *dbuf) []byte {
	if b == nil || b.buf.IsZero() {
		return nil
	}
	got, err := devmem.SliceOf[byte](b.buf).ToHost(nil)
	if !r.ok(what+": read back "+b.name, err) {
		return nil
	}
	skip := b.loose // bytes not compared exactly
	for _, red := range b.reduce {
		if skip == nil {
			skip = make([]byte, len(b.init))
		}
		n := len(red.terms[0])
		for i := red.off; i < red.off+n; i++ {
			skip[i] = 1
		}
		if bad := checkReduced(red.dt, red.op, red.terms, got[red.off:red.off+n]); bad != "" {
			r.failf("%s: %s %s", what, b.name, bad)
		}
	}
	if skip == nil && bytes.Equal(got, b.want) {
		return got // the common case, fast even for large buffers
	}
	if d := diffBytes(got, b.want, skip, len(b.init)-guard); d != "" {
		r.failf("%s: %s %s", what, b.name, d)
	}
	return got
}

// diffBytes describes where got differs from want (outside skip), "" if
// nowhere; bytes from end on are the guard.
func diffBytes(got, want, skip []byte, end int) string {
	var first []string
	bad := 0
	for i := range want {
		if (skip != nil && skip[i] != 0) || got[i] == want[i] {
			continue
		}
		bad++
		if len(first) < 3 {
			where := fmt.Sprintf("byte %d", i)
			if i >= end {
				where = fmt.Sprintf("guard byte %d past the end", i-end)
			}
			first = append(first, fmt.Sprintf("%s: got %#02x, want %#02x", where, got[i], want[i]))
		}
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("differs in %d bytes; %v", bad, first)
}

func (r *rank) free(bs ...*dbuf) {
	for _, b := range bs {
		if b != nil && !b.buf.IsZero() {
			r.ok("free "+b.name, b.buf.Free())
		}
	}
}

// stream makes a stream on the rank's device (nil, with the failure
// recorded, if it cannot).
func (r *rank) stream() *devmem.Stream {
	s, err := r.c.Device().NewStream()
	if !r.ok("NewStream", err) {
		return nil
	}
	return s
}

// streamIf is a stream made by stream when on, and nil (calls that return
// when done) otherwise.
func (r *rank) streamIf(on bool) *devmem.Stream {
	if !on {
		return nil
	}
	return r.stream()
}

// finish synchronises and destroys a stream made by stream.
func (r *rank) finish(what string, s *devmem.Stream) {
	if s == nil {
		return
	}
	r.ok(what+": Synchronize", s.Synchronize())
	r.ok(what+": Destroy stream", s.Destroy())
}

// randomBytes is n bytes from g.
func randomBytes(n int) func(*rand.Rand) []byte {
	return func(g *rand.Rand) []byte {
		b := make([]byte, n)
		for i := 0; i < n; i += 8 {
			v := g.Uint64()
			for k := i; k < i+8 && k < n; k++ {
				b[k] = byte(v)
				v >>= 8
			}
		}
		return b
	}
}
