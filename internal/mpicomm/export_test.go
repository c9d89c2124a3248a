package mpicomm

// SetReduceFault makes this process's IPC reductions fail their part
// where f says so (reduceFault), for the rank tests of ipcreduce_test.go;
// nil puts the real path back.
func SetReduceFault(f func(rank int) error) { reduceFault = f }

// SetFusedRanks sets fusedRanks, the most ranks whose reductions on a GPU
// are one kernel, and returns what it was.
func SetFusedRanks(n int) int {
	was := fusedRanks
	fusedRanks = n
	return was
}

// IPCEventsWanted is ipcEventsWanted: whether the reductions of a
// communicator of size ranks, some sharing a GPU or not, want the IPC
// events, as IPCEventsEnv says.
func IPCEventsWanted(size int, shared bool) (bool, error) { return ipcEventsWanted(size, shared) }

// P2PEventsWanted is p2pEventsWanted: whether the messages of a
// communicator want the IPC events, some of whose ranks share a GPU or not.
func P2PEventsWanted(shared bool) (bool, error) { return p2pEventsWanted(shared) }

// Crowded is crowded: whether n transfers waiting at once on each of the
// node's ranks are more than this process's CPUs.
func (c *Comm) Crowded(n int) bool { return c.crowded(n) }
