// Package bench measures gpucomm's collectives and point-to-point transfers on
// any backend, the way NVIDIA's nccl-tests and the OSU micro-benchmarks
// measure a library: a size sweep (-b, -e, -f), warm-up, repeated timed
// iterations summarised by their median and spread, and results checked
// against values computed in Go as it goes.
//
// Bandwidths follow nccl-tests' doc/PERFORMANCE.md: algbw = S/t with S the
// operation's size in nccl-tests' convention (the whole array for allgather,
// reducescatter and alltoall), and busbw = algbw times the operation's bus
// factor. Ping-pong latency is half a round trip, as osu_latency reports it;
// bandwidth is a window of back-to-back sends closed by an ack, as osu_bw.
//
// Each report also times the same operation issued from a C loop straight to
// the library underneath the backend (package cbaseline), found by the
// communicator's Backend name, so the overhead of gpucomm shows as a ratio.
//
// Every rank runs the same code; the numbers are gathered over the
// communicator itself, so every rank ends with the same report and only rank 0
// needs to print it. bench must not import a backend other than comm/local,
// which it needs for in-process ranks.
package bench
