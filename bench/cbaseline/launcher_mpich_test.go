//go:build cgo && mpich

package cbaseline

// mpiLauncher is MPICH's Hydra launcher.
func mpiLauncher() (string, []string) {
	return "mpiexec.mpich", nil
}
