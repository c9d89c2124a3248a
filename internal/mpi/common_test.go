package mpi

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/errs"
)

func TestLocalRankFromEnvPrefersOpenMPIThenHydraThenSlurm(t *testing.T) {
	cases := []struct {
		name           string
		ompi, hydra, s string // "" leaves the variable unset
		want           int
		ok             bool
	}{
		{"none", "", "", "", 0, false},
		{"slurm only", "", "", "3", 3, true},
		{"hydra over slurm", "", "2", "3", 2, true},
		{"open mpi over all", "1", "2", "3", 1, true},
		{"garbage skipped", "x", "-1", "5", 5, true},
		{"all garbage", "x", "y", "z", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i, v := range []string{c.ompi, c.hydra, c.s} {
				t.Setenv(localRankVars[i], v) // restored after the test
				if v == "" {
					unsetenv(t, localRankVars[i])
				}
			}
			got, ok := LocalRankFromEnv()
			if got != c.want || ok != c.ok {
				t.Errorf("LocalRankFromEnv() = %d, %v; want %d, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestDatatypeTableCoversEveryDatatype(t *testing.T) {
	want := map[Datatype]int{Int8: 1, Uint8: 1, Int32: 4, Uint32: 4, Int64: 8, Uint64: 8,
		Float16: 2, BFloat16: 2, Float32: 4, Float64: 8, Byte: 1}
	if len(Datatypes()) != len(want) {
		t.Fatalf("Datatypes() has %d entries, want %d", len(Datatypes()), len(want))
	}
	for _, dt := range Datatypes() {
		if !dt.Valid() || Size(dt) != want[dt] || strings.HasPrefix(dt.String(), "Datatype(") {
			t.Errorf("%v: valid %v size %d, want size %d", dt, dt.Valid(), Size(dt), want[dt])
		}
		if dt.Reducible() != (dt != Byte) {
			t.Errorf("%v.Reducible() = %v", dt, dt.Reducible())
		}
	}
	for _, bad := range []Datatype{0, Byte + 1, -1} {
		if bad.Valid() || bad.Size() != 0 || bad.Reducible() {
			t.Errorf("%v counts as valid", bad)
		}
	}
	for _, op := range Ops() {
		if !op.Valid() || strings.HasPrefix(op.String(), "Op(") {
			t.Errorf("%v is not a named op", op)
		}
	}
	if Op(0).Valid() || (Max + 1).Valid() {
		t.Error("an undeclared Op counts as valid")
	}
}

type myFloat float64

func TestDatatypeOfMapsUnderlyingTypes(t *testing.T) {
	check := func(got, want Datatype) {
		t.Helper()
		if got != want {
			t.Errorf("DatatypeOf = %v, want %v", got, want)
		}
	}
	check(DatatypeOf[int8](), Int8)
	check(DatatypeOf[uint8](), Uint8)
	check(DatatypeOf[int32](), Int32)
	check(DatatypeOf[uint32](), Uint32)
	check(DatatypeOf[int64](), Int64)
	check(DatatypeOf[uint64](), Uint64)
	check(DatatypeOf[int](), Int64)
	check(DatatypeOf[uint](), Uint64)
	check(DatatypeOf[float32](), Float32)
	check(DatatypeOf[float64](), Float64)
	check(DatatypeOf[myFloat](), Float64)
}

func TestErrorNamesTheCallAndUnwrapsToItsSentinel(t *testing.T) {
	e := &Error{Call: "MPI_Recv", Code: 15, Class: 15, Msg: "message truncated", kind: errs.ErrInvalidArgument}
	for _, s := range []string{"MPI_Recv", "message truncated", "15"} {
		if !strings.Contains(e.Error(), s) {
			t.Errorf("%q does not mention %q", e.Error(), s)
		}
	}
	if !errors.Is(e, errs.ErrInvalidArgument) {
		t.Error("errors.Is(e, ErrInvalidArgument) = false")
	}
	if errors.Is(&Error{Call: "MPI_Barrier"}, errs.ErrInvalidArgument) {
		t.Error("an Error without a sentinel unwraps to one")
	}
}

func TestTruncatedFindsMPIsTruncationThroughWrapping(t *testing.T) {
	trunc := &Error{Call: "MPI_Wait", Code: 15, Class: 15, Msg: "message truncated", kind: errs.ErrInvalidArgument, truncated: true}
	for _, err := range []error{trunc, &PeerError{Peer: 1, Err: trunc}, fmt.Errorf("receive: %w", &PeerError{Peer: 3, Err: trunc})} {
		if !Truncated(err) {
			t.Errorf("Truncated(%v) = false", err)
		}
	}
	for _, err := range []error{nil, errs.ErrInvalidArgument, &Error{Call: "MPI_Recv", Class: 6, kind: errs.ErrInvalidArgument},
		&PeerError{Peer: 1, Err: errors.New("gone")}} {
		if Truncated(err) {
			t.Errorf("Truncated(%v) = true", err)
		}
	}
}
