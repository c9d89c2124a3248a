package nccl

import (
	"errors"

	"github.com/gpucomm/gpucomm/internal/mpi"
)

// mpiBoot is an MPI communicator of this backend's own, holding a reference
// to MPI, so that MPI stays up while any NCCL communicator lives.
type mpiBoot struct{ c *mpi.Comm }

// openWorld duplicates MPI_COMM_WORLD, so that the bootstrap's messages
// never meet the program's own.
func openWorld() (boot, error) {
	if err := mpi.Acquire(); err != nil {
		return nil, err
	}
	c, err := mpi.World().Dup()
	if err != nil {
		return nil, errors.Join(err, mpi.ReleaseKeepingUp())
	}
	return &mpiBoot{c: c}, nil
}

func (b *mpiBoot) rank() int { return b.c.Rank() }
func (b *mpiBoot) size() int { return b.c.Size() }

func (b *mpiBoot) allgather(p []byte) ([][]byte, error) { return mpi.AllgatherBytes(b.c, p) }

func (b *mpiBoot) bcast(p []byte, root int) ([]byte, error) { return mpi.BcastBytes(b.c, p, root) }

func (b *mpiBoot) split(color, key int) (boot, error) {
	if err := mpi.Acquire(); err != nil {
		return nil, err
	}
	c, err := b.c.Split(color, key) // nil, nil for a negative color (MPI_UNDEFINED)
	if err != nil || c == nil {
		return nil, errors.Join(err, mpi.Release())
	}
	return &mpiBoot{c: c}, nil
}

func (b *mpiBoot) localRankSize() (int, int, error) {
	sh, err := b.c.SplitShared()
	if err != nil {
		return 0, 0, err
	}
	r, s := sh.Rank(), sh.Size()
	return r, s, sh.Free()
}

func (b *mpiBoot) free(failed bool) error {
	if failed { // MPI stays up for another Open: it cannot be initialised twice
		return errors.Join(b.c.Free(), mpi.ReleaseKeepingUp())
	}
	return errors.Join(b.c.Free(), mpi.Release())
}

// abortJob is MPI_Abort on MPI_COMM_WORLD: every process of the job ends.
func (b *mpiBoot) abortJob() { mpi.World().Abort(1) }
