package bench

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// poison is the byte a checked iteration's receive buffer is set to first,
// so a result left over from an earlier iteration cannot pass for a new one.
// 0xFF is NaN in every float type and -1 or the maximum in integer types.
const poison = 0xFF

// checkChunk is how many elements the checker builds and compares at a time,
// so checking a large buffer needs little memory beside it.
const checkChunk = 1 << 14

// inputValue is element i of rank r's send buffer. The values are small
// integers, exact in every element type, so that sums and products over the
// ranks are exact too (Prod uses 1 and 2 only). Data that only moves gets a
// wider range, so that a block from the wrong rank or offset shows.
func inputValue(op Operation, redop comm.Op, r, i int) int64 {
	k := (r*131 + i*7) % 251
	if !op.Reduces() {
		return int64(k)
	}
	if redop == comm.Prod {
		return 1 + int64(k%2)
	}
	return 1 + int64(k%13)
}

// put stores v as element j of dst in dt.
func put(dt comm.DType, dst []byte, j int, v int64) {
	switch dt {
	case comm.Int8, comm.Uint8:
		dst[j] = byte(v)
	case comm.Int32, comm.Uint32:
		binary.NativeEndian.PutUint32(dst[4*j:], uint32(v))
	case comm.Int64, comm.Uint64:
		binary.NativeEndian.PutUint64(dst[8*j:], uint64(v))
	case comm.Float16:
		binary.NativeEndian.PutUint16(dst[2*j:], uint16(comm.HalfFrom(float32(v))))
	case comm.BFloat16:
		binary.NativeEndian.PutUint16(dst[2*j:], uint16(comm.BF16From(float32(v))))
	case comm.Float32:
		binary.NativeEndian.PutUint32(dst[4*j:], math.Float32bits(float32(v)))
	case comm.Float64:
		binary.NativeEndian.PutUint64(dst[8*j:], math.Float64bits(float64(v)))
	}
}

// floatAt reads element j of a floating-point buffer.
func floatAt(dt comm.DType, b []byte, j int) float64 {
	switch dt {
	case comm.Float16:
		return float64(comm.Half(binary.NativeEndian.Uint16(b[2*j:])).Float32())
	case comm.BFloat16:
		return float64(comm.BF16(binary.NativeEndian.Uint16(b[2*j:])).Float32())
	case comm.Float32:
		return float64(math.Float32frombits(binary.NativeEndian.Uint32(b[4*j:])))
	}
	return math.Float64frombits(binary.NativeEndian.Uint64(b[8*j:]))
}

// fillInput writes elements [start, start+n) of rank r's input into dst.
func fillInput(op Operation, dt comm.DType, redop comm.Op, r, start int, dst []byte) {
	n := len(dst) / dt.Size()
	for j := 0; j < n; j++ {
		put(dt, dst, j, inputValue(op, redop, r, start+j))
	}
}

// alignedBytes is a zeroed byte slice aligned for any element type, as
// devmem.FromBytes (used by driver.ReduceInto) needs.
func alignedBytes(n int) []byte {
	return devmem.AsBytes(make([]uint64, (n+7)/8))[:n]
}

// segment is a run of a receive buffer whose expected value is element
// src.. of one rank's input (from >= 0), or the reduction over every rank's
// input at src.. (from < 0).
type segment struct {
	at, n, from, src int
}

// checker knows what one rank's receive buffer must hold after an operation.
type checker struct {
	op    Operation
	dt    comm.DType
	redop comm.Op
	root  int
	rank  int
	ranks int
	shape Shape
}

// segments lays out the expected receive buffer; nil means this rank's
// buffer holds nothing to check (a non-root of Reduce, the ranks that sit
// out a point-to-point test, the sender's ack of bw).
func (k checker) segments() []segment {
	c, all := k.shape.Count, -1
	switch k.op {
	case AllReduce:
		return []segment{{0, c, all, 0}}
	case Reduce:
		if k.rank == k.root {
			return []segment{{0, c, all, 0}}
		}
	case ReduceScatter:
		return []segment{{0, c, all, k.rank * c}}
	case Broadcast:
		return []segment{{0, c, k.root, 0}}
	case AllGather, AllToAll:
		src := 0
		if k.op == AllToAll {
			src = k.rank * c
		}
		segs := make([]segment, k.ranks)
		for b := range segs {
			segs[b] = segment{b * c, c, b, src}
		}
		return segs
	case PingPong:
		// Rank 1 receives rank 0's input and echoes it back to rank 0.
		if k.rank <= 1 {
			return []segment{{0, c, 0, 0}}
		}
	case Bandwidth:
		if k.rank == 1 {
			return []segment{{0, c, 0, 0}}
		}
	}
	return nil
}

// tolerance is the relative error allowed in an element: none where the
// result must be exact (integers, data that moves, Min and Max), and a few
// units in the last place per rank for floating sums, products and averages,
// whose rounding depends on the order a library reduces in.
func (k checker) tolerance() float64 {
	if !k.dt.IsFloat() || !k.op.Reduces() || k.redop == comm.Min || k.redop == comm.Max {
		return 0
	}
	eps := map[comm.DType]float64{comm.Float16: 0x1p-10, comm.BFloat16: 0x1p-7, comm.Float32: 0x1p-23, comm.Float64: 0x1p-52}[k.dt]
	return 2 * float64(k.ranks) * eps
}

// wrong counts the elements of got, this rank's receive buffer, that differ
// from the expected values.
func (k checker) wrong(got []byte) (int64, error) {
	elt := k.dt.Size()
	if len(got) < k.shape.RecvCount*elt {
		return 0, fmt.Errorf("check of %v: %d bytes received, want %d", k.op, len(got), k.shape.RecvCount*elt)
	}
	tol := k.tolerance()
	want := alignedBytes(checkChunk * elt)
	tmp := alignedBytes(checkChunk * elt)
	var bad int64
	for _, s := range k.segments() {
		for off := 0; off < s.n; off += checkChunk {
			n := min(checkChunk, s.n-off)
			w, t := want[:n*elt], tmp[:n*elt]
			if s.from >= 0 {
				fillInput(k.op, k.dt, k.redop, s.from, s.src+off, w)
			} else {
				fillInput(k.op, k.dt, k.redop, 0, s.src+off, w)
				for r := 1; r < k.ranks; r++ {
					fillInput(k.op, k.dt, k.redop, r, s.src+off, t)
					if err := driver.ReduceInto(k.dt, k.redop, w, t); err != nil {
						return 0, err
					}
				}
				if k.redop == comm.Avg {
					if err := driver.DivideInto(k.dt, w, k.ranks); err != nil {
						return 0, err
					}
				}
			}
			g := got[(s.at+off)*elt : (s.at+off+n)*elt]
			bad += k.compare(g, w, n, tol)
		}
	}
	return bad, nil
}

// compare counts the elements of g that differ from w.
func (k checker) compare(g, w []byte, n int, tol float64) int64 {
	elt := k.dt.Size()
	var bad int64
	for j := 0; j < n; j++ {
		gb, wb := g[j*elt:(j+1)*elt], w[j*elt:(j+1)*elt]
		if string(gb) == string(wb) {
			continue
		}
		if tol > 0 {
			gv, wv := floatAt(k.dt, g, j), floatAt(k.dt, w, j)
			if math.Abs(gv-wv) <= tol*math.Max(1, math.Abs(wv)) {
				continue
			}
		}
		bad++
	}
	return bad
}
