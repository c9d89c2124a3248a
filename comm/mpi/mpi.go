package mpi

import (
	"errors"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm"
)

// Name is the backend's registered name.
const Name = "mpi"

func init() {
	comm.Register(Name, driver.Driver{Open: func(o driver.Options) (driver.Conn, error) { return Open(o) }, Probe: Probe, Rank: 10})
}

// Open makes this process's communicator over every rank of the job; every
// rank calls it (comm.Open("mpi") does). Without MPI built in it returns an
// error wrapping comm.ErrNotBuilt.
func Open(o comm.Options) (comm.Communicator, error) {
	c, err := mpicomm.Open(mpicomm.Config{Backend: Name, Mode: mpicomm.Staged, Options: o})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Probe says whether MPI is built into this binary, and which, and whether
// this process can join its launcher's job (not under the other MPI
// family's launcher).
func Probe() comm.Verdict {
	if !mpi.Built() {
		return comm.Verdict{Reason: mpicomm.NotBuiltReason()}
	}
	if err := mpi.JoinError(); err != nil {
		return comm.Verdict{Reason: err.Error()}
	}
	return comm.Verdict{Usable: true, Reason: mpicomm.Library() + "; host-staged through pinned memory, on any device"}
}

// Init initialises MPI now, if gpucomm has not yet, and keeps it up until
// Finalize, whatever communicators open and close meanwhile: the
// MPI_Init/MPI_Finalize pair of a C program. Without it MPI comes up with
// the first communicator (of the mpi, cudaaware or nccl backend) and ends
// when the last one closes; MPI can be initialised once per process.
func Init() error { return mpi.Init() }

// Finalize ends what Init began: MPI_Finalize runs once no communicator
// holds MPI. It also ends MPI left up by an Open that failed (which keeps
// MPI up so that the program can open another backend instead): a program
// that may exit after a failed Open calls it first, or Open MPI's mpirun
// reports that the process exited without MPI_Finalize. It does nothing
// to MPI when gpucomm did not initialise MPI. First it waits until the
// messages this process sent through the node path on communicators still
// open have been received (they live in this process's memory, and a
// completed send is delivered whatever the sender does next), each bounded
// by its communicator's timeout.
func Finalize() error {
	return errors.Join(mpicomm.AwaitNodeMessages(), mpi.Finalize())
}
