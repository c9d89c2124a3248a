package nccl

import (
	"fmt"
	"slices"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/kernels"
)

// NCCL 2.28.3 on an H200 got AllReduce of float64 with Avg wrong: at
// 1000003 elements on one rank the last 3 came back as garbage (about
// -2.5e-127), out of place and in place, at offset 0 and at an odd element
// offset; nccl-tests' all_reduce_perf shows the same (-d double -o avg). Sum,
// Prod, float32's Avg and float64's Avg of 1000000 elements were right.
// Where a release is listed below, a reduction with Avg of a listed type
// is done as NCCL's Sum on the same buffers and stream, then a scaling by
// 1/nranks on the device (kernels.Scale), both queued on the call's stream;
// NCCL's own Avg is used everywhere else.

// avgFault is a range of NCCL releases whose Avg is wrong for some types.
type avgFault struct {
	from, to int          // NCCL version codes (major*10000+minor*100+patch), inclusive
	dtypes   []comm.DType // the element types it gets wrong
	why      string
}

// avgFaults is what is known. It is conservative: every count, rank
// count, and in or out of place, since the extent within a release is still
// being measured; no release with the fault fixed is known, so 2.28's
// whole series is listed (older releases were not tried, and are listed
// too) and later ones run natively.
var avgFaults = []avgFault{
	{from: 0, to: 22899, dtypes: []comm.DType{comm.Float64},
		why: "NCCL 2.28.3 returned garbage in the last 3 elements of a float64 average of 1000003 elements"},
}

// avgWorkaround reports whether a reduction with Avg of count elements of
// dt, on nranks ranks and in place or not, must be taken as a Sum then a
// scaling because NCCL version (its version code) gets it wrong.
func avgWorkaround(version int, dt comm.DType, count int, inPlace bool, nranks int) bool {
	_, _, _ = count, inPlace, nranks // every count, placement and rank count, until measured
	for _, f := range avgFaults {
		if version >= f.from && version <= f.to && slices.Contains(f.dtypes, dt) {
			return true
		}
	}
	return false
}

// nativeAvg hands every Avg to NCCL: a GPU test measures NCCL's own
// results with it.
var nativeAvg bool

// reduceOp is the reduction to hand NCCL for op and whether the result
// must then be scaled by 1/nranks (divide).
func (c *Comm) reduceOp(dt comm.DType, op comm.Op, count int, inPlace bool) (comm.Op, bool) {
	if op == comm.Avg && !nativeAvg && avgWorkaround(c.version, dt, count, inPlace, c.size) {
		return comm.Sum, true
	}
	return op, false
}

// divide multiplies count elements of recv by 1/nranks on s: the second
// half of an average taken as a sum. The sum is rounded once per term and
// the product once more, within the error NCCL's own average (each term
// times 1/nranks, then summed) allows; on one rank, or any power of two,
// it is exact.
func (c *Comm) divide(recv devmem.Buffer, count int, dt comm.DType, s *devmem.Stream) error {
	if recv.IsZero() || count == 0 {
		return nil // a rank that receives nothing
	}
	b, err := recv.Slice(0, count*dt.Size())
	if err != nil {
		return err
	}
	switch dt {
	case comm.Float64:
		return kernels.Scale(s, devmem.SliceOf[float64](b), 1/float64(c.size))
	case comm.Float32:
		return kernels.Scale(s, devmem.SliceOf[float32](b), 1/float32(c.size))
	}
	return fmt.Errorf("the average of %v is taken as a sum then a scaling, and there is no scaling kernel for %v: %w", dt, dt, comm.ErrUnsupported)
}
