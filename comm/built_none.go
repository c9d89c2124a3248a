//go:build !((mpi && !mpich && cgo) || (mpich && !mpi && cgo))

package comm

// builtMPI says which MPI this binary links, for messages: the build tags
// are internal/mpi's, read here without importing it (comm stays cgo-free).
const builtMPI = ""
