package conformance

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/gpucomm/gpucomm/comm"
)

// The reference is written here on purpose, apart from comm's host
// reduction helpers: a bug there must not be copied into the expectation.

var native = binary.NativeEndian

// load reads element i of b as raw bits.
func load(b []byte, es, i int) uint64 {
	switch es {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(native.Uint16(b[2*i:]))
	case 4:
		return uint64(native.Uint32(b[4*i:]))
	}
	return native.Uint64(b[8*i:])
}

func store(b []byte, es, i int, v uint64) {
	switch es {
	case 1:
		b[i] = byte(v)
	case 2:
		native.PutUint16(b[2*i:], uint16(v))
	case 4:
		native.PutUint32(b[4*i:], uint32(v))
	default:
		native.PutUint64(b[8*i:], v)
	}
}

func signed(dt comm.DType) bool { return dt == comm.Int8 || dt == comm.Int32 || dt == comm.Int64 }

// signExtend reads the low es bytes of v as a two's complement number.
func signExtend(v uint64, es int) int64 {
	shift := 64 - 8*uint(es)
	return int64(v<<shift) >> shift
}

func mask(es int) uint64 {
	if es == 8 {
		return math.MaxUint64
	}
	return 1<<(8*uint(es)) - 1
}

// mantissaBits is the stored fraction width of a floating type.
func mantissaBits(dt comm.DType) int {
	switch dt {
	case comm.Float16:
		return 10
	case comm.BFloat16:
		return 7
	case comm.Float32:
		return 23
	}
	return 52
}

// epsilon is the gap between 1 and the next value of a floating type.
func epsilon(dt comm.DType) float64 { return math.Ldexp(1, -mantissaBits(dt)) }

// tiny is the smallest normal value of a floating type, the absolute slack.
func tiny(dt comm.DType) float64 {
	switch dt {
	case comm.Float16:
		return math.Ldexp(1, -14)
	case comm.Float64:
		return math.Ldexp(1, -1022)
	}
	return math.Ldexp(1, -126)
}

// value widens a floating element's bits exactly.
func value(dt comm.DType, bits uint64) float64 {
	switch dt {
	case comm.Float16:
		return halfValue(uint16(bits))
	case comm.BFloat16:
		return float64(math.Float32frombits(uint32(bits) << 16))
	case comm.Float32:
		return float64(math.Float32frombits(uint32(bits)))
	}
	return math.Float64frombits(bits)
}

// halfValue decodes IEEE binary16 from its fields.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10)&0x1f, float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}

// encode stores v, a normal number of dt whose fraction fits dt's width.
func encode(dt comm.DType, v float64) uint64 {
	switch dt {
	case comm.Float16:
		b := math.Float64bits(v)
		exp := int(b>>52&0x7ff) - 1023 + 15
		return b>>63<<15 | uint64(exp)<<10 | b>>42&0x3ff
	case comm.BFloat16:
		return uint64(math.Float32bits(float32(v)) >> 16)
	case comm.Float32:
		return uint64(math.Float32bits(float32(v)))
	}
	return math.Float64bits(v)
}

// reductionInput draws n elements of dt meant to be reduced with op.
// Integers take any value: sums and products wrap the same way everywhere.
// Floats are nonzero (no signed-zero ambiguity for min and max) and near 1
// for products, so that no reduction overflows.
func reductionInput(dt comm.DType, op comm.Op, n int) func(*rand.Rand) []byte {
	if !dt.IsFloat() {
		return randomBytes(n * dt.Size())
	}
	return func(g *rand.Rand) []byte {
		lo, width := 0.5, 1.5
		if op == comm.Prod {
			lo, width = 0.875, 0.25
		}
		drop := uint(52 - mantissaBits(dt))
		b := make([]byte, n*dt.Size())
		for i := range n {
			v := lo + width*g.Float64()
			if g.Uint64()&1 == 1 {
				v = -v
			}
			v = math.Float64frombits(math.Float64bits(v) >> drop << drop) // exactly representable in dt
			store(b, dt.Size(), i, encode(dt, v))
		}
		return b
	}
}

