package mpicomm

import "github.com/gpucomm/gpucomm/comm/driver"

// strategy is how a Comm's data reaches MPI, chosen once at Open from the
// Mode (strategyOf) and asked by the core wherever the two backends differ;
// nothing else looks at the Mode. stagedStrategy (staged.go) is comm/mpi's:
// device data goes through the chunk pipeline, and messages between ranks
// of a node may go the node path. directStrategy (direct.go) is
// comm/cudaaware's: device pointers go to MPI, except what MPI cannot
// reduce on them, which goes through the pipeline too.
//
// Its methods take no slice of the caller's: an interface call lets its
// arguments escape, and the transfers of a Send on no stream live on the
// caller's stack (zero allocations a call, mpitest's AllocsPerRun body).
// The bodies they choose are methods of Comm called directly.
type strategy interface {
	// mode is the Mode it was chosen for (Split makes its like).
	mode() Mode
	// direct reports whether call hands device pointers to MPI, rather
	// than going through the host-staged pipeline.
	direct(c *Comm, call driver.Call) bool
	// limit refuses what MPI cannot take in one call (Front's Limit).
	limit(c *Comm, call driver.Call) error
	// deviceMemory reports whether MPI is handed device memory: MPI's own
	// CUDA calls then need the device's context, and Open checks that MPI
	// admits device pointers (admitDeviceMemory).
	deviceMemory() bool
	// nodePath reports whether messages between ranks of a node may go
	// the node path (node.go, internal/nodepath).
	nodePath() bool
	// stagesLarge reports whether reductions that would go to MPI direct
	// go through the pipeline from StageReduceBytes up.
	stagesLarge() bool
}

// strategyOf is the strategy of a mode: the one place the Mode decides.
func strategyOf(m Mode) strategy {
	if m == Direct {
		return directStrategy{}
	}
	return stagedStrategy{}
}
