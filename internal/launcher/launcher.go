package launcher

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Families of launchers. A launcher's family says which MPI library can join
// its job: Open MPI's mpirun (or prterun) starts Open MPI ranks, Hydra starts
// MPICH-ABI ranks (MPICH, Intel MPI, MVAPICH), srun and a bare PMIx server
// start either, given a library built with their support.
const (
	FamilyOpenMPI = "openmpi"
	FamilyMPICH   = "mpich"
	FamilySlurm   = "slurm"
	FamilyPMIx    = "pmix"
)

// Job is what the launcher announced of the job this process belongs to.
type Job struct {
	// Launcher names the launcher for people, e.g. "Open MPI mpirun".
	Launcher string
	// Family is FamilyOpenMPI, FamilyMPICH, FamilySlurm or FamilyPMIx.
	Family string
	// Size is the number of ranks the launcher started, 0 when it did not say
	// (a bare PMIx server announces only the rank).
	Size int
	// Rank is this process's rank in the job.
	Rank int
	// LocalRank is its rank among the job's processes on this node, -1 when
	// the launcher did not say.
	LocalRank int
	// From lists the variables read, as NAME=value separated by spaces, for
	// error messages.
	From string
}

// MultiRank reports whether the job has more than one rank: its size is
// above one, or, when the size is unknown, this rank is not rank 0.
func (j Job) MultiRank() bool { return j.Size > 1 || j.Rank > 0 }

// String describes the job in one line, e.g. "Open MPI mpirun, 4 ranks
// (OMPI_COMM_WORLD_SIZE=4 ...)".
func (j Job) String() string {
	size := "size unknown"
	if j.Size > 0 {
		size = fmt.Sprintf("%d ranks", j.Size)
	}
	return fmt.Sprintf("%s, %s (%s)", j.Launcher, size, j.From)
}

// Slurm's reserved step ids (batch script, interactive, extern step and
// pending/invalid ones) all lie at or above this value: a process with such
// a step id was not started as a task of an srun step.
const slurmReservedStepIDs = 0xfffffff0

// Detect reads the launcher's variables through environ (os.LookupEnv's
// signature) and returns the job, with ok false when no launcher announced a
// job: a process started by hand, or one whose variables do not hold a
// valid size and rank (0 <= rank < size).
//
// Launchers are tried in this order, because one can run under another and
// the innermost sets its own variables over the outer one's: Open MPI
// (OMPI_COMM_WORLD_SIZE/RANK/LOCAL_RANK), Hydra (PMI_SIZE/PMI_RANK,
// MPI_LOCALRANKID), Slurm's srun (SLURM_STEP_NUM_TASKS or SLURM_NTASKS,
// SLURM_PROCID, SLURM_LOCALID; only inside a step started by srun, not in
// the batch script), then a bare PMIx server (PMIX_RANK with PMIX_NAMESPACE).
// srun's PMI-2 plugin also sets PMI_SIZE and PMI_RANK: without Hydra's
// MPI_LOCALRANKID and inside an srun step they are read as Slurm's.
func Detect(environ func(string) (string, bool)) (Job, bool) {
	r := reader{environ: environ}
	if j, ok := r.openMPI(); ok {
		return j, true
	}
	if j, ok := r.hydra(); ok {
		return j, true
	}
	if j, ok := r.slurm(); ok {
		return j, true
	}
	if j, ok := r.pmix(); ok {
		return j, true
	}
	return Job{}, false
}

// FromEnv is Detect on this process's environment.
func FromEnv() (Job, bool) { return Detect(os.LookupEnv) }

type reader struct {
	environ func(string) (string, bool)
}

// lookup returns the value of name and appends NAME=value to from when set.
func (r reader) lookup(name string, from *[]string) (string, bool) {
	v, ok := r.environ(name)
	if ok {
		*from = append(*from, name+"="+v)
	}
	return v, ok
}

// nonNegative parses name's value as an integer >= 0.
func (r reader) nonNegative(name string, from *[]string) (int, bool) {
	v, ok := r.lookup(name, from)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// job builds a Job from a size variable (may be empty: size unknown), a rank
// variable and local rank variables tried in order, or reports false when
// size or rank is missing or invalid.
func (r reader) job(launcher, family, sizeVar, rankVar string, localVars ...string) (Job, bool) {
	var from []string
	size := 0
	if sizeVar != "" {
		n, ok := r.nonNegative(sizeVar, &from)
		if !ok || n < 1 {
			return Job{}, false
		}
		size = n
	}
	rank, ok := r.nonNegative(rankVar, &from)
	if !ok || (size > 0 && rank >= size) {
		return Job{}, false
	}
	local := -1
	for _, name := range localVars {
		if n, ok := r.nonNegative(name, &from); ok && (size == 0 || n < size) {
			local = n
			break
		}
	}
	return Job{Launcher: launcher, Family: family, Size: size, Rank: rank, LocalRank: local,
		From: strings.Join(from, " ")}, true
}

func (r reader) openMPI() (Job, bool) {
	return r.job("Open MPI mpirun", FamilyOpenMPI,
		"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
}

func (r reader) hydra() (Job, bool) {
	if _, ok := r.environ("PMI_SIZE"); !ok {
		return Job{}, false
	}
	_, hydraLocal := r.environ("MPI_LOCALRANKID")
	if !hydraLocal && r.inSrunStep() {
		return Job{}, false // srun --mpi=pmi2: Slurm's job
	}
	return r.job("MPICH Hydra mpiexec", FamilyMPICH, "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID")
}

// inSrunStep reports whether this process is a task of a step srun started.
func (r reader) inSrunStep() bool {
	for _, name := range []string{"SLURM_STEP_ID", "SLURM_STEPID"} {
		v, ok := r.environ(name)
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		return err == nil && id < slurmReservedStepIDs
	}
	return false
}

func (r reader) slurm() (Job, bool) {
	if !r.inSrunStep() {
		return Job{}, false
	}
	sizeVar := "SLURM_STEP_NUM_TASKS"
	if _, ok := r.environ(sizeVar); !ok {
		sizeVar = "SLURM_NTASKS"
	}
	j, ok := r.job("Slurm srun", FamilySlurm, sizeVar, "SLURM_PROCID", "SLURM_LOCALID")
	if !ok {
		return Job{}, false
	}
	for _, name := range []string{"SLURM_STEP_ID", "SLURM_STEPID"} {
		if v, set := r.environ(name); set {
			j.From += " " + name + "=" + v
			break
		}
	}
	return j, true
}

func (r reader) pmix() (Job, bool) {
	ns, ok := r.environ("PMIX_NAMESPACE")
	if !ok {
		return Job{}, false
	}
	j, ok := r.job("PMIx server", FamilyPMIx, "", "PMIX_RANK")
	if !ok {
		return Job{}, false
	}
	j.From += " PMIX_NAMESPACE=" + ns
	return j, true
}
