package comm

import (
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// Sentinel errors; every backend's errors wrap one of them.
var (
	ErrInvalidArgument = driver.ErrInvalidArgument // a bad count, root, peer, dtype, op or buffer
	ErrClosed          = driver.ErrClosed          // the communicator was closed
	ErrTimeout         = driver.ErrTimeout         // GPUCOMM_TIMEOUT passed before the operation finished
	ErrNotBuilt        = driver.ErrNotBuilt        // the backend was not compiled into this binary
	ErrUnsupported     = driver.ErrUnsupported     // the backend or device cannot do this
	ErrLibraryNotFound = driver.ErrLibraryNotFound // CUDA, NVRTC or NCCL could not be loaded
	ErrNotCUDAAware    = driver.ErrNotCUDAAware    // MPI cannot take device pointers
	ErrDuplicateGPU    = driver.ErrDuplicateGPU    // two ranks on one GPU where the backend forbids it
	ErrBadHandle       = driver.ErrBadHandle       // an IPC handle that cannot be opened here
	ErrMismatch        = driver.ErrMismatch        // ranks called different collectives
	ErrAborted         = driver.ErrAborted         // a rank aborted the job (Aborter)
)

// Error is the error every backend returns: which backend, operation and
// rank failed, and why. Its text reads "gpucomm BACKEND rank R: OP: cause";
// use errors.As to get one, errors.Is to test for a sentinel.
type Error = driver.Error

// P2PKind says whether a P2P entry sends or receives.
type P2PKind = driver.P2PKind

const (
	// SendKind sends Buf to Peer.
	SendKind = driver.SendKind
	// RecvKind receives from Peer into Buf.
	RecvKind = driver.RecvKind
)

// P2P is one transfer of a GroupP2P.
type P2P = driver.P2P

// SendTo is a P2P entry that sends count elements of buf to peer.
func SendTo(peer int, buf devmem.Buffer, count int, dt DType) P2P {
	return driver.SendTo(peer, buf, count, dt)
}

// RecvFrom is a P2P entry that receives count elements from peer into buf.
func RecvFrom(peer int, buf devmem.Buffer, count int, dt DType) P2P {
	return driver.RecvFrom(peer, buf, count, dt)
}

// Options configure Open. Zero values mean the defaults; DefaultOptions
// fills them from the environment. See driver.Options for each field.
type Options = driver.Options

// The sizes a pipelining chunk may have (Options.ChunkBytes,
// GPUCOMM_CHUNK_BYTES); Open refuses others.
const (
	MinChunkBytes = driver.MinChunkBytes
	MaxChunkBytes = driver.MaxChunkBytes
)

// Verdict is a backend's answer to "can you run here?" (Probe).
type Verdict = driver.Verdict
