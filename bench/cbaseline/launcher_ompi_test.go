//go:build cgo && mpi && !mpich

package cbaseline

// mpiLauncher is Open MPI's mpirun, allowed to run as root (CI is root) and
// to put more ranks than cores on a small machine.
func mpiLauncher() (string, []string) {
	return "mpirun.openmpi", []string{"--oversubscribe", "--allow-run-as-root"}
}
