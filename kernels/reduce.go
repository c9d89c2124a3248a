package kernels

import (
	"fmt"
	"math"
	"slices"

	"github.com/gpucomm/gpucomm/devmem"
)

// FoldTypes are the element types of Fold and Divide, by the suffix of
// their kernels in reduce.cu: 8-, 32- and 64-bit integers, IEEE binary16,
// bfloat16, float32 and float64.
var FoldTypes = []string{"i8", "u8", "i32", "u32", "i64", "u64", "f16", "bf16", "f32", "f64"}

// FoldOps are Fold's reductions (Avg is a sum finished by Divide).
var FoldOps = []string{"sum", "prod", "min", "max"}

func foldSize(typ string) int {
	switch typ {
	case "i8", "u8":
		return 1
	case "f16", "bf16":
		return 2
	case "i32", "u32", "f32":
		return 4
	}
	return 8
}

// foldBytes is the bytes of n elements of typ, refusing for op a negative
// n or one whose bytes overflow int (which would wrap round to a size that
// short buffers pass, and launch a kernel over n elements of them).
func foldBytes(op, typ string, n int) (int, error) {
	size := foldSize(typ)
	if n < 0 || n > math.MaxInt/size {
		return 0, invalid(op, "%d elements of %q (at most %d, the bytes an int holds)", n, typ, math.MaxInt/size)
	}
	return n * size, nil
}

// Fold combines n elements of src into acc (acc[i] = acc[i] op src[i]), in
// stream order on s, on a CUDA device: the kernels of reduce.cu, which
// match comm/driver's ReduceInto bit for bit. kernels sits below comm, so
// that Go reference is not here: on the host device Fold refuses with
// ErrUnsupported and callers fold with ReduceInto. src may be memory of
// another process opened through IPC. acc and src are the same n elements
// or do not overlap (a partial overlap is refused: the kernel's threads
// would read what others write).
func Fold(s *devmem.Stream, typ, op string, acc, src devmem.Buffer, n int) error {
	if !slices.Contains(FoldTypes, typ) || !slices.Contains(FoldOps, op) {
		return invalid("Fold", "no fold of %q with %q (types %v, ops %v)", typ, op, FoldTypes, FoldOps)
	}
	bytes, err := foldBytes("Fold", typ, n)
	if err != nil {
		return err
	}
	dev, err := target("Fold", s, arg{"acc", acc, bytes}, arg{"src", src, bytes})
	if err != nil || n == 0 {
		return err
	}
	if overlap(acc, src, bytes) == partly {
		return invalid("Fold", "acc and src overlap in part (%d bytes each)", bytes)
	}
	return runDevice(dev, s, foldLaunch(typ, op, acc, src, n))
}

// foldLaunch is fold_<typ>_<op>(T *acc, const T *src, long long n) of the
// FOLD macros of reduce.cu.
func foldLaunch(typ, op string, acc, src devmem.Buffer, n int) launch {
	return launch{file: "reduce.cu", kernel: "fold_" + typ + "_" + op,
		grid: flatGrid(n), block: [3]uint32{flatThreads, 1, 1}, args: []any{acc, src, int64(n)}}
}

// divideLaunch is divide_<typ>(T *acc, long long n, long long by) of the
// DIVIDE macros of reduce.cu.
func divideLaunch(typ string, acc devmem.Buffer, n, by int) launch {
	return launch{file: "reduce.cu", kernel: "divide_" + typ,
		grid: flatGrid(n), block: [3]uint32{flatThreads, 1, 1}, args: []any{acc, int64(n), int64(by)}}
}

// Divide divides n elements of acc by by, finishing an average, in stream
// order on s on a CUDA device (integers truncate, in 64 bits; 16-bit floats
// in float32), as comm/driver's DivideInto does; on the host device it
// refuses with ErrUnsupported, as Fold does.
func Divide(s *devmem.Stream, typ string, acc devmem.Buffer, n, by int) error {
	if !slices.Contains(FoldTypes, typ) || by <= 0 || n < 0 {
		return invalid("Divide", "%d elements of %q by %d", n, typ, by)
	}
	bytes, err := foldBytes("Divide", typ, n)
	if err != nil {
		return err
	}
	dev, err := target("Divide", s, arg{"acc", acc, bytes})
	if err != nil || n == 0 {
		return err
	}
	return runDevice(dev, s, divideLaunch(typ, acc, n, by))
}

// runDevice launches l on a CUDA device and refuses any other.
func runDevice(dev *devmem.Device, s *devmem.Stream, l launch) error {
	if dev.Kind() != devmem.CUDA {
		return fmt.Errorf("kernels: %s on %v: device kernels only; the host device folds with comm/driver's ReduceInto: %w", l.kernel, dev, devmem.ErrUnsupported)
	}
	return defaultRuntime.launch(dev, s, l)
}

// MaxReduceRanks is the most sources, and the most destinations, one Reduce
// takes: MAX_RANKS of reduce.cu.
const MaxReduceRanks = 16

