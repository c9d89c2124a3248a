package bench

import (
	"fmt"
	"math"
	"slices"
)

// Shape is what one swept size means for an operation on n ranks, in
// nccl-tests' convention: the size is the whole array (S in its
// PERFORMANCE.md), and the count argument of allgather, reducescatter and
// alltoall is the per-rank share of it.
type Shape struct {
	Count     int   // the operation's count argument, in elements (nccl-tests' count column)
	SendCount int   // elements in each rank's send buffer
	RecvCount int   // elements in each rank's receive buffer
	Bytes     int64 // S: the bytes reported in the size column and used for algbw
}

// ShapeOf maps a swept size in bytes to the operation's counts for elements
// of elt bytes on n ranks. A size that is not a whole number of elements (or
// of n elements, where the array is split among ranks) is rounded down, as
// nccl-tests does; the result may have Count 0.
func ShapeOf(op Operation, size int64, elt, n int) (Shape, error) {
	if !op.Valid() {
		return Shape{}, fmt.Errorf("invalid operation %d", int(op))
	}
	if size < 0 || elt < 1 || n < 1 {
		return Shape{}, fmt.Errorf("shape of %v: size %d, element size %d, %d ranks", op, size, elt, n)
	}
	elems := size / int64(elt)
	if elems > math.MaxInt32 {
		// Every backend's count argument is a C int somewhere underneath.
		return Shape{}, fmt.Errorf("%v of %d bytes: %d elements is more than a count can hold", op, size, elems)
	}
	c := int(elems)
	switch op {
	case AllGather:
		per := c / n
		return Shape{Count: per, SendCount: per, RecvCount: per * n, Bytes: int64(per*n) * int64(elt)}, nil
	case ReduceScatter:
		per := c / n
		return Shape{Count: per, SendCount: per * n, RecvCount: per, Bytes: int64(per*n) * int64(elt)}, nil
	case AllToAll:
		per := c / n
		return Shape{Count: per, SendCount: per * n, RecvCount: per * n, Bytes: int64(per*n) * int64(elt)}, nil
	}
	return Shape{Count: c, SendCount: c, RecvCount: c, Bytes: int64(c) * int64(elt)}, nil
}

// BusFactor is the factor from algbw to busbw for op on n ranks, as
// nccl-tests' PERFORMANCE.md defines it; point-to-point transfers have 1.
func BusFactor(op Operation, n int) float64 {
	if n < 1 {
		return 0
	}
	f := float64(n)
	switch op {
	case AllReduce:
		return 2 * (f - 1) / f
	case AllGather, ReduceScatter, AllToAll:
		return (f - 1) / f
	}
	return 1
}

// GBps is bytes per second in GB/s (10^9 bytes, as nccl-tests), 0 for a
// time that is not positive.
func GBps(bytes int64, seconds float64) float64 {
	if seconds <= 0 || math.IsNaN(seconds) {
		return 0
	}
	return float64(bytes) / 1e9 / seconds
}

// Summary describes a set of samples.
type Summary struct {
	Min    float64 `json:"min"`
	P10    float64 `json:"p10"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
	N      int     `json:"n"`
}

// Summarize returns the samples' summary; it does not change samples.
func Summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return Summary{
		Min: s[0], P10: Percentile(s, 10), Median: Percentile(s, 50), P90: Percentile(s, 90), Max: s[len(s)-1],
		Mean: sum / float64(len(s)), N: len(s),
	}
}

// Percentile is the p-th percentile (0..100) of sorted samples, interpolated
// linearly between the two nearest ranks (numpy's default), so the 50th of
// an even count is the mean of the middle two. NaN for no samples.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 || math.IsNaN(p) {
		return math.NaN()
	}
	p = min(max(p, 0), 100)
	pos := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	frac := pos - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// Scale returns s with every value multiplied by k (seconds to microseconds).
func (s Summary) Scale(k float64) Summary {
	s.Min, s.P10, s.Median, s.P90, s.Max, s.Mean = s.Min*k, s.P10*k, s.Median*k, s.P90*k, s.Max*k, s.Mean*k
	return s
}
