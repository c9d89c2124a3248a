package mpi

import (
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm"
)

// Name is the backend's registered name.
const Name = "mpi"

func init() {
	comm.Register(Name, comm.Driver{Open: Open, Probe: Probe, Rank: 10})
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

// Probe says whether MPI is built into this binary, and which.
func Probe() comm.Verdict {
	if !mpi.Built() {
		return comm.Verdict{Reason: mpicomm.NotBuiltReason}
	}
	return comm.Verdict{Usable: true, Reason: mpicomm.Library() + "; host-staged through pinned memory, on any device"}
}
