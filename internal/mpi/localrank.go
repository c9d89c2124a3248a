package mpi

import (
	"os"
	"strconv"
)

// ThreadLevelEnv, when set (single, funneled, serialized or multiple), is
// the thread level Init asks for instead of multiple: a way to test the
// serialised path, or to work around an MPI whose multiple mode is slow.
const ThreadLevelEnv = "GPUCOMM_MPI_THREAD_LEVEL"

// localRankVars are the launchers' node-local rank variables, in the order
// they are trusted: Open MPI, MPICH's Hydra, Slurm.
var localRankVars = []string{"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}

// LocalRankFromEnv is this process's rank among the processes of its node, as
// the launcher announced it, for choosing a GPU before MPI is up. Once MPI is
// up, (*Comm).SplitShared gives the same answer from MPI itself. ok is false
// when no launcher variable holds a non-negative integer.
func LocalRankFromEnv() (rank int, ok bool) {
	for _, name := range localRankVars {
		v, set := os.LookupEnv(name)
		if !set {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return n, true
		}
	}
	return 0, false
}
