package nccl

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// Name is the backend's registered name.
const Name = "nccl"

func init() {
	comm.Register(Name, driver.Driver{Open: openDriver, Probe: Probe, Rank: 30})
}

// openDriver is comm.Open's way in; it never returns a typed nil.
func openDriver(o comm.Options) (driver.Conn, error) {
	c, err := open(o, openWorld, realLibrary())
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Open opens this process's rank of an NCCL communicator over every rank of
// the MPI job, as comm.Open("nccl", opts...) does (but without
// GPUCOMM_BACKEND's override), returning the *Comm for its extras (Wait).
func Open(opts ...comm.Option) (*Comm, error) {
	o, err := comm.DefaultOptions()
	if err != nil {
		return nil, driver.Wrap(Name, "Open", envRank(), err)
	}
	if err := comm.ApplyOptions(&o, opts...); err != nil {
		return nil, driver.Wrap(Name, "Open", envRank(), err)
	}
	return open(o, openWorld, realLibrary())
}

// Probe says whether Open can work here: MPI built in, NCCL loadable and a
// GPU visible. It starts neither MPI nor a communicator, and lists
// everything that is missing.
func Probe() comm.Verdict {
	return probeWith(mpi.Built(), realLibrary(), devmem.CUDADeviceCount)
}

func probeWith(mpiBuilt bool, lib library, gpus func() (int, error)) comm.Verdict {
	var missing []string
	if !mpiBuilt {
		missing = append(missing, "not built: NCCL's unique id travels by MPI, and MPI is not in this binary; "+
			"rebuild with -tags mpi (Open MPI) or -tags mpich (MPICH ABI), with cgo enabled")
	}
	if err := lib.load(); err != nil {
		missing = append(missing, "NCCL not usable: "+err.Error())
	}
	n, err := gpus()
	switch {
	case err != nil:
		missing = append(missing, "no GPU: "+err.Error())
	case n == 0:
		missing = append(missing, "no GPU: the CUDA driver sees none")
	case localRanksFromEnv() > n:
		// NCCL refuses two ranks on one GPU; say so before auto picks it.
		missing = append(missing, fmt.Sprintf("the launcher started %d ranks on this node but it has %d GPU(s); NCCL needs one GPU a rank", localRanksFromEnv(), n))
	}
	if missing != nil {
		return comm.Verdict{Reason: strings.Join(missing, "; ")}
	}
	return comm.Verdict{Usable: true, Reason: fmt.Sprintf("%s on %d GPU(s), bootstrapped by %s", lib.describe(), n, mpi.Family())}
}

// localRanksFromEnv is how many ranks the launcher put on this node, or 0
// when it does not say (Open MPI, MPICH/Hydra, Slurm).
func localRanksFromEnv() int {
	for _, k := range []string{"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"} {
		if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
			return n
		}
	}
	return 0
}
