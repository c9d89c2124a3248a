// Package mpicomm is the engine under gpucomm's two MPI backends, comm/mpi
// (host-staged) and comm/cudaaware (device pointers to MPI). Both are one
// Comm here, in Staged or Direct mode; the backends only register it, probe
// for it and document it.
//
// Files: comm.go (Open, the agreed settings, Split, Close), ops.go (Front's
// engine: Usable, Limit, Run; tickets, turns, timeouts, broken state),
// control.go (announcements, debug digests), strategy.go (what differs
// between the backends, chosen from the Mode at Open and asked nowhere
// else), staged.go and node.go (the host-staged strategy and its node path,
// over internal/nodepath), direct.go and vmm.go (the direct strategy), transport.go (MPI as the
// transport of internal/pipeline, the chunk pipeline, whose chunk policy is
// internal/pipeline/policy.go), aware.go (the CUDA-awareness probe).
//
// What it does for both:
//   - Open: internal/mpi Acquire, three dups of MPI_COMM_WORLD (collectives,
//     point-to-point and Split, control messages), the node-local rank from
//     MPI_Comm_split_type(SHARED), the device from devmem.Open with that local
//     rank; the ranks agree on the chunk, Debug and announcing in one
//     Allreduce. Close releases it all (MPI_Finalize with the last reference).
//   - Stream order: every operation runs as a host call on its stream
//     (devhook.HostCall, a stream.HostFunc that also runs when the stream's
//     earlier GPU work failed). Collectives take a ticket at call time and
//     fn waits for its turn, so MPI sees each rank's collectives in call
//     order whichever stream runs them; point-to-point transfers take a
//     message number per peer and direction at call time, used as the MPI
//     tag, so the k-th receive from a peer matches its k-th send. An
//     operation whose stream's earlier work failed does not run: it breaks
//     the communicator and gives up its ticket or its turns on the node
//     path, so that later calls fail at once, saying why, and do not wait.
//   - Debug (GPUCOMM_DEBUG): an Allreduce(min) of each collective's signature
//     digest and its complement before it runs; on a difference the ranks
//     gather the texts and every rank returns ErrMismatch naming who called
//     what, and stays usable.
//   - Timeout (GPUCOMM_TIMEOUT): waits are bounded (WaitTimeout; a blocking
//     call runs aside). Each rank announces "I entered collective #k" to the
//     others on the control communicator; on a timeout the error names the
//     ranks whose latest announcement is below k. A timeout breaks the
//     communicator, and Close then calls MPI_Abort.
//   - Node path (Staged, node.go over internal/nodepath): Close and AwaitNodeMessages (comm/mpi's
//     Finalize) wait until the peers have taken what this rank sent through
//     its rings, bounded by the timeout, before the rings are freed.
//   - MPI's own CUDA calls: on a GPU in Direct mode, or with an MPI that says
//     it is CUDA-aware, every MPI call runs with the device's primary context
//     current on its thread (UseDeviceForMPI, internal/mpi ThreadSetup).
//
// It must not know which backend is which beyond the strategy chosen from
// the Mode, import a backend, or hand MPI device memory in Staged mode.
package mpicomm
