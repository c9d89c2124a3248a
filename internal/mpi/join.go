//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

import (
	"fmt"
	"os"
	"strings"

	"github.com/gpucomm/gpucomm/internal/errs"
	"github.com/gpucomm/gpucomm/internal/launcher"
)

// A process started by a launcher must join the launcher's job. An MPI of
// one family cannot join the other's: an MPICH build under Open MPI's
// mpirun hangs in MPI_Init, and an Open MPI build under MPICH's Hydra
// initialises as a singleton, so a job of n ranks runs as n one-rank jobs
// that all pass. Init checks both, before MPI_Init (the launcher's family)
// and after it (the world's size against the launcher's).

// builtFor names the library this binary is built for, with its tag.
var builtFor = map[string]string{
	"openmpi": "Open MPI (-tags mpi)",
	"mpich":   "MPICH (-tags mpich)",
}

// ownJob is the job the launcher of this binary's family announced, when
// the variables of both families are present (a launcher started by a
// process that itself runs under the other's): Hydra's over Open MPI's for
// an MPICH build, Open MPI's first otherwise, as launcher.Detect reads them.
func ownJob(family string, environ func(string) (string, bool)) (launcher.Job, bool) {
	if family == "mpich" {
		if _, hydra := environ("PMI_SIZE"); hydra {
			return launcher.Detect(func(name string) (string, bool) {
				if strings.HasPrefix(name, "OMPI_") {
					return "", false
				}
				return environ(name)
			})
		}
	}
	return launcher.Detect(environ)
}

// launcherConflict says why this binary, built for family, cannot join the
// job of the launcher that started it, or nil: before MPI_Init, which would
// hang or run alone.
func launcherConflict(family string, environ func(string) (string, bool)) error {
	job, ok := ownJob(family, environ)
	if !ok {
		return nil
	}
	var fix string
	switch {
	case family == "mpich" && job.Family == launcher.FamilyOpenMPI:
		fix = "rebuild with -tags mpi, or start it with MPICH's mpiexec (mpiexec.mpich or mpiexec.hydra on Debian)"
	case family == "openmpi" && job.Family == launcher.FamilyMPICH:
		fix = "rebuild with -tags mpich, or start it with Open MPI's mpirun (mpirun.openmpi on Debian)"
	default:
		return nil
	}
	return fmt.Errorf("mpi: this process was started by %s as rank %d of %d (%s), but this binary is built for %s, which cannot join that job (MPI_Init would hang, or run each rank alone): %s: %w",
		job.Launcher, job.Rank, job.Size, job.From, builtFor[family], fix, errs.ErrUnsupported)
}

// sizeMismatch says, after MPI_Init, that the world MPI made is not the job
// the launcher started (each process initialised alone, or joined another
// job), or nil.
func sizeMismatch(family string, worldSize int, environ func(string) (string, bool)) error {
	job, ok := ownJob(family, environ)
	if !ok || job.Size == 0 || job.Size == worldSize {
		return nil
	}
	return fmt.Errorf("mpi: MPI_Init made a world of %d ranks, but %s started this process as rank %d of %d (%s): this binary, built for %s, did not join the launcher's job; start it with the launcher of the MPI it is built for, or rebuild it with the tag of the launcher's MPI (-tags mpi for Open MPI, -tags mpich for MPICH and its ABI); under srun, give --mpi= the plugin that MPI needs (pmix or pmi2): %w",
		worldSize, job.Launcher, job.Rank, job.Size, job.From, builtFor[family], errs.ErrUnsupported)
}

// JoinError says why this process cannot join its launcher's job, without
// starting MPI: the launcher is of the other MPI family, or an earlier Init
// found that MPI_Init made another world than the launcher's. nil when it
// can, as far as can be told before MPI_Init. For Probe.
func JoinError() error {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	if joinErr != nil {
		return joinErr
	}
	return launcherConflict(family, os.LookupEnv)
}
