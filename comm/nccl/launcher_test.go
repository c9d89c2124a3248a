package nccl

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// Tests named TestRank... run inside an MPI job, one rank a process, with
// MPI held up around them by mpitest.Main. Run plainly, TestUnderLauncher...
// start this binary under the launcher of the MPI it was built with (and
// skip where there is none); run by hand under mpirun
// (mpirun -np 2 nccl.test -test.run ^TestRank), the ranks see the
// launcher's variables and run the rank tests directly.

func underLauncher() bool {
	return os.Getenv("OMPI_COMM_WORLD_SIZE") != "" || os.Getenv("PMI_SIZE") != ""
}

// inRanks reports whether this process is one rank of an MPI job.
func inRanks() bool { return mpitest.InRanks() }

func TestMain(m *testing.M) {
	if underLauncher() && !mpitest.InRanks() {
		os.Setenv(mpitest.ChildEnv, "1") // started by hand under mpirun
	}
	mpitest.Main(m)
}

func rankOnly(t *testing.T) { t.Helper(); mpitest.RankOnly(t) }

// The rank tests that need no GPU: what Open refuses, and the bootstrap over
// real MPI with a stand-in for NCCL.
func TestUnderLauncherWithoutGPU(t *testing.T) {
	for _, np := range []int{1, 3} {
		t.Run(fmt.Sprintf("np %d", np), func(t *testing.T) {
			j := mpitest.RunRanks(t, np, "^TestRank(HostDeviceIsRefused|OverMPI)", 2*time.Minute)
			mpitest.ExpectPass(t, np, j)
		})
	}
}

// The GPU tests, on as many ranks as the machine has GPUs, and on one rank
// more, so that two share a GPU, which NCCL must refuse.
func TestUnderLauncherOnGPU(t *testing.T) {
	if v := Probe(); !v.Usable {
		t.Skip("NCCL cannot run here: " + v.Reason)
	}
	gpus, err := devmem.CUDADeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("conformance", func(t *testing.T) {
		mpitest.ExpectPass(t, gpus, mpitest.RunRanks(t, gpus, "^TestRankGPU(Conformance|Split)", 8*time.Minute))
	})
	t.Run("reductions at prime counts", func(t *testing.T) {
		// One rank, whose reductions are identities (GPUCOMM_GPU_TESTS=1).
		mpitest.ExpectPass(t, 1, mpitest.RunRanks(t, 1, "^TestRankGPUReductionsAtPrimeCounts$", 8*time.Minute))
	})
	t.Run("timeout", func(t *testing.T) {
		// A process of its own: the test stalls the GPU and aborts NCCL.
		mpitest.ExpectPass(t, 1, mpitest.RunRanks(t, 1, "^TestRankGPUTimeout$", 2*time.Minute))
	})
	t.Run("duplicate GPU", func(t *testing.T) {
		mpitest.ExpectPass(t, gpus+1, mpitest.RunRanks(t, gpus+1, "^TestRankGPUDuplicate$", 2*time.Minute))
	})
}
