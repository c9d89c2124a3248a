package conformance

import (
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
)

// primeCount is a prime above a million: no power of two divides it, so a
// backend (or a library under it) that cuts an array into chunks, blocks or
// vectors of any even size leaves a ragged tail, and a count of this size
// takes the paths of large transfers. Odd element offsets add misaligned
// starts. NCCL 2.28's AllReduce of float64 with Avg got the last 3 elements
// wrong at exactly this count, which no case of smaller counts caught.
const primeCount = 1_000_003

// primeCases run at primeCount in short mode too, since the defects they
// look for show at no smaller count; short mode thins the pairings of
// element type and reduction instead, and the race detector, which makes
// each call take seconds on the host device, leaves a few calls (the
// builds without it, which the MPI backends' tests, gpucomm check and the
// GPU runs use, run the rest).
func primeCases() []testCase {
	var cs []testCase
	for _, g := range []struct {
		name  string
		specs func(p int, thin, sparse bool) []collSpec
	}{{"Prime/AllReduce", primeAllReduce}, {"Prime/Reductions", primeReductions}, {"Prime/Moves", primeMoves}} {
		cs = append(cs, testCase{name: g.name, body: func(r *rank) {
			for _, s := range g.specs(r.c.Size(), r.env.short || raceEnabled, raceEnabled) {
				r.collective(s)
			}
		}})
	}
	return cs
}

// atPrime sets every spec's count to primeCount.
func atPrime(specs []collSpec) []collSpec {
	for i := range specs {
		specs[i].count = primeCount
	}
	return specs
}

// primeAllReduce is AllReduce out of place at odd element offsets for every
// element type × reduction, then in place at an odd offset for float64 Avg
// and float16 Sum. The thin subset gives each type one reduction (so every
// reduction an integer and a floating type) and float64, the type NCCL got
// wrong, Sum and Avg.
func primeAllReduce(p int, thin, sparse bool) []collSpec {
	if sparse {
		return atPrime([]collSpec{{op: driver.OpAllReduce, dt: comm.Float64, red: comm.Avg, sendAt: 1, recvAt: 3}})
	}
	var specs []collSpec
	ops := comm.Ops()
	for i, dt := range comm.DTypes() {
		for _, red := range ops {
			if thin && red != ops[i%len(ops)] && !(dt == comm.Float64 && red == comm.Sum) {
				continue
			}
			specs = append(specs, collSpec{op: driver.OpAllReduce, dt: dt, red: red, sendAt: 1, recvAt: 3})
		}
	}
	return atPrime(append(specs,
		collSpec{op: driver.OpAllReduce, dt: comm.Float64, red: comm.Avg, inPlace: true, sendAt: 1, stream: true},
		collSpec{op: driver.OpAllReduce, dt: comm.Float16, red: comm.Sum, inPlace: true, sendAt: 3, stream: true}))
}

// primeReductions is Reduce and ReduceScatter (a block of primeCount
// elements a rank) at odd element offsets, with float64 Avg and, outside
// the thin subset, one more pairing each.
func primeReductions(p int, thin, sparse bool) []collSpec {
	specs := []collSpec{
		{op: driver.OpReduce, dt: comm.Float64, red: comm.Avg, root: p - 1, sendAt: 1, recvAt: 3},
		{op: driver.OpReduceScatter, dt: comm.Float64, red: comm.Avg, sendAt: 3, recvAt: 1},
	}
	switch {
	case sparse:
		specs = specs[:1]
	case !thin:
		specs = append(specs,
			collSpec{op: driver.OpReduce, dt: comm.BFloat16, red: comm.Sum, root: 0, inPlace: true, sendAt: 3},
			collSpec{op: driver.OpReduceScatter, dt: comm.Int8, red: comm.Max, inPlace: true, sendAt: 1, stream: true})
	}
	return atPrime(specs)
}

// primeMoves is every collective that moves data without reducing it, at
// odd element offsets, with one- and two-byte elements, which keep the
// buffers of p blocks small.
func primeMoves(p int, thin, sparse bool) []collSpec {
	specs := []collSpec{
		{op: driver.OpBroadcast, dt: comm.Uint8, root: p - 1, sendAt: 1, recvAt: 3},
		{op: driver.OpAllGather, dt: comm.Int8, sendAt: 3, recvAt: 1},
		{op: driver.OpAllToAll, dt: comm.Uint8, sendAt: 1, recvAt: 3},
		{op: driver.OpGather, dt: comm.Int8, root: p - 1, sendAt: 1, recvAt: 3},
		{op: driver.OpScatter, dt: comm.BFloat16, root: 0, sendAt: 3, recvAt: 1},
	}
	switch {
	case sparse:
		specs = specs[:1]
	case !thin:
		specs = append(specs,
			collSpec{op: driver.OpBroadcast, dt: comm.Float16, root: 0, inPlace: true, sendAt: 1},
			collSpec{op: driver.OpAllGather, dt: comm.Float16, inPlace: true, sendAt: 1, stream: true})
	}
	return atPrime(specs)
}