// Reduce combines n elements of every buffer of srcs, in their order, as
// Fold would fold srcs[1:] one by one into a copy of srcs[0]; when by > 0
// divides the result by by, as Divide does (an Avg); and writes it to every
// buffer of dsts: in stream order on s, on a CUDA device, in one kernel
// that reads each source once and writes each destination once. Bit for
// bit it is Fold, Divide and copies. A destination may be one of the
// sources (in place: every element is read from every source before it is
// written anywhere); otherwise the buffers must not overlap. Sources and
// destinations may be memory of other processes opened through IPC. From 1
// to MaxReduceRanks of each; on the host device it refuses with
// ErrUnsupported, as Fold does.
func Reduce(s *devmem.Stream, typ, op string, dsts, srcs []devmem.Buffer, n, by int) error {
	if !slices.Contains(FoldTypes, typ) || !slices.Contains(FoldOps, op) {
		return invalid("Reduce", "no reduction of %q with %q (types %v, ops %v)", typ, op, FoldTypes, FoldOps)
	}
	if n < 0 || by < 0 {
		return invalid("Reduce", "%d elements divided by %d", n, by)
	}
	if len(srcs) == 0 || len(srcs) > MaxReduceRanks || len(dsts) == 0 || len(dsts) > MaxReduceRanks {
		return invalid("Reduce", "%d sources and %d destinations (1 to %d of each)", len(srcs), len(dsts), MaxReduceRanks)
	}
	bytes, err := foldBytes("Reduce", typ, n)
	if err != nil {
		return err
	}
	dev, err := target("Reduce", s, arg{"source 0", srcs[0], bytes})
	if err != nil {
		return err
	}
	// The rest on the first's device; a buffer's index is formatted only
	// for an error (this runs on every reduction of the IPC path).
	for _, side := range []struct {
		what string
		bufs []devmem.Buffer
	}{{"source", srcs}, {"destination", dsts}} {
		for q, b := range side.bufs {
			if err := b.Check("kernels: Reduce", dev, bytes); err != nil {
				return fmt.Errorf("%s %d: %w", side.what, q, err)
			}
		}
	}
	if n == 0 {
		return nil
	}
	for i, d := range dsts {
		for j := i + 1; j < len(dsts); j++ {
			if overlap(d, dsts[j], bytes) != apart {
				return invalid("Reduce", "destinations %d and %d overlap", i, j)
			}
		}
		for q, src := range srcs {
			if overlap(d, src, bytes) == partly {
				return invalid("Reduce", "destination %d overlaps source %d in part (a destination is a source's own elements or apart from it)", i, q)
			}
		}
	}
	return runDevice(dev, s, reduceLaunch(typ, op, dsts, srcs, n, by))
}

// How the first bytes of two buffers lie: apart, the same bytes, or partly
// over each other.
const (
	apart = iota
	same
	partly
)

// overlap says how the first bytes of a and b lie (both hold that many,
// checked already).
func overlap(a, b devmem.Buffer, bytes int) int {
	if !a.Overlaps(b) {
		return apart // not even the whole buffers meet
	}
	if a.Addr() == b.Addr() {
		return same
	}
	// The whole buffers meet; do their first bytes? Both are on one device
	// and in this process's address space, so their addresses say.
	lo, hi := a.Addr(), b.Addr()
	if lo > hi {
		lo, hi = hi, lo
	}
	if hi-lo >= uintptr(bytes) {
		return apart
	}
	return partly
}

// ReduceReady builds and loads the kernel Reduce would launch for typ and
// op on dev, so that a failure (no NVRTC, a compile error) shows before
// anything is written; ErrUnsupported on the host device.
func ReduceReady(dev *devmem.Device, typ, op string) error {
	if !slices.Contains(FoldTypes, typ) || !slices.Contains(FoldOps, op) {
		return invalid("ReduceReady", "no reduction of %q with %q", typ, op)
	}
	if dev.Kind() != devmem.CUDA {
		return fmt.Errorf("kernels: reduce_%s_%s on %v: device kernels only: %w", typ, op, dev, devmem.ErrUnsupported)
	}
	_, err := defaultRuntime.function(dev, "reduce.cu", "reduce_"+typ+"_"+op)
	return err
}

// reduceLaunch is reduce_<typ>_<op>(rank_ptrs p, int nsrc, int ndst, long
// long n, long long by) of the REDUCE macro of reduce.cu; the table is
// rank_ptrs' two arrays of MAX_RANKS pointers, unused slots zero.
func reduceLaunch(typ, op string, dsts, srcs []devmem.Buffer, n, by int) launch {
	var table [2 * MaxReduceRanks]uint64
	for q, b := range srcs {
		table[q] = uint64(b.Addr())
	}
	for q, b := range dsts {
		table[MaxReduceRanks+q] = uint64(b.Addr())
	}
	// A thread for each 16 bytes where the kernel takes its aligned path
	// (every address on 16 bytes, as it checks; every type has it, VEC 1 in
	// reduce.cu), else one an element.
	var bits uint64
	for _, v := range table {
		bits |= v
	}
	threads := n
	if bits&15 == 0 {
		threads = ceilDiv(n, 16/foldSize(typ))
	}
	return launch{file: "reduce.cu", kernel: "reduce_" + typ + "_" + op,
		grid: flatGrid(threads), block: [3]uint32{flatThreads, 1, 1},
		args: []any{table, int32(len(srcs)), int32(len(dsts)), int64(n), int64(by)}}
}
