// Package launcher reads what a process launcher (Open MPI's mpirun, MPICH's
// Hydra mpiexec, Slurm's srun, a PMIx server) says of the job in the
// environment of the processes it starts: how many ranks, which one this is,
// and which one on its node.
//
// It exists so that gpucomm can tell, before MPI is up and without MPI linked
// in, that the process belongs to a job of several ranks: a binary built
// without MPI, or linked with the other MPI family than the launcher's, would
// otherwise run as several one-rank jobs that all pass, or hang in MPI_Init.
//
// It is pure Go and reads only the environment it is given; it starts,
// contacts and changes nothing.
package launcher
