package mpi

// NotBuiltReason says why MPI is not built into this binary and how to
// build it in: no MPI tag was given, or one was and cgo was off (which the
// build does not refuse: the stub stands in, and its binary says so here).
// A binary with MPI built in never needs it.
func NotBuiltReason() string {
	if taggedWithoutCgo {
		return "this binary was built with an MPI tag (-tags mpi or mpich) but without cgo (CGO_ENABLED=0, " +
			"or no C compiler on PATH, which turns cgo off), and MPI needs cgo: rebuild with CGO_ENABLED=1 and a C compiler"
	}
	return "rebuild with -tags mpi (Open MPI) or -tags mpich (MPICH and its ABI), with cgo enabled"
}

// TaggedWithoutCgo reports whether this binary was built with an MPI tag
// while cgo was off, so that MPI is not built in though the tag asked for it.
func TaggedWithoutCgo() bool { return taggedWithoutCgo }
