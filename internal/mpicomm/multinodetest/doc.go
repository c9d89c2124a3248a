// Package multinodetest holds the node tests of gpucomm's MPI backends
// across simulated nodes (scripts/multinode, internal/multinode): two nodes
// of two ranks each, for the MPI family the test binary is built with
// (-tags mpi: Open MPI, -tags mpich: MPICH), on the host device. They check
// what one host cannot show: local ranks, node communicators and device
// choice per node; the node path taken only between ranks of one node;
// NodeShared on every node at once; an IPC handle from another node refused;
// and a whole node killed in a collective, named by every surviving rank.
//
// They run only where GPUCOMM_MULTINODE=1 and the machine lets the harness
// make namespaces (root); elsewhere they skip with the reason:
//
//	GPUCOMM_MULTINODE=1 go test -count=1 -tags mpi ./internal/mpicomm/multinodetest/
//	GPUCOMM_MULTINODE=1 go test -count=1 -tags mpich ./internal/mpicomm/multinodetest/
//
// The package has tests only.
package multinodetest
