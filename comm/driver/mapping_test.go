package driver

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// The tables every mapping is checked against are DTypes and Ops: the
// exhaustive tests in this package (host reductions), internal/mpicomm (MPI
// datatypes and ops) and comm/nccl (NCCL's) walk them. This test makes sure
// the tables themselves are whole: every value Valid accepts is listed once,
// in order, and nothing else is.
func TestTablesListEveryValidValue(t *testing.T) {
	for i, d := range DTypes() {
		if !d.Valid() || int(d) != i+1 {
			t.Errorf("DTypes[%d] = %v: want the valid DType %d", i, d, i+1)
		}
	}
	for d := DType(-2); d < DType(len(DTypes())+3); d++ {
		if listed := d >= 1 && int(d) <= len(DTypes()); d.Valid() != listed {
			t.Errorf("%v: Valid() = %v but listed in DTypes = %v", d, d.Valid(), listed)
		}
	}
	for i, o := range Ops() {
		if !o.Valid() || int(o) != i+1 {
			t.Errorf("Ops[%d] = %v: want the valid Op %d", i, o, i+1)
		}
	}
	for o := Op(-2); o < Op(len(Ops())+3); o++ {
		if listed := o >= 1 && int(o) <= len(Ops()); o.Valid() != listed {
			t.Errorf("%v: Valid() = %v but listed in Ops = %v", o, o.Valid(), listed)
		}
	}
}

// putF and getF store and read small integers, exact in every DType.
func putF(dt DType, b []byte, i int, v float64) {
	switch dt {
	case Int8:
		devmem.FromBytes[int8](b)[i] = int8(v)
	case Uint8:
		devmem.FromBytes[uint8](b)[i] = uint8(v)
	case Int32:
		devmem.FromBytes[int32](b)[i] = int32(v)
	case Uint32:
		devmem.FromBytes[uint32](b)[i] = uint32(v)
	case Int64:
		devmem.FromBytes[int64](b)[i] = int64(v)
	case Uint64:
		devmem.FromBytes[uint64](b)[i] = uint64(v)
	case Float16:
		devmem.FromBytes[Half](b)[i] = HalfFrom(float32(v))
	case BFloat16:
		devmem.FromBytes[BF16](b)[i] = BF16From(float32(v))
	case Float32:
		devmem.FromBytes[float32](b)[i] = float32(v)
	case Float64:
		devmem.FromBytes[float64](b)[i] = v
	default:
		panic("putF: no case for " + dt.String())
	}
}

func getF(dt DType, b []byte, i int) float64 {
	switch dt {
	case Int8:
		return float64(devmem.FromBytes[int8](b)[i])
	case Uint8:
		return float64(devmem.FromBytes[uint8](b)[i])
	case Int32:
		return float64(devmem.FromBytes[int32](b)[i])
	case Uint32:
		return float64(devmem.FromBytes[uint32](b)[i])
	case Int64:
		return float64(devmem.FromBytes[int64](b)[i])
	case Uint64:
		return float64(devmem.FromBytes[uint64](b)[i])
	case Float16:
		return float64(devmem.FromBytes[Half](b)[i].Float32())
	case BFloat16:
		return float64(devmem.FromBytes[BF16](b)[i].Float32())
	case Float32:
		return float64(devmem.FromBytes[float32](b)[i])
	case Float64:
		return devmem.FromBytes[float64](b)[i]
	}
	panic("getF: no case for " + dt.String())
}

// TestHostReductionMapsEveryDTypeAndOp runs ReduceInto (and DivideInto for
// Avg) for every DType x Op on random small integers, exact in every type,
// and checks each element against the reduction done in float64: a DType or
// Op without its case in hostreduce.go fails here (as an error, or as an
// untouched or wrongly folded element).
func TestHostReductionMapsEveryDTypeAndOp(t *testing.T) {
	const n = 64
	rng := rand.New(rand.NewPCG(18, 3))
	for _, dt := range DTypes() {
		signed := dt != Uint8 && dt != Uint32 && dt != Uint64
		for _, op := range Ops() {
			acc, src := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
			a, s := make([]float64, n), make([]float64, n)
			for i := range n {
				// Products of values in [-8, 8] (or [0, 15]) fit in int8 (uint8).
				if signed {
					a[i], s[i] = float64(rng.IntN(17)-8), float64(rng.IntN(17)-8)
				} else {
					a[i], s[i] = float64(rng.IntN(16)), float64(rng.IntN(16))
				}
				putF(dt, acc, i, a[i])
				putF(dt, src, i, s[i])
			}
			srcBefore := bytes.Clone(src)
			if err := ReduceInto(dt, op, acc, src); err != nil {
				t.Errorf("ReduceInto(%v, %v): %v", dt, op, err)
				continue
			}
			if op == Avg {
				if err := DivideInto(dt, acc, 2); err != nil {
					t.Errorf("DivideInto(%v): %v", dt, err)
					continue
				}
			}
			if !bytes.Equal(src, srcBefore) {
				t.Errorf("%v %v changed src", dt, op)
			}
			for i := range n {
				var want float64
				switch op {
				case Sum:
					want = a[i] + s[i]
				case Prod:
					want = a[i] * s[i]
				case Min:
					want = math.Min(a[i], s[i])
				case Max:
					want = math.Max(a[i], s[i])
				case Avg:
					want = (a[i] + s[i]) / 2
					if !dt.IsFloat() {
						want = math.Trunc(want)
					}
				default:
					t.Fatalf("the test has no reference for %v", op)
				}
				if got := getF(dt, acc, i); got != want {
					t.Errorf("%v %v [%d]: %v op %v = %v, want %v", dt, op, i, a[i], s[i], got, want)
					break
				}
			}
		}
	}
}

// TestHostReductionRefusesUnmappedValues checks that values outside the
// tables are errors that change nothing, never a Sum or an Int8.
func TestHostReductionRefusesUnmappedValues(t *testing.T) {
	acc := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	src := []byte{8, 7, 6, 5, 4, 3, 2, 1}
	want := bytes.Clone(acc)
	cases := []struct {
		dt DType
		op Op
	}{{DType(200), Sum}, {DType(0), Sum}, {Int32, Op(200)}, {Float32, Op(0)}, {Float16, Op(-1)}, {DType(200), Op(200)}}
	for _, c := range cases {
		err := ReduceInto(c.dt, c.op, acc, src)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ReduceInto(%v, %v) = %v, want ErrInvalidArgument", c.dt, c.op, err)
		}
		if !bytes.Equal(acc, want) {
			t.Fatalf("ReduceInto(%v, %v) changed acc to %v", c.dt, c.op, acc)
		}
	}
	if err := DivideInto(DType(200), acc, 2); !errors.Is(err, ErrInvalidArgument) || !bytes.Equal(acc, want) {
		t.Errorf("DivideInto(DType(200)) = %v, acc %v", err, acc)
	}
}
