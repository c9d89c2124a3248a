package mpicomm

import (
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// TestMPITypeMapsEveryDType walks comm.DTypes() through mpiTypeOf: each maps
// to a valid, reducible MPI datatype of the same name and size, no two to
// the same one, and values outside the table are reported unmapped (and
// reach internal/mpi as the zero Datatype, which it refuses).
func TestMPITypeMapsEveryDType(t *testing.T) {
	seen := map[mpi.Datatype]comm.DType{}
	for _, dt := range comm.DTypes() {
		m, ok := mpiTypeOf(dt)
		if !ok {
			t.Errorf("%v has no MPI datatype", dt)
			continue
		}
		if !m.Valid() || !m.Reducible() || m.Size() != dt.Size() || m.String() != dt.String() {
			t.Errorf("%v maps to %v (valid %v, reducible %v, size %d): want the reducible %d-byte %v",
				dt, m, m.Valid(), m.Reducible(), m.Size(), dt.Size(), dt)
		}
		if prev, dup := seen[m]; dup {
			t.Errorf("%v and %v both map to %v", prev, dt, m)
		}
		seen[m] = dt
		if got := mpiType(dt); got != m {
			t.Errorf("mpiType(%v) = %v, mpiTypeOf gave %v", dt, got, m)
		}
	}
	for _, dt := range []comm.DType{0, -1, comm.DType(len(comm.DTypes()) + 1), 200} {
		if m, ok := mpiTypeOf(dt); ok {
			t.Errorf("mpiTypeOf(%v) = %v, true: want unmapped", dt, m)
		}
		if m := mpiType(dt); m.Valid() {
			t.Errorf("mpiType(%v) = %v: want an invalid Datatype internal/mpi refuses", dt, m)
		}
	}
}

// TestMPIOpMapsEveryOp walks comm.Ops() through mpiOpOf: each maps to the MPI
// op of the same name, except Avg, which MPI lacks and which reduces as Sum
// (the backend divides after); values outside the table are unmapped, never
// Sum.
func TestMPIOpMapsEveryOp(t *testing.T) {
	for _, op := range comm.Ops() {
		m, ok := mpiOpOf(op)
		if !ok {
			t.Errorf("%v has no MPI op", op)
			continue
		}
		want := op.String()
		if op == comm.Avg {
			want = mpi.Sum.String()
		}
		if !m.Valid() || m.String() != want {
			t.Errorf("%v maps to %v: want MPI's %s", op, m, want)
		}
		if got := mpiOp(op); got != m {
			t.Errorf("mpiOp(%v) = %v, mpiOpOf gave %v", op, got, m)
		}
	}
	for _, op := range []comm.Op{0, -1, comm.Op(len(comm.Ops()) + 1), 200} {
		if m, ok := mpiOpOf(op); ok {
			t.Errorf("mpiOpOf(%v) = %v, true: want unmapped", op, m)
		}
		if m := mpiOp(op); m.Valid() {
			t.Errorf("mpiOp(%v) = %v: want an invalid Op internal/mpi refuses, not Sum", op, m)
		}
	}
}
