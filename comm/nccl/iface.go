package nccl

import (
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// The communicator is written against three small interfaces so that its
// logic (argument checks, the bootstrap, the Gather/Scatter/AllToAll plans,
// the watchdog) runs in tests on machines without MPI ranks, GPUs or NCCL:
// production uses MPI (mpiboot.go) and NCCL (library_cgo.go), the tests an
// in-process stand-in for each.

// boot is the host-side communicator that carries NCCL's unique id and the
// ranks' agreements: an MPI communicator in production.
type boot interface {
	rank() int
	size() int
	// allgather returns every rank's b, by rank; lengths may differ.
	allgather(b []byte) ([][]byte, error)
	// bcast returns root's b on every rank.
	bcast(b []byte, root int) ([]byte, error)
	// split is MPI_Comm_split: ordered by key, then rank; nil for comm.Undefined.
	split(color, key int) (boot, error)
	// localRankSize places this rank among the ranks of its node.
	localRankSize() (rank, size int, err error)
	// free releases the communicator (and its hold on MPI); after a failed
	// Open or Split, MPI stays up for another communicator.
	free(failed bool) error
	// abortJob ends every process of the job (MPI_Abort); it returns only
	// where the job is not one of processes (the tests' in-process fake).
	abortJob()
}

// library makes engines: NCCL in production.
type library interface {
	// load makes the library usable; a missing library is ErrLibraryNotFound.
	load() error
	// describe names the loaded library ("NCCL 2.28.3").
	describe() string
	// versionCode is the loaded library's version, major*10000+minor*100+patch
	// (ncclGetVersion's, read once at load); 0 when unknown.
	versionCode() int
	// checkDevice refuses a device the library cannot run on.
	checkDevice(d *devmem.Device) error
	// deviceID names the physical device, so that two ranks on one are seen.
	deviceID(d *devmem.Device) [16]byte
	// uniqueID makes the id of a new communicator (ncclGetUniqueId).
	uniqueID() ([128]byte, error)
	// initRank joins rank of an nranks communicator on d (ncclCommInitRank).
	initRank(d *devmem.Device, nranks, rank int, id [128]byte) (engine, error)
}

// engine is one rank's NCCL communicator. Calls on one engine never overlap,
// except asyncError and abort, which may come from the watchdog at any time.
// Buffers have been checked; a zero Buffer is NCCL's NULL (a non-root's
// unused buffer). Streams are never nil.
type engine interface {
	allReduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error
	reduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, root int, s *devmem.Stream) error
	broadcast(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error
	allGather(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error
	reduceScatter(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error
	// group issues sends and receives to other ranks as one NCCL group.
	group(ops []comm.P2P, s *devmem.Stream) error
	// canSplit reports whether split is available (ncclCommSplit, NCCL 2.18).
	canSplit() bool
	// split is ncclCommSplit; nil for comm.Undefined.
	split(color, key int) (engine, error)
	// asyncError is nil while the communicator is healthy.
	asyncError() error
	// abort frees the communicator, abandoning its work (ncclCommAbort).
	abort() error
	// finalize flushes outstanding work (ncclCommFinalize, where present);
	// destroy then frees the communicator.
	finalize() error
	destroy() error
}
