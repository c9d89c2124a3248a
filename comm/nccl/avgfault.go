package nccl

import (
	"fmt"
	"slices"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/kernels"
)

// NCCL 2.28.3 on an H200 gets reductions with Avg wrong (measured one rank,
// 2026-12-03, AllReduce, Reduce and ReduceScatter alike, a C program sweeping
// every type and reduction at 18 counts from 3 to 4000037, in and out of
// place, at offset 0 and an odd element offset): out of place, the elements
// past some large power-of-two-aligned prefix come back as garbage (-2.5e-127
// where the input was): float64 at 65537, 262147, 524309, 1000001, 1000003,
// 1048583 and 2000003 elements (1 to 21 wrong); float32 at 262147, 524309,
// 1048583 and 2000003; float16 and bfloat16 at 262147, 524309 and 1048583.
// Integer types, every other reduction, and every count in place were right.
// nccl-tests' all_reduce_perf -d double -o avg shows the same. Two ranks
// cannot be tried there (NCCL refuses two ranks on one GPU), so the table
// also covers several ranks, in place too for the types that a Sum then a
// scaling can serve. Where a release is listed below, a listed type takes
// the listed fix; NCCL's own Avg is used everywhere else, and on releases
// after the listed ones (no fixed release is known yet: 2.28's whole series
// is listed, and older releases, not tried, are kept safe).

// avgFix is how a faulty Avg is taken instead.
type avgFix int

const (
	avgNative      avgFix = iota // NCCL's own Avg
	avgSumScale                  // NCCL's Sum, then x *= 1/nranks on the device, on the call's stream
	avgCopyInPlace               // out of place: send copied to recv on the stream, then NCCL's Avg in place on recv
)

// avgFault is a range of NCCL releases whose Avg is wrong for some types.
type avgFault struct {
	from, to   int          // NCCL version codes (major*10000+minor*100+patch), inclusive
	dtypes     []comm.DType // the element types it gets wrong
	outOfPlace bool         // wrong out of place only
	fix        avgFix
	why        string
}

// avgFaults is what is known, conservative where it was not measured.
var avgFaults = []avgFault{
	{from: 0, to: 22899, dtypes: []comm.DType{comm.Float64, comm.Float32}, fix: avgSumScale,
		why: "NCCL 2.28.3 returned garbage past a power-of-two prefix (float64 from 65537 elements, float32 from 262147), out of place"},
	{from: 0, to: 22899, dtypes: []comm.DType{comm.Float16, comm.BFloat16}, outOfPlace: true, fix: avgCopyInPlace,
		why: "NCCL 2.28.3 returned garbage past a power-of-two prefix of float16 and bfloat16 (from 262147 elements), out of place only"},
}

// avgFixFor says how a reduction with Avg of count elements of dt, on
// nranks ranks and in place or not, is taken on NCCL version (its code).
func avgFixFor(version int, dt comm.DType, count int, inPlace bool, nranks int) avgFix {
	_, _ = count, nranks // every count and rank count, until measured
	for _, f := range avgFaults {
		if version >= f.from && version <= f.to && slices.Contains(f.dtypes, dt) && !(f.outOfPlace && inPlace) {
			return f.fix
		}
	}
	return avgNative
}

// avgWorkaround reports whether such a reduction is not handed to NCCL's
// own Avg as it is.
func avgWorkaround(version int, dt comm.DType, count int, inPlace bool, nranks int) bool {
	return avgFixFor(version, dt, count, inPlace, nranks) != avgNative
}

// nativeAvg hands every Avg to NCCL: a GPU test measures NCCL's own
// results with it.
var nativeAvg bool

// avgPlan is how one reduction runs: the op NCCL gets, whether recv is
// scaled after, and whether send is copied to recv first (then NCCL runs in
// place on recv).
type avgPlan struct {
	op               comm.Op
	scale, copyFirst bool
}

func (c *Comm) planAvg(dt comm.DType, op comm.Op, count int, inPlace bool) avgPlan {
	if op != comm.Avg || nativeAvg {
		return avgPlan{op: op}
	}
	switch avgFixFor(c.version, dt, count, inPlace, c.size) {
	case avgSumScale:
		return avgPlan{op: comm.Sum, scale: true}
	case avgCopyInPlace:
		return avgPlan{op: op, copyFirst: true}
	}
	return avgPlan{op: op}
}

// source is the buffer NCCL reduces from: send, or recv once count elements
// of send are copied there on s, for an Avg NCCL then takes in place.
func (p avgPlan) source(send, recv devmem.Buffer, count int, dt comm.DType, s *devmem.Stream) (devmem.Buffer, error) {
	if !p.copyFirst {
		return send, nil
	}
	return recv, devmem.CopyN(recv, send, count*dt.Size(), s)
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
