// Package nodepath is the node path of the host-staged MPI backend: a
// point-to-point message between two ranks of one node goes through a ring
// of pinned slots in memory both processes map (devmem.AllocPinnedShared),
// copied in by the sender's copy engine and out by the receiver's, instead
// of through MPI's own shared-memory copies. The transport carries one
// small header a message (the ring's IPC handle, where its chunks start and
// how many bytes follow), so that the k-th receive from a peer still
// matches the k-th send to it.
//
// It is a leaf: it knows devmem, not MPI nor a communicator. The caller
// (internal/mpicomm) hands out turns on each pair's Link in call order
// (Table), sends and receives the header on its own transport, and drives
// the chunks with SendChunks and RecvChunks, giving a deadline and, where
// nothing else drives its transport, a progress function that the
// waits call between sleeps.
//
// Each ordered pair of ranks has one ring, made by the sender at its first
// such message and opened by the receiver from the header's IPC handle. Two
// counters at the ring's start say how many chunks the sender has put there
// (ready) and how many the receiver has taken out (done), over the ring's
// life; slot i%slots holds chunk i. The messages of a pair take the ring in
// the order they were called (their ticket), one at a time on each side; a
// message's chunks follow the previous message's without a gap.
package nodepath
