//go:build mpi && mpich

package mpi

// Tags mpi (Open MPI) and mpich (MPICH) select two different MPI ABIs; one
// binary can link only one. The duplicate constant below stops the build with
// an error that names the problem. Build with -tags mpi or -tags mpich.

const build_tags_mpi_and_mpich_are_mutually_exclusive_use_only_one = true
const build_tags_mpi_and_mpich_are_mutually_exclusive_use_only_one = true
