package driver

import "time"

// Options configure a communicator (comm.Open). Zero values mean the
// defaults; comm.DefaultOptions fills them from the environment.
type Options struct {
	// Device names the device: "auto", "host", "cuda" or "cuda:N"
	// (GPUCOMM_DEVICE).
	Device string
	// Timeout bounds each operation; 0 waits forever (GPUCOMM_TIMEOUT,
	// a Go duration such as "30s").
	Timeout time.Duration
	// Debug checks each collective's signature across the ranks before
	// running it (GPUCOMM_DEBUG=1).
	Debug bool
	// ChunkBytes is the pipelining chunk of host-staged transfers; 0 picks
	// the backend's default (GPUCOMM_CHUNK_BYTES).
	ChunkBytes int
	// NodeBytes is the size from which the host-staged backend moves a
	// point-to-point message between two ranks of one node through pinned
	// memory the two processes share, instead of through MPI; 0 picks the
	// backend's default and -1 sends every message through MPI
	// (GPUCOMM_NODE_BYTES: a size such as 64K, or "off").
	NodeBytes int
	// StageReduceBytes is the size (the whole array's bytes) from which the
	// cudaaware backend runs a reduction (AllReduce, Reduce, ReduceScatter)
	// through its host-staged pipeline instead of handing device pointers to
	// MPI; 0 picks the backend's default (64 KiB with Open MPI 4 on a GPU,
	// whose reductions of device memory were 1.5-7 times slower than the
	// pipeline on an H200; else off) and -1 hands every reduction to MPI
	// (GPUCOMM_STAGE_REDUCE_BYTES: a size such as 64K, or "off"). The ranks
	// use the largest size any asks for, and none when any rank's setting
	// (its default included) is off.
	StageReduceBytes int
}

// The sizes a pipelining chunk may have. A chunk of a few bytes makes every
// host-staged transfer thousands of MPI messages (an 8 MiB AllGather took 40 s
// instead of 2 with 8-byte chunks), so sizes outside this range are refused
// as a mistake rather than obeyed. The floor stays below 1 KiB because the
// MPI tests cut small transfers into many chunks of odd sizes (1000 bytes)
// on purpose; the default is 1 MiB.
const (
	MinChunkBytes = 512
	MaxChunkBytes = 1 << 30
)

// Verdict is a backend's answer to "can you run here?".
type Verdict struct {
	Usable bool
	Reason string // why not, or what it will use
	// Tentative marks a Usable verdict that only starting the backend can
	// confirm (CUDA-awareness before MPI is up); auto tries such a backend
	// after every backend usable for certain.
	Tentative bool
}

// Driver is what a backend registers.
type Driver struct {
	// Open makes this process's communicator over all ranks of the job.
	Open func(Options) (Conn, error)
	// Probe says whether Open can work here, without starting anything
	// expensive.
	Probe func() Verdict
	// Rank orders backends for "auto": higher is preferred.
	Rank int
	// InProcess marks a backend whose Open makes a job of this process
	// alone (local). Under a launcher that started several ranks, Open of
	// it fails, naming the launcher, instead of making every process a
	// one-rank job of its own; "auto" never picks it there.
	InProcess bool
}

// Conn is what a Driver's Open returns: this process's communicator. comm.Open
// hands it to the program as a comm.Communicator, which it must implement
// (Front gives a backend every data method); Open refuses one that does not.
type Conn interface {
	Rank() int
	Size() int
	Backend() string
	Close() error
}
