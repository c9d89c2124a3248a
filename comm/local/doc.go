// Package local is gpucomm's in-process backend: NewGroup(n) gives n
// communicators in one process, one per goroutine rank, each on its own
// simulated host device. It is pure Go, the default backend, and the
// reference the conformance suite is first proven on.
//
// Each operation runs as a task on the caller's stream, so it keeps the
// stream-ordered contract of the GPU backends; ranks meet at the k-th
// collective each of them called. Send is eager: it never waits for the
// matching Recv. A receive that meets a send of another count or dtype
// fails with ErrMismatch, writes nothing and consumes the message, so the
// messages between two ranks stay in step; a GroupP2P with such a receive
// writes none of its buffers and consumes every message its receives
// matched (Comm.GroupP2P).
//
// comm.Open("local") gives a group of one rank. Under a launcher that
// started several processes (mpirun -np 4) that would make each process a
// job of its own, so comm.Open refuses it there, naming the launcher and the
// rebuild (-tags mpi or mpich) that lets the processes join one job.
// NewGroup's in-process groups are not affected. Its ranks run on simulated
// host devices only: a GPU asked for (GPUCOMM_DEVICE=cuda, WithDevice) is an
// error, not silently the host device.
//
// It must not import cgo or any other backend.
package local
