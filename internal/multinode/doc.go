// Package multinode lets tests run MPI jobs across simulated nodes on one
// machine: the nodes of scripts/multinode/nodes.sh, each a network + UTS +
// IPC namespace with its own hostname (nodeA, nodeB, ...), its own address
// on a private bridge (10.99.0.1, 10.99.0.2, ...), /dev/shm, boot_id and
// machine-id. Ranks on one node share memory as on a real node; ranks on
// different nodes reach each other over TCP only.
//
// Only tests use it, and only where GPUCOMM_MULTINODE=1 (the nodes need root:
// scripts/multinode/ci.sh sets it); elsewhere Up skips the test with the
// reason. The API:
//
//	nodes := multinode.Up(t, 2)  // skips when unavailable; down at cleanup
//	j := nodes.Launch(t, "openmpi", 2, time.Minute, env, exe, args...)
//	// j.Output: every rank's output; j.Err: the launcher's exit error
//	out, err := nodes.Exec(t, "nodeB", "hostname")  // one command on a node
//	j = nodes.LaunchUntil(t, "mpich", 2, time.Minute, done, env, argv...)
//	// as Launch, but the job is ended FinalizeGrace after done(output) is
//	// true, with j.Lingered set: MPICH 4.0.2 + UCX's finalize hang
//	nodes.UseForMPITests(t, family) // mpitest.RunRanks and friends launch
//	                                // across the nodes (np/N ranks a node,
//	                                // nodeA first)
//
// Subpackage mpinode runs a backend's TestRank... tests across the nodes
// (mpinode.UnderLauncher) and checks from inside a rank that the job spans
// them (mpinode.OnItsNode).
//
// MPICH jobs get GPUCOMM_MPI_FINALIZE_BOUND=5s from nodes.sh (unless set):
// internal/mpi then ends a rank left in MPI_Finalize 5 s after every rank
// passed the barrier before it, with the program's own exit status (Debian's
// MPICH 4.0.2 + UCX 1.13 hangs there now and then). Extra launcher options
// go in GPUCOMM_MULTINODE_LAUNCHER_ARGS (the node-kill drill gives Hydra
// -disable-auto-cleanup, so that the survivors live to report).
//
// Families are "openmpi" and "mpich", the values of internal/mpi.Family().
// Every Up makes its own set of nodes in its own state directory, so tests in
// parallel packages do not meet; Available says why the harness cannot run
// here ("" when it can) without making anything.
//
// It must not leave anything behind: Up registers nodes.sh down with
// t.Cleanup, which ends the processes still running in the nodes and
// removes the namespaces, veths, mounts and the state directory.
package multinode
