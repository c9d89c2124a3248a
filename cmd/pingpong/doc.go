// Command pingpong measures the host-staged MPI backend against plain MPI in
// the same run: point-to-point ping-pong between device buffers (as the
// backend moves them, with large messages through the node path; pipelined
// through MPI with the node path off; and through MPI with the whole message
// as one chunk) beside MPI between pinned host buffers, AllReduce beside
// MPI_Allreduce on host buffers, and, with -chunks, the copy and MPI
// bandwidth of each chunk size that the default is chosen from. With
// -cudaaware it adds the CUDA-aware backend (on no stream and
// stream-ordered) and MPI called on the same device buffers; -copies times
// the staging copies alone and between the ranks; -memload times rank 0's
// pinned copies and a host memcpy, alone and at once (do the staging copies
// and MPI's memcpy share host memory's bandwidth?). Run it under the
// launcher; ranks 0 and 1 ping-pong, every rank reduces, rank 0 prints:
//
//	go build -tags mpi ./cmd/pingpong   # or -tags mpich
//	mpirun -np 2 pingpong [-sizes 8,1K,1M] [-max 256M] [-chunks 256K,512K,1M,2M,4M,8M] [-cudaaware] [-copies] [-memload]
//
// Where `gpucomm bench` times one backend at a time beside its C baseline,
// this program puts several ways of moving the same bytes side by side in
// one table, round after round, to find where the host-staged path loses
// time. Its medians and bandwidths are bench's (bench.Summarize, bench.GBps)
// and its sizes are read and swept as bench's (bench.ParseSize, bench.Sweep).
//
// It is a program, not a test: it asserts nothing about time, and must not
// run unattended in CI, whose machines share their cores.
package main
