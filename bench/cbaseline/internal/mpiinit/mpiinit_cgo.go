//go:build cgo && (mpi || mpich)

package mpiinit

// #include <mpi.h>
// static int world_rank_size(int *rank, int *size) {
// 	int rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
// 	return rc != MPI_SUCCESS ? rc : MPI_Comm_size(MPI_COMM_WORLD, size);
// }
import "C"

import "fmt"

// Built reports whether MPI is compiled in.
const Built = true

// Init calls MPI_Init.
func Init() error {
	if rc := C.MPI_Init(nil, nil); rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpiinit: MPI_Init failed with error %d", int(rc))
	}
	return nil
}

// World is this process's rank in MPI_COMM_WORLD and the number of ranks.
func World() (rank, size int, err error) {
	var r, s C.int
	if rc := C.world_rank_size(&r, &s); rc != C.MPI_SUCCESS {
		return 0, 0, fmt.Errorf("mpiinit: MPI_Comm_rank/size failed with error %d", int(rc))
	}
	return int(r), int(s), nil
}

// Finalize calls MPI_Finalize.
func Finalize() error {
	if rc := C.MPI_Finalize(); rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpiinit: MPI_Finalize failed with error %d", int(rc))
	}
	return nil
}
