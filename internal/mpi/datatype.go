package mpi

import (
	"fmt"
	"reflect"
	"unsafe"
)

// Datatype names the element type of a buffer. The values match the GC_*
// numbers in gpucomm_mpi.h, whose gc_type is the one table from Datatype to
// MPI datatype. The zero value is not a datatype, so a forgotten field is
// caught as an invalid argument.
type Datatype int

const (
	Int8 Datatype = iota + 1
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	// Float16 is IEEE 754 binary16. It travels as a 2-byte integer; its
	// reductions are user-defined MPI ops written in C.
	Float16
	// BFloat16 is the upper half of a float32, handled like Float16.
	BFloat16
	Float32
	Float64
	// Byte is raw data: it moves but has no arithmetic (use Uint8 to reduce).
	Byte
)

var datatypeInfo = [...]struct {
	name string
	size int
}{
	Int8:     {"int8", 1},
	Uint8:    {"uint8", 1},
	Int32:    {"int32", 4},
	Uint32:   {"uint32", 4},
	Int64:    {"int64", 8},
	Uint64:   {"uint64", 8},
	Float16:  {"float16", 2},
	BFloat16: {"bfloat16", 2},
	Float32:  {"float32", 4},
	Float64:  {"float64", 8},
	Byte:     {"byte", 1},
}

// Datatypes lists every valid Datatype, in order.
func Datatypes() []Datatype {
	return []Datatype{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, BFloat16, Float32, Float64, Byte}
}

// Valid reports whether dt is one of the declared datatypes.
func (dt Datatype) Valid() bool { return dt >= Int8 && dt <= Byte }

// Size is the size of one element in bytes, 0 for an invalid datatype.
func (dt Datatype) Size() int {
	if !dt.Valid() {
		return 0
	}
	return datatypeInfo[dt].size
}

// Size is the size of one element of dt in bytes, 0 for an invalid datatype.
func Size(dt Datatype) int { return dt.Size() }

func (dt Datatype) String() string {
	if !dt.Valid() {
		return fmt.Sprintf("Datatype(%d)", int(dt))
	}
	return datatypeInfo[dt].name
}

// Reducible reports whether reductions are defined on dt (all but Byte).
func (dt Datatype) Reducible() bool { return dt.Valid() && dt != Byte }

// Op is a reduction: one of MPI's predefined reductions, all of them, so
// that a reduction gpucomm adds (comm/driver's table) that MPI has needs
// only its line in internal/mpicomm's mapping (types.go), not this table.
// Average is left to callers: divide a Sum.
type Op int

// The arithmetic reductions, defined on every reducible Datatype (float16
// and bfloat16 through user ops written in C).
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
)

// The logical and bitwise reductions, defined on the integer Datatypes only
// (on the others the C table has no op, and MPI refuses the call). Their
// numbers stand apart from the arithmetic ones, which Ops lists.
const (
	LAnd Op = iota + 16
	LOr
	LXor
	BAnd
	BOr
	BXor
)

var opNames = map[Op]string{
	Sum: "sum", Prod: "prod", Min: "min", Max: "max",
	LAnd: "land", LOr: "lor", LXor: "lxor", BAnd: "band", BOr: "bor", BXor: "bxor",
}

// Valid reports whether op is one of the declared ops.
func (op Op) Valid() bool { return op.Arithmetic() || op.Integral() }

// Arithmetic reports whether op is Sum, Prod, Min or Max.
func (op Op) Arithmetic() bool { return op >= Sum && op <= Max }

// Integral reports whether op is a logical or bitwise reduction, defined on
// the integer Datatypes only.
func (op Op) Integral() bool { return op >= LAnd && op <= BXor }

func (op Op) String() string {
	if !op.Valid() {
		return fmt.Sprintf("Op(%d)", int(op))
	}
	return opNames[op]
}

// Ops lists the arithmetic Ops, in order: the ones every reducible Datatype
// has.
func Ops() []Op { return []Op{Sum, Prod, Min, Max} }

// IntegralOps lists the logical and bitwise Ops, in order.
func IntegralOps() []Op { return []Op{LAnd, LOr, LXor, BAnd, BOr, BXor} }

// ThreadSupport is a level of thread support, MPI_THREAD_SINGLE to
// MPI_THREAD_MULTIPLE.
type ThreadSupport int

const (
	ThreadSingle ThreadSupport = iota
	ThreadFunneled
	ThreadSerialized
	ThreadMultiple
)

func (l ThreadSupport) String() string {
	switch l {
	case ThreadSingle:
		return "single"
	case ThreadFunneled:
		return "funneled"
	case ThreadSerialized:
		return "serialized"
	case ThreadMultiple:
		return "multiple"
	}
	return fmt.Sprintf("ThreadSupport(%d)", int(l))
}

// Wildcards and the null peer, in this package's spelling; the C side turns
// them into the library's own values, which differ between families.
const (
	AnySource = -1 // Recv, Irecv, Sendrecv: match a message from any rank
	ProcNull  = -2 // any peer argument: a send or receive that does nothing
	AnyTag    = -1 // Recv, Irecv, Sendrecv: match any tag
)

// Status describes a completed receive.
type Status struct {
	Source    int  // sending rank, or ProcNull
	Tag       int  // the message's tag
	Count     int  // elements received, -1 if not a whole number of elements
	Cancelled bool // the request was cancelled instead of completing
}

// Value is an element type that the Go-memory helpers (AllreduceValues,
// BcastValues, AllgatherValues) map to a Datatype.
type Value interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~int | ~uint | ~float32 | ~float64
}

// DatatypeOf is the Datatype of T.
func DatatypeOf[T Value]() Datatype {
	var zero T
	wide := unsafe.Sizeof(zero) == 8
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Int8:
		return Int8
	case reflect.Uint8:
		return Uint8
	case reflect.Int32:
		return Int32
	case reflect.Uint32:
		return Uint32
	case reflect.Int64:
		return Int64
	case reflect.Uint64:
		return Uint64
	case reflect.Int:
		if wide {
			return Int64
		}
		return Int32
	case reflect.Uint:
		if wide {
			return Uint64
		}
		return Uint32
	case reflect.Float32:
		return Float32
	case reflect.Float64:
		return Float64
	}
	panic("unreachable: Value admits no other kind")
}
