package main

import "github.com/gpucomm/gpucomm/internal/mpi"

// mpiBuiltForTest says whether this test binary has MPI (-tags mpi|mpich).
var mpiBuiltForTest = mpi.Built()
