package cudaaware

import (
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/internal/mpicomm"
)

// Name is the backend's registered name.
const Name = "cudaaware"

// AwareEnv overrides the CUDA-awareness verdict: GPUCOMM_CUDA_AWARE=1
// trusts MPI with device pointers unchecked, 0 refuses them, probe decides
// by exchanging device buffers between ranks.
const AwareEnv = mpicomm.AwareEnv

func init() {
	comm.Register(Name, driver.Driver{Open: func(o driver.Options) (driver.Conn, error) { return Open(o) }, Probe: Probe, Rank: 20})
}

// Open makes this process's communicator over every rank of the job; every
// rank calls it (comm.Open("cudaaware") does). It fails on every rank with
// an error wrapping comm.ErrNotCUDAAware when MPI cannot take device
// pointers on some rank, and with comm.ErrNotBuilt without MPI built in.
func Open(o comm.Options) (comm.Communicator, error) {
	c, err := mpicomm.Open(mpicomm.Config{Backend: Name, Mode: mpicomm.Direct, Options: o})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Probe reports the CUDA-awareness verdict without starting MPI: the
// override, the verdict of the last Open in this process, MPI's own answer
// once MPI is up, or that the device will be the host device.
func Probe() comm.Verdict { return mpicomm.ProbeCUDAAware() }
