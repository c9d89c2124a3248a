// Package mpi is gpucomm's host-staged MPI backend: device data goes device →
// pinned host buffer → plain MPI → pinned host buffer → device, so any MPI
// serves any device (a GPU, or the simulated host device, where the same
// staging runs so that CI exercises it). Enable it with a blank import (or
// gpucomm/comm/all) and open it by name, one rank a process under mpirun:
//
//	c, err := comm.Open("mpi")
//
// Without -tags mpi (Open MPI) or -tags mpich (MPICH and its ABI) it still
// registers: Probe says how to rebuild and Open returns comm.ErrNotBuilt.
//
// # Pipeline
//
// A transfer is cut into chunks: the first of the agreed chunk
// (comm.WithChunkBytes, GPUCOMM_CHUNK_BYTES; 1 MiB by default; the ranks
// agree on the smallest one asked for), each next one twice the one before,
// up to 4 MiB (or the agreed chunk, if larger). Each chunk costs MPI a
// rendezvous and the copies a launch and a wait, so long messages want long
// chunks, while a short first chunk starts MPI early. A message of more
// than one chunk is announced by a 24-byte header with its length, which
// the receive takes alone before it posts its chunks' receives: a receive
// whose count differs then drops the sender's chunks (so that the send
// completes) and fails with comm.ErrMismatch before it has written a byte,
// and a one-chunk receive that meets a header, or a longer one-chunk
// message, does the same. Each chunk goes through a pinned staging
// slot from a pool that lives until Close. Three stages run at once: a
// goroutine copies chunks into slots on the backend's D2H stream, the
// operation's goroutine starts MPI on each chunk as soon as it is in (up to
// four in flight) and waits for them in order, and a goroutine copies each
// finished chunk out on the H2D stream and frees its slot. The MPI stage
// thus stays inside MPI, where a shared-memory MPI moves the data, while
// copies are issued and waited for elsewhere. A message of one chunk runs
// its stages in turn with synchronous copies, which is quicker. The
// pipeline is internal/pipeline, with MPI as its transport, and its chunk
// policy is internal/pipeline/policy.go alone.
//
//   - Send, Recv, GroupP2P: Isend/Irecv per chunk. Every entry of a GroupP2P
//     runs its own pipeline at once, so sends never wait for receives.
//     Between two ranks of one node, from 64 KiB up, the node path below.
//   - AllReduce: Iallreduce per chunk, in place in the slot; Avg sums, then
//     divides in the slot (driver.DivideInto) before the copy out. float16 and
//     bfloat16 use internal/mpi's user ops, which run on the pinned memory.
//   - Broadcast: Ibcast per chunk.
//   - Reduce: Iallreduce per chunk, copied back at the root only
//     (internal/mpi has no MPI_Ireduce yet): twice a reduce's traffic.
//   - ReduceScatter: Iallreduce per chunk over all of send, of which this
//     rank copies back its own block.
//   - A collective of the four above of one chunk of at most 64 KiB (the
//     whole array; not an 8-bit sum that is widened) is instead MPI's
//     blocking MPI_Allreduce (in place) or MPI_Bcast on one pinned slot,
//     with the same copies and host Avg, where the ranks agreed at Open that
//     none has a timeout and every one's MPI is at MPI_THREAD_MULTIPLE:
//     Open MPI's nonblocking collectives cost several times the blocking
//     ones' latency on a small message (issue 23.4, docs/PERFORMANCE.md).
//   - AllGather, Gather, Scatter, AllToAll: block by block as point-to-point
//     transfers, each block chunked and pipelined on its own (all blocks at
//     once); a rank's own block is a device-to-device copy, none in place.
//     Blocks to and from ranks of the node take the node path below, on
//     rings of their own.
//
// # The node path
//
// MPI moves a message between two processes of one node by copying it into
// its own shared segment and out again: with the staging copies, four
// copies a byte. For a point-to-point message of at least the agreed size
// (comm.WithNodeBytes, GPUCOMM_NODE_BYTES; 64 KiB by default; off when any
// rank turns it off) between ranks of one node, the sender instead copies
// the message from its device, chunk by chunk (the agreed chunk), into a
// ring of four pinned slots that both processes map (internal/nodepath; devmem.AllocPinnedShared,
// made at the pair's first such message and opened by the receiver from
// the IPC handle in the message's header), and the receiver copies each
// chunk from there to its device as soon as it is in: two copies a byte,
// by the GPUs' copy engines, overlapped. MPI carries only a header a message,
// with the message's tag, so matching is unchanged; two counters in the
// ring's first page say how many chunks were put in and taken out. Messages
// of one pair take the ring in call order, one at a time on each side. On
// the H200 it reaches 2.6 times host MPI's bandwidth at 4 MiB and 4.7 times
// at 256 MiB (docs/PERFORMANCE.md). At Open the ranks of each node check
// that they can map each other's pinned memory (one user, one PID
// namespace); where they cannot, every message goes through MPI. A receive
// whose count differs from the send's is comm.ErrMismatch, its buffer
// untouched; when both sides took the node path, or the sender's message
// went through MPI (whole, or announced), the pair stays in step for the
// next message. When
// the sender took the node path and the receive, too small for it, went
// through MPI, the sender's chunks are left in its ring: the communicator is
// then broken, and Close ends the job with the reason rather than let the
// pair hang at its next message. A node path message that stops half way
// (a timeout, a failed copy) breaks the communicator the same way. Between
// ranks that take the IPC path instead (the receiver copies out of the
// sender's buffer, opened by its IPC handle), counts that differ leave
// the pair in step: the receiver answers the sender's control message with
// a refusal, and drops the bytes of a sender whose buffer could not be
// exported as they come through MPI (a receive staged over several chunks
// takes the control message alone, before its chunks' receives). The ring costs
// four chunks of pinned memory per pair and direction that uses it. The ring
// is the sender's memory, and a completed Send is delivered whatever the
// sender does next, as in MPI: Close (and Finalize, for communicators left
// open) first waits until every peer has taken the chunks sent it, at most
// the timeout when one is set (then Close fails with comm.ErrTimeout naming
// the peer, and that peer's receive will fail), otherwise for as long as it
// takes, saying on standard error after 10 s whom it waits for. Like
// MPI's rendezvous, a large Send waits for its receive: two ranks that
// each Send to the other on one stream before they Recv wait for each
// other (use GroupP2P).
//
// Open MPI 4.1.4's 8-bit MPI_SUM saturates instead of wrapping; Open checks
// for it, and when MPI does it int8 and uint8 sums run widened to int32 in
// the slot.
//
// # Order, threads, misuse
//
// Operations are stream-ordered: each runs as a host function on its stream
// (internal/devhook.HostCall), after the stream's earlier work and before
// its later work, so MPI never touches a
// buffer early; errors of queued work come back from stream.Synchronize.
// Collectives reach MPI in call order (a ticket taken at the call), point-to-
// point messages carry their number as the tag. MPI is asked for
// MPI_THREAD_MULTIPLE; below it every MPI call is serialised and waits poll.
//
// Options.Debug (GPUCOMM_DEBUG=1) compares each collective's signature across
// the ranks first and returns comm.ErrMismatch naming who called what.
// Options.Timeout (GPUCOMM_TIMEOUT) bounds each operation: comm.ErrTimeout
// names the collective and the ranks that never entered it (or the peer of a
// transfer). After a timeout the communicator is broken and its Close calls
// MPI_Abort, ending the job rather than hanging in MPI_Finalize.
//
// MPI can be initialised once per process: the last Close finalizes it, so
// a program that closes every communicator cannot open another; keep one
// open for the program's life.
//
// A binary joins the job of its own MPI family's launcher only: built with
// -tags mpich and started by Open MPI's mpirun, or built with -tags mpi and
// started by MPICH's mpiexec (Hydra), Open fails at once on every rank with
// comm.ErrUnsupported naming the launcher, the job's size and the fix,
// instead of hanging in MPI_Init or running as one-rank jobs. After MPI_Init
// the world's size is compared with the size the launcher announced
// (mpirun, mpiexec, srun): a process that MPI started alone in a larger
// job (srun without the --mpi plugin its MPI needs) fails the same way.
//
// It must not hand MPI device memory, nor pipeline anything itself: the
// engine is internal/mpicomm, shared with comm/cudaaware.
package mpi
