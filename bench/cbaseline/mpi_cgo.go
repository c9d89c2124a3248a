//go:build cgo && (mpi || mpich)

package cbaseline

// #include "baseline.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/mpi"
)

// MPIBuilt reports whether the MPI loops are compiled in.
const MPIBuilt = true

// MPIInitialized reports whether gpucomm's MPI (internal/mpi, which the MPI
// backends and the comm/mpi package's Init start) is up: the loops run only
// on that MPI, started at its thread level after its launcher checks.
func MPIInitialized() bool { return mpi.Initialized() && C.gcb_mpi_initialized() != 0 }

// MPI times len(times) iterations of c on MPI_COMM_WORLD after a.Warmup
// untimed ones, writing each iteration's seconds to times. Collectives are
// called by every rank; PingPong and Bandwidth only by the two ranks of the
// pair, whose Initiator gets the times (its peer gets zeros). A barrier comes
// before the timed iterations (and before each one with a.SyncEach).
func MPI(c Coll, a Args, times []float64) error {
	if err := a.check(c, times); err != nil {
		return err
	}
	if !mpi.Initialized() {
		return ErrNotInitialized
	}
	dtype, op, err := mpiArgs(c, a)
	if err != nil {
		return err
	}
	ca := cArgs(c, a, dtype, op)
	var rc C.int
	// As internal/mpi makes each of its calls: the thread prepared (the
	// GPU's context current, for MPI on device buffers) and, below
	// MPI_THREAD_MULTIPLE, no other MPI call at the same time.
	if err := mpi.CallExternal(func() { rc = C.gcb_mpi_run(&ca, C.int(len(times)), timesPtr(times)) }); err != nil {
		return fmt.Errorf("%w: %w", ErrNotInitialized, err)
	}
	switch rc {
	case C.GCB_OK:
		return nil
	case C.GCB_ENOTINIT:
		return ErrNotInitialized
	case C.GCB_ETYPE:
		return fmt.Errorf("MPI %v of %v with %v: %w", c, a.DType, a.Op, ErrUnsupported)
	case C.GCB_EARG:
		return fmt.Errorf("cbaseline: MPI %v: bad argument", c)
	case C.GCB_ENOMEM:
		return fmt.Errorf("cbaseline: MPI %v: out of memory", c)
	}
	var buf [512]C.char
	C.gcb_mpi_error_string(rc, &buf[0], C.int(len(buf)))
	return fmt.Errorf("cbaseline: MPI %v failed: %s (MPI error %d)", c, C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), int(rc))
}