// checkReduced compares got with the reduction of terms (one slice per rank,
// in rank order) element by element: bit for bit for integers, min and max;
// within n·eps·Σ|term| (n·eps·Π|term| for products) for floating sums,
// products and averages. It returns "" or what differs.
func checkReduced(dt comm.DType, op comm.Op, terms [][]byte, got []byte) string {
	if !referenceKnows(dt, op) {
		return fmt.Sprintf("%v %v: the reference has no case for it, so nothing can be checked (add one to conformance/reference.go)", dt, op)
	}
	es := dt.Size()
	n := len(got) / es
	var first []string
	bad := 0
	note := func(i int, msg string) {
		bad++
		if len(first) < 3 {
			first = append(first, fmt.Sprintf("element %d: %s", i, msg))
		}
	}
	for i := range n {
		g := load(got, es, i)
		switch {
		case !dt.IsFloat():
			if w := reduceInts(dt, op, terms, i); g != w {
				note(i, fmt.Sprintf("got %s, want %s", intString(dt, g), intString(dt, w)))
			}
		case op == comm.Min || op == comm.Max:
			if w := pickFloat(dt, op, terms, i); g != w {
				note(i, fmt.Sprintf("got %g (%#x), want %g (%#x)", value(dt, g), g, value(dt, w), w))
			}
		default:
			want, tol := reduceFloats(dt, op, terms, i)
			if v := value(dt, g); !(math.Abs(v-want) <= tol) {
				note(i, fmt.Sprintf("got %g (%#x), want %g ± %.3g", v, g, want, tol))
			}
		}
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("%v %v: %d of %d elements wrong; %s", dt, op, bad, n, strings.Join(first, "; "))
}

func intString(dt comm.DType, v uint64) string {
	if signed(dt) {
		return fmt.Sprint(signExtend(v, dt.Size()))
	}
	return fmt.Sprint(v)
}

// reduceInts reduces element i in the type's own wrapping arithmetic; Avg
// is the wrapped sum divided by the count, truncating, as NCCL does.
func reduceInts(dt comm.DType, op comm.Op, terms [][]byte, i int) uint64 {
	es, m := dt.Size(), mask(dt.Size())
	acc := load(terms[0], es, i)
	for _, t := range terms[1:] {
		v := load(t, es, i)
		switch op {
		case comm.Sum, comm.Avg:
			acc += v
		case comm.Prod:
			acc *= v
		case comm.Min, comm.Max:
			less := v < acc
			if signed(dt) {
				less = signExtend(v, es) < signExtend(acc, es)
			}
			if less == (op == comm.Min) && v != acc {
				acc = v
			}
		}
		acc &= m
	}
	if op == comm.Avg {
		if signed(dt) {
			return uint64(signExtend(acc, es)/int64(len(terms))) & m
		}
		return acc / uint64(len(terms))
	}
	return acc
}

// pickFloat is the bits of the smallest (Min) or largest (Max) term.
func pickFloat(dt comm.DType, op comm.Op, terms [][]byte, i int) uint64 {
	es := dt.Size()
	best := load(terms[0], es, i)
	for _, t := range terms[1:] {
		v := load(t, es, i)
		if a, b := value(dt, v), value(dt, best); (op == comm.Min && a < b) || (op == comm.Max && a > b) {
			best = v
		}
	}
	return best
}

// reduceFloats is the reduction of element i in float64 and how far a
// result computed in dt may stray from it.
func reduceFloats(dt comm.DType, op comm.Op, terms [][]byte, i int) (want, tol float64) {
	es, n := dt.Size(), float64(len(terms))
	sum, abs, prod, absProd := 0.0, 0.0, 1.0, 1.0
	for _, t := range terms {
		v := value(dt, load(t, es, i))
		sum += v
		abs += math.Abs(v)
		prod *= v
		absProd *= math.Abs(v)
	}
	// n terms take n-1 roundings, a final conversion one more, and the
	// float64 reference its own: (n+1)·eps bounds them all.
	slack := (n + 1) * epsilon(dt)
	switch op {
	case comm.Prod:
		return prod, slack*absProd + tiny(dt)
	case comm.Avg:
		return sum / n, slack*abs/n + tiny(dt)
	}
	return sum, slack*abs + tiny(dt)
}

// referenceKnows reports whether the reference reductions above have a case
// for dt and op: an element type or reduction added to driver's tables and
// not here fails every check of it, rather than being compared with a Sum.
func referenceKnows(dt comm.DType, op comm.Op) bool {
	switch op {
	case comm.Sum, comm.Prod, comm.Min, comm.Max, comm.Avg:
	default:
		return false
	}
	switch dt {
	case comm.Int8, comm.Uint8, comm.Int32, comm.Uint32, comm.Int64, comm.Uint64,
		comm.Float16, comm.BFloat16, comm.Float32, comm.Float64:
		return true
	}
	return false
}
