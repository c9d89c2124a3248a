// Package pipeline moves a device range through pinned host slots, chunk by
// chunk, so that the copy of one chunk into its slot, the transport's work on
// another (an MPI request today) and the copy of a third back to the device
// overlap. It is a leaf: it knows devmem and nothing of a communicator or of
// MPI. What carries the chunks is a Transport, a small interface over the
// transport's request type R (internal/mpicomm wraps *mpi.Request; a test
// uses an in-memory loopback; a UCC or TCP transport would be a third).
//
//   - pool.go: the slots (pinned buffers with their copy events) and the pool
//     that lends them, in sizes of the smallest slot doubled.
//   - pipeline.go: Pipe (the stages of one transfer), Engine (pool and copy
//     streams), Run (one chunk on the caller's goroutine; several in three
//     overlapping stages), and CopyIn/CopyOut, the common copy stages.
//   - policy.go: the chunk-size policy, all of it: the default chunk, how a
//     message is cut (Policy.Cut, Cut.Spans), and the widened-bytes cut. A
//     new policy is a change of this one file.
//   - trace.go: GPUCOMM_TRACE_PIPELINE, a timeline of chosen transfers.
package pipeline
