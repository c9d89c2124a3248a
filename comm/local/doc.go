// Package local is gpucomm's in-process backend: NewGroup(n) gives n
// communicators in one process, one per goroutine rank, each on its own
// simulated host device. It is pure Go, the default backend, and the
// reference the conformance suite is first proven on.
//
// Each operation runs as a task on the caller's stream, so it keeps the
// stream-ordered contract of the GPU backends; ranks meet at the k-th
// collective each of them called. Send is eager: it never waits for the
// matching Recv.
//
// It must not import cgo or any other backend.
package local
