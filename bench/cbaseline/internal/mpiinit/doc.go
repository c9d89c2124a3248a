// Package mpiinit starts and stops MPI for cbaseline's tests, which run
// under mpirun without gpucomm's MPI backend. It exists because cgo is not
// allowed in _test.go files; nothing but tests may import it.
package mpiinit
