//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// The TestRank tests run on every rank of a launched job (see
// launcher_test.go), each rank calling the same collectives in the same
// order. Data come from fixed seeds, so every rank can compute every other
// rank's input and the expected result element by element; outputs are
// poisoned first and guarded after. A failed check uses t.Errorf so the ranks
// stay in step; a failed call stops the test (the others then hang until the
// job's timeout, which prints where).

const seed = 0x9e3779b97f4a7c15

func ranksWorld(t *testing.T) *Comm {
	t.Helper()
	if !inRanks() {
		t.Skip("needs MPI ranks: TestUnderLauncher* starts this test on them")
	}
	c := World()
	if c.Size() < 2 {
		t.Fatalf("world has %d ranks, the rank tests need at least 2", c.Size())
	}
	return c
}

func rngFor(parts ...uint64) *rand.Rand {
	h := uint64(seed)
	for _, p := range parts {
		h = (h ^ p) * 0x100000001b3
	}
	return rand.New(rand.NewPCG(seed, h))
}

func randomBytes(n int, parts ...uint64) []byte {
	rng := rngFor(parts...)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("rank %d: %s: %v", World().Rank(), what, err)
	}
}

// getElem reads element i of b, size bytes little-endian.
func getElem(b []byte, i, size int) uint64 {
	var w [8]byte
	copy(w[:], b[size*i:size*(i+1)])
	return binary.LittleEndian.Uint64(w[:])
}

// setElem writes the low size bytes of v as element i of b, little-endian.
func setElem(b []byte, i, size int, v uint64) {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], v)
	copy(b[size*i:size*(i+1)], w[:])
}

// expectElems compares got with want element by element.
func expectElems(t *testing.T, what string, dt Datatype, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("rank %d: %s: %d bytes, want %d", World().Rank(), what, len(got), len(want))
		return
	}
	size, bad := dt.Size(), 0
	for i := range len(want) / size {
		if g, w := getElem(got, i, size), getElem(want, i, size); g != w {
			if bad < 5 {
				t.Errorf("rank %d: %s: %v element %d = %#x, want %#x", World().Rank(), what, dt, i, g, w)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("rank %d: %s: %d more elements wrong", World().Rank(), what, bad-5)
	}
}

func expectGuards(t *testing.T, what string, bufs ...buf) {
	t.Helper()
	for i, b := range bufs {
		if !b.guardIntact() {
			t.Errorf("rank %d: %s: buffer %d was written past its end", World().Rank(), what, i)
		}
	}
}

func expectPoisoned(t *testing.T, what string, b []byte) {
	t.Helper()
	if i := slices.IndexFunc(b, func(v byte) bool { return v != poisonByte }); i >= 0 {
		t.Errorf("rank %d: %s: byte %d was written (%#x) though MPI must not touch it", World().Rank(), what, i, b[i])
	}
}

func isArgErr(err error) bool { return errors.Is(err, errs.ErrInvalidArgument) }

// ---- reference reductions ----

type number interface {
	int8 | uint8 | int32 | uint32 | int64 | uint64 | float32 | float64
}

func numOp[T number](op Op, a, b T) T {
	switch op {
	case Sum:
		return a + b
	case Prod:
		return a * b
	case Min:
		return min(a, b)
	}
	return max(a, b)
}

func refCombine(dt Datatype, op Op, a, b uint64) uint64 {
	switch dt {
	case Int8:
		return uint64(uint8(numOp(op, int8(a), int8(b))))
	case Uint8:
		return uint64(numOp(op, uint8(a), uint8(b)))
	case Int32:
		return uint64(uint32(numOp(op, int32(a), int32(b))))
	case Uint32:
		return uint64(numOp(op, uint32(a), uint32(b)))
	case Int64:
		return uint64(numOp(op, int64(a), int64(b)))
	case Uint64:
		return numOp(op, a, b)
	case Float32:
		return uint64(math.Float32bits(numOp(op, math.Float32frombits(uint32(a)), math.Float32frombits(uint32(b)))))
	case Float64:
		return math.Float64bits(numOp(op, math.Float64frombits(a), math.Float64frombits(b)))
	case Float16:
		return uint64(f16.combine(op, uint16(a), uint16(b)))
	case BFloat16:
		return uint64(bf16.combine(op, uint16(a), uint16(b)))
	}
	panic("no reference for " + dt.String())
}

// fold reduces the ranks' inputs in rank order.
func fold(dt Datatype, op Op, inputs [][]byte) []byte {
	size := dt.Size()
	out := slices.Clone(inputs[0])
	for _, in := range inputs[1:] {
		for i := range len(out) / size {
			setElem(out, i, size, refCombine(dt, op, getElem(out, i, size), getElem(in, i, size)))
		}
	}
	return out
}

func reducible() []Datatype {
	return slices.DeleteFunc(Datatypes(), func(dt Datatype) bool { return !dt.Reducible() })
}

// reductionInput is rank r's count elements for (dt, op), chosen so that the
// exact result does not depend on the order in which MPI combines the ranks
// (exact sums and products, wrap-around only where C defines it, NaN,
// infinities, signed zeros, subnormals, overflow and underflow that every
// order reaches alike). salt tells apart the inputs of different calls.
func reductionInput(dt Datatype, op Op, r, count int, salt uint64) []byte {
	rng := rngFor(uint64(dt), uint64(op), uint64(r), salt)
	size := dt.Size()
	b := make([]byte, count*size)
	for i := range count {
		setElem(b, i, size, reductionValue(rng, dt, op, i))
	}
	return b
}

func reductionValue(rng *rand.Rand, dt Datatype, op Op, i int) uint64 {
	pick := func(vs ...float64) float64 { return vs[rng.IntN(len(vs))] }
	small := []float64{-4, -2, -1, -0.5, -0.25, 0.25, 0.5, 1, 2, 4}
	if op == Min || op == Max {
		switch dt {
		case Float32:
			return uint64(math.Float32bits(float32(rng.NormFloat64()*1000 + 0.5)))
		case Float64:
			return math.Float64bits(rng.NormFloat64()*1000 + 0.5)
		}
		return rng.Uint64() // every bit pattern, NaNs and all for the half types
	}
	sum := op == Sum
	switch dt {
	case Int8:
		if sum {
			return uint64(rng.IntN(61) - 30)
		}
		return uint64(rng.IntN(5) - 2)
	case Uint8:
		if sum {
			return uint64(rng.IntN(61))
		}
		return uint64(rng.IntN(4))
	case Int32:
		if sum {
			return uint64(rng.Int64N(1<<29) - 1<<28)
		}
		return uint64(rng.IntN(201) - 100)
	case Int64:
		if sum {
			return uint64(rng.Int64N(1<<61) - 1<<60)
		}
		return uint64(rng.IntN(60001) - 30000)
	case Uint32, Uint64:
		return rng.Uint64() // unsigned arithmetic wraps, in any order alike
	case Float32:
		if sum {
			return uint64(math.Float32bits(float32(rng.IntN(1<<17)-1<<16) / 16))
		}
		return uint64(math.Float32bits(float32(pick(small...))))
	case Float64:
		if sum {
			return math.Float64bits(float64(rng.Int64N(1<<40)-1<<39) / 16)
		}
		return math.Float64bits(pick(small...))
	case Float16, BFloat16:
		return uint64(halfValue(rng, dt, sum, i))
	}
	panic("no input for " + dt.String())
}

func halfValue(rng *rand.Rand, dt Datatype, sum bool, i int) uint16 {
	f := f16
	if dt == BFloat16 {
		f = bf16
	}
	sign := uint16(rng.IntN(2)) << 15
	inf, nan := math.Inf(1), math.NaN()
	pick := func(vs ...float64) uint16 { return f.fromFloat64(vs[rng.IntN(len(vs))]) }
	switch kind := i % 16; {
	case sum && kind == 0: // any two overflow, whatever the order
		if dt == Float16 {
			return f.fromFloat64(float64(32768 + 32*rng.IntN(1024)))
		}
		return 0x7f00 | uint16(rng.IntN(0x80))
	case sum && kind == 1:
		return pick(inf, -inf, nan, 1, -1)
	case sum && kind == 2:
		return sign // +0 or -0
	case sum && kind == 3: // subnormals whose sums stay exact
		if dt == Float16 {
			return sign | uint16(rng.IntN(64))
		}
		return sign | uint16(rng.IntN(32))
	case sum && dt == Float16:
		return f.fromFloat64(float64(rng.IntN(129)-64) / 8)
	case sum:
		return f.fromFloat64(float64(rng.IntN(65)-32) / 4)
	case kind == 0: // products: any two overflow
		if dt == Float16 {
			return f.fromFloat64(256)
		}
		return f.fromFloat64(math.Ldexp(1, 64))
	case kind == 1:
		return pick(inf, -inf, 0, math.Copysign(0, -1), nan, 2)
	case kind == 2: // any two underflow to zero
		if dt == Float16 {
			return f.fromFloat64(math.Ldexp(1, -13))
		}
		return f.fromFloat64(math.Ldexp(1, -70))
	}
	return pick(-2, -1, -0.5, 0.5, 1, 2)
}

// ---- the tests ----

func TestRankLibrary(t *testing.T) {
	c := ranksWorld(t)
	if !Built() || !Initialized() {
		t.Fatalf("Built %v Initialized %v", Built(), Initialized())
	}
	wantName := map[string]string{"openmpi": "Open MPI", "mpich": "MPICH"}[Family()]
	if v := Version(); wantName == "" || !strings.Contains(v, wantName) {
		t.Errorf("Family %q, Version %q", Family(), v)
	}
	wantLevel := ThreadMultiple
	if os.Getenv(ThreadLevelEnv) == "serialized" {
		wantLevel = ThreadSerialized
	}
	if ThreadLevel() > wantLevel || serialize.Load() != (ThreadLevel() < ThreadMultiple) {
		t.Errorf("ThreadLevel %v with %s=%q; serialised %v", ThreadLevel(), ThreadLevelEnv, os.Getenv(ThreadLevelEnv), serialize.Load())
	}
	known, aware := CUDAAwareQuery()
	if !known && aware {
		t.Error("CUDAAwareQuery: aware without knowing")
	}
	if c.Rank() == 0 {
		t.Logf("%s, thread level %v, CUDA-aware known %v aware %v, tag bound %d, replaced unsigned min/max ops %#x, Reduce on rotated copies %v",
			Family(), ThreadLevel(), known, aware, tagUB, replacedOps(), rotateReduceRoot)
	}
	if tagUB < 32767 {
		t.Errorf("MPI_TAG_UB = %d, MPI promises at least 32767", tagUB)
	}
	// The one table in gpucomm_mpi.c, checked against what MPI says of it.
	wantType := map[Datatype]string{Int8: "MPI_INT8_T", Uint8: "MPI_UINT8_T", Int32: "MPI_INT32_T",
		Uint32: "MPI_UINT32_T", Int64: "MPI_INT64_T", Uint64: "MPI_UINT64_T", Float16: "MPI_UINT16_T",
		BFloat16: "MPI_UINT16_T", Float32: "MPI_FLOAT", Float64: "MPI_DOUBLE", Byte: "MPI_BYTE"}
	for _, dt := range Datatypes() {
		name, size, err := mpiTypeInfo(dt)
		must(t, "mpiTypeInfo", err)
		if name != wantType[dt] || size != dt.Size() {
			t.Errorf("%v maps to %s of %d bytes, want %s of %d", dt, name, size, wantType[dt], dt.Size())
		}
	}
}

// ReduceLocal runs the same C ops as the collectives, in one process, where
// the order of operands is known: so every float16/bfloat16 pattern is
// checked against the Go reference, including roundings and ties.
func TestRankHalfOpsMatchReferenceExhaustively(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	const n = 1 << 16
	in, inout := a.alloc(t, 2*n), a.alloc(t, 2*n)
	rng := rngFor(77, uint64(c.Rank()))
	for _, dt := range []Datatype{Float16, BFloat16} {
		f := f16
		if dt == BFloat16 {
			f = bf16
		}
		for _, op := range Ops() {
			// three partners for every pattern h: random, a near neighbour
			// (close magnitudes, so sums round and tie), and a near negation
			// (cancellation)
			for round := range 3 {
				x, y := make([]uint16, n), make([]uint16, n)
				for h := range n {
					x[h] = uint16(h)
					switch round {
					case 0:
						y[h] = uint16(rng.Uint32())
					case 1:
						y[h] = uint16(h) ^ uint16(rng.IntN(8))
					default:
						y[h] = (uint16(h) ^ 0x8000) + uint16(rng.IntN(5)) - 2
					}
					setElem(in.bytes(), h, 2, uint64(x[h]))
					setElem(inout.bytes(), h, 2, uint64(y[h]))
				}
				must(t, "ReduceLocal", ReduceLocal(in.addr(), inout.addr(), n, dt, op))
				bad := 0
				for h := range n {
					want := f.combine(op, x[h], y[h])
					if got := uint16(getElem(inout.bytes(), h, 2)); got != want {
						if bad < 5 {
							t.Errorf("%v %v(%#04x, %#04x) = %#04x, want %#04x", dt, op, x[h], y[h], got, want)
						}
						bad++
					}
				}
				if bad > 5 {
					t.Errorf("%v %v round %d: %d more wrong", dt, op, round, bad-5)
				}
			}
		}
	}
	expectGuards(t, "ReduceLocal", in, inout)
}

func TestRankReductions(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	rank, size := c.Rank(), c.Size()
	const count, block = 257, 33
	for _, dt := range reducible() {
		for _, op := range Ops() {
			t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
				a.off = 0
				es := dt.Size()
				n := count * es
				inputs := make([][]byte, size)
				for r := range inputs {
					inputs[r] = reductionInput(dt, op, r, count, 1)
				}
				want := fold(dt, op, inputs)
				send, recv := a.alloc(t, n), a.alloc(t, n)
				copy(send.bytes(), inputs[rank])

				must(t, "Allreduce", c.Allreduce(send.addr(), recv.addr(), count, dt, op))
				expectElems(t, "Allreduce", dt, recv.bytes(), want)
				expectElems(t, "Allreduce send buffer", dt, send.bytes(), inputs[rank])

				recv.poison()
				copy(recv.bytes(), inputs[rank])
				must(t, "Allreduce in place", c.Allreduce(recv.addr(), recv.addr(), count, dt, op))
				expectElems(t, "Allreduce in place", dt, recv.bytes(), want)

				recv.poison()
				req, err := c.Iallreduce(send.addr(), recv.addr(), count, dt, op)
				must(t, "Iallreduce", err)
				must(t, "WaitTimeout(Iallreduce)", WaitTimeout([]*Request{req}, time.Minute))
				expectElems(t, "Iallreduce", dt, recv.bytes(), want)

				root := (int(dt) + int(op)) % size // every rank gets to be root
				recv.poison()
				must(t, "Reduce", c.Reduce(send.addr(), recv.addr(), count, dt, op, root))
				if rank == root {
					expectElems(t, "Reduce at root", dt, recv.bytes(), want)
				} else {
					expectPoisoned(t, "Reduce receive buffer off root", recv.bytes())
				}

				recv.poison()
				copy(recv.bytes(), inputs[rank])
				if rank == root {
					must(t, "Reduce in place", c.Reduce(recv.addr(), recv.addr(), count, dt, op, root))
					expectElems(t, "Reduce in place at root", dt, recv.bytes(), want)
				} else {
					must(t, "Reduce in place (off root)", c.Reduce(recv.addr(), 0, count, dt, op, root))
					expectElems(t, "Reduce send buffer off root", dt, recv.bytes(), inputs[rank])
				}
				expectGuards(t, "Allreduce/Reduce", send, recv)

				// ReduceScatterBlock: size blocks in, this rank's block out.
				rsIn := make([][]byte, size)
				for r := range rsIn {
					rsIn[r] = reductionInput(dt, op, r, size*block, 2)
				}
				rsWant := fold(dt, op, rsIn)[rank*block*es : (rank+1)*block*es]
				big, small := a.alloc(t, size*block*es), a.alloc(t, block*es)
				copy(big.bytes(), rsIn[rank])
				must(t, "ReduceScatterBlock", c.ReduceScatterBlock(big.addr(), small.addr(), block, dt, op))
				expectElems(t, "ReduceScatterBlock", dt, small.bytes(), rsWant)
				must(t, "ReduceScatterBlock in place", c.ReduceScatterBlock(big.addr(), big.addr(), block, dt, op))
				expectElems(t, "ReduceScatterBlock in place", dt, big.bytes()[:block*es], rsWant)
				expectGuards(t, "ReduceScatterBlock", big, small)
			})
		}
	}
}

// Large counts take other algorithms (pipelined, segmented); the user ops
// then see pieces of the buffer.
func TestRankReductionsLarge(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	const count = 1<<16 + 3
	for _, dt := range []Datatype{Float16, BFloat16, Float32, Int64} {
		a.off = 0
		inputs := make([][]byte, c.Size())
		for r := range inputs {
			inputs[r] = reductionInput(dt, Sum, r, count, 3)
		}
		want := fold(dt, Sum, inputs)
		b := a.alloc(t, count*dt.Size())
		copy(b.bytes(), inputs[c.Rank()])
		must(t, "Allreduce", c.Allreduce(b.addr(), b.addr(), count, dt, Sum))
		expectElems(t, "large Allreduce in place", dt, b.bytes(), want)
		expectGuards(t, "large Allreduce", b)
	}
}

// Two ranks combine each element with one operation, so any rounding is
// order-independent: random float16/bfloat16 patterns go through MPI here.
func TestRankHalfRoundingOnTwoRanks(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	color := -1 // ranks 2 and up take no part
	if c.Rank() < 2 {
		color = 0
	}
	pair, err := c.Split(color, c.Rank())
	must(t, "Split", err)
	if c.Rank() >= 2 {
		if pair != nil {
			t.Errorf("rank %d: Split with a negative color returned a communicator", c.Rank())
		}
		return
	}
	defer func() { must(t, "Free", pair.Free()) }()
	const count = 4099
	for _, dt := range []Datatype{Float16, BFloat16} {
		for _, op := range Ops() {
			inputs := make([][]byte, 2)
			for r := range inputs {
				inputs[r] = randomBytes(count*2, 5, uint64(dt), uint64(op), uint64(r))
			}
			want := fold(dt, op, inputs)
			b := a.alloc(t, count*2)
			copy(b.bytes(), inputs[pair.Rank()])
			must(t, "Allreduce", pair.Allreduce(b.addr(), b.addr(), count, dt, op))
			expectElems(t, fmt.Sprintf("two-rank %v %v", dt, op), dt, b.bytes(), want)
		}
	}
}

func TestRankDataMovement(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	rank, size := c.Rank(), c.Size()
	const count = 37
	for _, dt := range Datatypes() {
		t.Run(dt.String(), func(t *testing.T) {
			a.off = 0
			n := count * dt.Size()
			block := func(salt, r, j int) []byte { return randomBytes(n, 9, uint64(dt), uint64(salt), uint64(r), uint64(j)) }
			all := func(salt, r int) []byte { // size blocks: block(salt, r, j) for each j
				var b []byte
				for j := range size {
					b = append(b, block(salt, r, j)...)
				}
				return b
			}

			// Bcast from the last rank, Ibcast from rank 1.
			b := a.alloc(t, n)
			root := size - 1
			if rank == root {
				copy(b.bytes(), block(1, root, 0))
			}
			must(t, "Bcast", c.Bcast(b.addr(), count, dt, root))
			expectElems(t, "Bcast", dt, b.bytes(), block(1, root, 0))
			b.poison()
			if rank == 1 {
				copy(b.bytes(), block(2, 1, 0))
			}
			req, err := c.Ibcast(b.addr(), count, dt, 1)
			must(t, "Ibcast", err)
			must(t, "Ibcast Wait", req.Wait())
			expectElems(t, "Ibcast", dt, b.bytes(), block(2, 1, 0))

			// Allgather, out of place and in place.
			wantAll := make([]byte, 0, size*n)
			for r := range size {
				wantAll = append(wantAll, block(3, r, 0)...)
			}
			mine, gathered := a.alloc(t, n), a.alloc(t, size*n)
			copy(mine.bytes(), block(3, rank, 0))
			must(t, "Allgather", c.Allgather(mine.addr(), gathered.addr(), count, dt))
			expectElems(t, "Allgather", dt, gathered.bytes(), wantAll)
			gathered.poison()
			copy(gathered.bytes()[rank*n:], block(3, rank, 0))
			must(t, "Allgather in place", c.Allgather(gathered.addr()+uintptr(rank*n), gathered.addr(), count, dt))
			expectElems(t, "Allgather in place", dt, gathered.bytes(), wantAll)

			// Gather to rank min(2, size-1), out of place and in place.
			root = min(2, size-1)
			gathered.poison()
			must(t, "Gather", c.Gather(mine.addr(), gathered.addr(), count, dt, root))
			if rank == root {
				expectElems(t, "Gather", dt, gathered.bytes(), wantAll)
			} else {
				expectPoisoned(t, "Gather receive buffer off root", gathered.bytes())
			}
			gathered.poison()
			if rank == root {
				copy(gathered.bytes()[root*n:], block(3, root, 0))
				must(t, "Gather in place", c.Gather(gathered.addr()+uintptr(root*n), gathered.addr(), count, dt, root))
				expectElems(t, "Gather in place", dt, gathered.bytes(), wantAll)
			} else {
				must(t, "Gather in place (off root)", c.Gather(mine.addr(), 0, count, dt, root))
			}

			// Scatter from rank 1, out of place and in place.
			root = 1
			src, got := a.alloc(t, size*n), a.alloc(t, n)
			if rank == root {
				copy(src.bytes(), all(4, root))
			}
			must(t, "Scatter", c.Scatter(src.addr(), got.addr(), count, dt, root))
			expectElems(t, "Scatter", dt, got.bytes(), block(4, root, rank))
			got.poison()
			if rank == root {
				must(t, "Scatter in place", c.Scatter(src.addr(), src.addr()+uintptr(root*n), count, dt, root))
				expectElems(t, "Scatter in place: root's buffer", dt, src.bytes(), all(4, root))
				expectPoisoned(t, "Scatter in place: unused receive buffer", got.bytes())
			} else {
				must(t, "Scatter in place (off root)", c.Scatter(0, got.addr(), count, dt, root))
				expectElems(t, "Scatter in place", dt, got.bytes(), block(4, root, rank))
			}

			// Alltoall: block j of rank i's send lands in block i of rank j's recv.
			wantA2A := make([]byte, 0, size*n)
			for r := range size {
				wantA2A = append(wantA2A, block(5, r, rank)...)
			}
			s, r := a.alloc(t, size*n), a.alloc(t, size*n)
			copy(s.bytes(), all(5, rank))
			must(t, "Alltoall", c.Alltoall(s.addr(), r.addr(), count, dt))
			expectElems(t, "Alltoall", dt, r.bytes(), wantA2A)
			must(t, "Alltoall in place", c.Alltoall(s.addr(), s.addr(), count, dt))
			expectElems(t, "Alltoall in place", dt, s.bytes(), wantA2A)
			expectGuards(t, "data movement", b, mine, gathered, src, got, s, r)
		})
	}
}

func TestRankPointToPoint(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	rank, size := c.Rank(), c.Size()
	right, left := (rank+1)%size, (rank+size-1)%size
	const count = 1000
	dt := Int32
	n := count * dt.Size()
	msg := func(from, tag int) []byte { return randomBytes(n, 11, uint64(from), uint64(tag)) }

	// Ring with blocking calls: even ranks send first, odd ranks receive first.
	out, in := a.alloc(t, n), a.alloc(t, n)
	copy(out.bytes(), msg(rank, 3))
	var st Status
	var err error
	if rank%2 == 0 {
		must(t, "Send", c.Send(out.addr(), count, dt, right, 3))
		st, err = c.Recv(in.addr(), count, dt, left, 3)
	} else {
		st, err = c.Recv(in.addr(), count, dt, left, 3)
		must(t, "Send", c.Send(out.addr(), count, dt, right, 3))
	}
	must(t, "Recv", err)
	expectElems(t, "ring Recv", dt, in.bytes(), msg(left, 3))
	if st.Source != left || st.Tag != 3 || st.Count != count || st.Cancelled {
		t.Errorf("rank %d: ring Recv status %+v", rank, st)
	}

	// Sendrecv down a line that ends in ProcNull at both ends.
	in.poison()
	dest, src := right, left
	if rank == size-1 {
		dest = ProcNull
	}
	if rank == 0 {
		src = ProcNull
	}
	copy(out.bytes(), msg(rank, 4))
	st, err = c.Sendrecv(out.addr(), count, dest, 4, in.addr(), count, src, 4, dt)
	must(t, "Sendrecv", err)
	if rank == 0 {
		expectPoisoned(t, "Sendrecv from ProcNull", in.bytes())
		if st.Source != ProcNull || st.Count != 0 {
			t.Errorf("rank 0: Sendrecv from ProcNull status %+v", st)
		}
	} else {
		expectElems(t, "Sendrecv", dt, in.bytes(), msg(left, 4))
		if st.Source != left || st.Tag != 4 || st.Count != count {
			t.Errorf("rank %d: Sendrecv status %+v", rank, st)
		}
	}

	// Every pair at once with Isend/Irecv, completed by Waitall.
	outs, ins := make([]buf, size), make([]buf, size)
	var reqs []*Request
	for p := range size {
		outs[p], ins[p] = a.alloc(t, n), a.alloc(t, n)
		copy(outs[p].bytes(), msg(rank, 100+p))
		r, err := c.Irecv(ins[p].addr(), count, dt, p, 100+rank)
		must(t, "Irecv", err)
		s, err := c.Isend(outs[p].addr(), count, dt, p, 100+p)
		must(t, "Isend", err)
		reqs = append(reqs, r, s, nil) // nil entries are ignored
	}
	must(t, "Waitall", Waitall(reqs))
	for p := range size {
		expectElems(t, fmt.Sprintf("Irecv from %d", p), dt, ins[p].bytes(), msg(p, 100+rank))
		if st := reqs[3*p].Status(); st.Source != p || st.Tag != 100+rank || st.Count != count || !reqs[3*p].Done() {
			t.Errorf("rank %d: Irecv from %d: status %+v done %v", rank, p, st, reqs[3*p].Done())
		}
	}

	// The same with Testall and Test polling.
	in.poison()
	copy(out.bytes(), msg(rank, 5))
	r, err := c.Irecv(in.addr(), count, dt, left, 5)
	must(t, "Irecv", err)
	s, err := c.Isend(out.addr(), count, dt, right, 5)
	must(t, "Isend", err)
	deadline := time.Now().Add(time.Minute)
	for {
		done, err := Testall([]*Request{r, s})
		must(t, "Testall", err)
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank %d: Testall never completed", rank)
		}
		time.Sleep(50 * time.Microsecond)
	}
	if ok, err := r.Test(); !ok || err != nil {
		t.Errorf("rank %d: Test of a completed request: %v, %v", rank, ok, err)
	}
	expectElems(t, "Testall Irecv", dt, in.bytes(), msg(left, 5))

	// Iprobe: nothing with tag 6 has come before the left neighbour sends
	// it (after a barrier); then it is there, with its count, until
	// received, and the receive gets it.
	if found, _, err := c.Iprobe(left, 6, dt); err != nil || found {
		t.Errorf("rank %d: Iprobe before any message with tag 6 = %v, %v; want nothing", rank, found, err)
	}
	must(t, "Barrier", c.Barrier())
	copy(out.bytes(), msg(rank, 6))
	s, err = c.Isend(out.addr(), count, dt, right, 6)
	must(t, "Isend", err)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Microsecond) {
		found, st, err := c.Iprobe(left, 6, dt)
		must(t, "Iprobe", err)
		if found {
			if st.Source != left || st.Tag != 6 || st.Count != count {
				t.Errorf("rank %d: Iprobe status %+v, want source %d tag 6 count %d", rank, st, left, count)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank %d: Iprobe never found the message its left neighbour sent", rank)
		}
	}
	in.poison()
	_, err = c.Recv(in.addr(), count, dt, left, 6)
	must(t, "Recv after Iprobe", err)
	must(t, "Wait", s.Wait())
	expectElems(t, "Recv after Iprobe", dt, in.bytes(), msg(left, 6))
	if found, _, err := c.Iprobe(left, 6, dt); err != nil || found {
		t.Errorf("rank %d: Iprobe after the message was received = %v, %v; want nothing", rank, found, err)
	}
	if _, _, err := c.Iprobe(size, 6, dt); !isArgErr(err) {
		t.Errorf("rank %d: Iprobe of rank %d of %d = %v, want an argument error", rank, size, size, err)
	}

	// AnySource: rank 0 hears from everyone, in whatever order.
	if rank == 0 {
		var from []int
		for range size - 1 {
			st, err := c.Recv(in.addr(), 1, dt, AnySource, 9)
			must(t, "Recv(AnySource)", err)
			if got := int(getElem(in.bytes(), 0, 4)); got != st.Source {
				t.Errorf("rank 0: message %d came with source %d", got, st.Source)
			}
			from = append(from, st.Source)
		}
		slices.Sort(from)
		var want []int
		for r := 1; r < size; r++ {
			want = append(want, r)
		}
		if !slices.Equal(from, want) {
			t.Errorf("rank 0: AnySource messages from %v, want %v", from, want)
		}
	} else {
		setElem(out.bytes(), 0, 4, uint64(rank))
		must(t, "Send", c.Send(out.addr(), 1, dt, 0, 9))
	}
	expectGuards(t, "point to point", out, in)
	must(t, "Barrier", c.Barrier())
}

func TestRankCommunicators(t *testing.T) {
	c := ranksWorld(t)
	rank, size := c.Rank(), c.Size()

	d, err := c.Dup()
	must(t, "Dup", err)
	if d.Rank() != rank || d.Size() != size {
		t.Errorf("Dup: rank %d size %d, want %d %d", d.Rank(), d.Size(), rank, size)
	}
	sum := []int64{int64(rank)}
	must(t, "AllreduceInt64s on Dup", AllreduceInt64s(d, sum, Sum))
	if want := int64(size * (size - 1) / 2); sum[0] != want {
		t.Errorf("sum of ranks on Dup = %d, want %d", sum[0], want)
	}
	must(t, "Free", d.Free())
	if err := d.Barrier(); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("Barrier on a freed Comm: %v, want ErrClosed", err)
	}
	if err := d.Free(); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("second Free: %v, want ErrClosed", err)
	}
	if err := c.Free(); !isArgErr(err) {
		t.Errorf("World().Free(): %v, want ErrInvalidArgument", err)
	}

	// Split by parity, ordered by descending world rank.
	half, err := c.Split(rank%2, -rank)
	must(t, "Split", err)
	members, err := AllgatherValues(half, []int32{int32(rank)})
	must(t, "AllgatherValues", err)
	var want []int32
	for r := size - 1; r >= 0; r-- {
		if r%2 == rank%2 {
			want = append(want, int32(r))
		}
	}
	if !slices.Equal(members, want) || half.Size() != len(want) || members[half.Rank()] != int32(rank) {
		t.Errorf("rank %d: Split(parity, -rank) members %v (my rank %d), want %v", rank, members, half.Rank(), want)
	}
	must(t, "Free", half.Free())

	// The last rank opts out.
	color := 0
	if rank == size-1 {
		color = -1
	}
	rest, err := c.Split(color, 0)
	must(t, "Split with MPI_UNDEFINED", err)
	if rank == size-1 {
		if rest != nil || rest.Rank() != -1 || rest.Size() != 0 {
			t.Errorf("opted-out rank got %v", rest)
		}
		if err := rest.Barrier(); !isArgErr(err) {
			t.Errorf("Barrier on a nil Comm: %v, want ErrInvalidArgument", err)
		}
	} else {
		if rest.Size() != size-1 || rest.Rank() != rank {
			t.Errorf("Split without the last rank: rank %d size %d", rest.Rank(), rest.Size())
		}
		must(t, "Barrier", rest.Barrier())
		must(t, "Free", rest.Free())
	}

	// One node: the shared communicator is the world, and the launcher's
	// local rank agrees with MPI's.
	node, err := c.SplitShared()
	must(t, "SplitShared", err)
	if node.Size() != size || node.Rank() != rank {
		t.Errorf("SplitShared: rank %d size %d, want %d %d", node.Rank(), node.Size(), rank, size)
	}
	if lr, ok := LocalRankFromEnv(); ok && lr != node.Rank() {
		t.Errorf("LocalRankFromEnv = %d, SplitShared rank %d", lr, node.Rank())
	} else if !ok {
		t.Logf("rank %d: the launcher set no local-rank variable", rank)
	}
	must(t, "Free", node.Free())
}

func TestRankValues(t *testing.T) {
	c := ranksWorld(t)
	rank, size := c.Rank(), c.Size()
	ints := []int64{int64(rank), 1, int64(-rank)}
	must(t, "AllreduceInt64s", AllreduceInt64s(c, ints, Sum))
	tri := int64(size * (size - 1) / 2)
	if !slices.Equal(ints, []int64{tri, int64(size), -tri}) {
		t.Errorf("AllreduceInt64s = %v", ints)
	}
	fl := []float64{float64(rank) + 0.5}
	must(t, "AllreduceValues", AllreduceValues(c, fl, Max))
	if fl[0] != float64(size)-0.5 {
		t.Errorf("AllreduceValues max = %v", fl)
	}
	root := min(2, size-1)
	v := []int32{-1, -1}
	if rank == root {
		v = []int32{42, int32(root)}
	}
	must(t, "BcastValues", BcastValues(c, v, root))
	if !slices.Equal(v, []int32{42, int32(root)}) {
		t.Errorf("BcastValues = %v", v)
	}
	got, err := AllgatherValues(c, []uint8{uint8(rank), 7})
	must(t, "AllgatherValues", err)
	for r := range size {
		if got[2*r] != uint8(r) || got[2*r+1] != 7 {
			t.Errorf("AllgatherValues = %v", got)
			break
		}
	}
	var mine []byte
	if rank == size-1 {
		mine = []byte(fmt.Sprintf("hello from %d", rank))
	}
	b, err := BcastBytes(c, mine, size-1)
	must(t, "BcastBytes", err)
	if string(b) != fmt.Sprintf("hello from %d", size-1) {
		t.Errorf("BcastBytes = %q", b)
	}
	// Rank r gives r bytes of value r; rank 0 gives none.
	parts, err := AllgatherBytes(c, bytes.Repeat([]byte{byte(rank)}, rank))
	must(t, "AllgatherBytes", err)
	for r, p := range parts {
		if !bytes.Equal(p, bytes.Repeat([]byte{byte(r)}, r)) {
			t.Errorf("AllgatherBytes part %d = %v", r, p)
		}
	}
}

// Arguments Go can check fail on every rank alike, before MPI, without
// touching memory; MPI's own errors come back as *Error (MPI_ERRORS_RETURN)
// instead of aborting.
func TestRankErrors(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	rank, size := c.Rank(), c.Size()
	const count = 8
	x, y := a.alloc(t, 8*count), a.alloc(t, 8*count)
	bad := map[string]error{
		"Bcast root -1":              c.Bcast(x.addr(), count, Int32, -1),
		"Bcast root size":            c.Bcast(x.addr(), count, Int32, size),
		"Reduce root size":           c.Reduce(x.addr(), y.addr(), count, Int32, Sum, size),
		"Gather root size":           c.Gather(x.addr(), y.addr(), count, Int32, size),
		"Scatter root -2":            c.Scatter(x.addr(), y.addr(), count, Int32, -2),
		"Ibcast root size":           func() error { _, err := c.Ibcast(x.addr(), count, Int32, size); return err }(),
		"BcastValues root size":      BcastValues(c, []int64{1}, size),
		"Allreduce count -1":         c.Allreduce(x.addr(), y.addr(), -1, Int32, Sum),
		"Allreduce count 2^31":       c.Allreduce(x.addr(), y.addr(), math.MaxInt32+1, Int32, Sum),
		"Allreduce nil send":         c.Allreduce(0, y.addr(), count, Int32, Sum),
		"Allreduce nil recv":         c.Allreduce(x.addr(), 0, count, Int32, Sum),
		"Allreduce datatype 0":       c.Allreduce(x.addr(), y.addr(), count, 0, Sum),
		"Allreduce datatype 99":      c.Allreduce(x.addr(), y.addr(), count, 99, Sum),
		"Allreduce op 0":             c.Allreduce(x.addr(), y.addr(), count, Int32, 0),
		"Allreduce of Byte":          c.Allreduce(x.addr(), y.addr(), count, Byte, Sum),
		"Allreduce overlapping":      c.Allreduce(x.addr(), x.addr()+4, count, Int32, Sum),
		"Iallreduce overlapping":     func() error { _, err := c.Iallreduce(x.addr()+4, x.addr(), count, Int32, Sum); return err }(),
		"Allgather overlapping":      c.Allgather(y.addr()+uintptr(rank*4*count)+4, y.addr(), count, Int32),
		"ReduceScatterBlock overlap": c.ReduceScatterBlock(x.addr(), x.addr()+4, 1, Int32, Sum),
		"Alltoall overlapping":       c.Alltoall(x.addr(), x.addr()+4, 1, Int32),
		"Send to size":               c.Send(x.addr(), count, Int32, size, 0),
		"Send to AnySource":          c.Send(x.addr(), count, Int32, AnySource, 0),
		"Send tag -1":                c.Send(x.addr(), count, Int32, 0, -1),
		"Send tag above MPI_TAG_UB":  c.Send(x.addr(), count, Int32, 0, tagUB+1),
		"Recv from size+5":           func() error { _, err := c.Recv(x.addr(), count, Int32, size+5, 0); return err }(),
		"Isend nil buffer":           func() error { _, err := c.Isend(0, count, Int32, 0, 0); return err }(),
		"Irecv tag -5":               func() error { _, err := c.Irecv(x.addr(), count, Int32, 0, -5); return err }(),
		"Sendrecv overlapping": func() error {
			_, err := c.Sendrecv(x.addr(), count, ProcNull, 0, x.addr(), count, ProcNull, 0, Int32)
			return err
		}(),
		"ReduceLocal overlapping": ReduceLocal(x.addr(), x.addr()+2, count, Float16, Sum),
		"Split key beyond C int":  func() error { _, err := c.Split(0, math.MaxInt32+1); return err }(),
	}
	for name, err := range bad {
		if !isArgErr(err) {
			t.Errorf("rank %d: %s: got %v, want ErrInvalidArgument", rank, name, err)
		}
	}
	expectPoisoned(t, "buffers after rejected calls", x.all)
	expectPoisoned(t, "buffers after rejected calls", y.all)

	// A message longer than the receive buffer: MPI_ERR_TRUNCATE comes back.
	if rank == 1 {
		must(t, "Send", c.Send(x.addr(), count, Int32, 0, 21))
	}
	if rank == 0 {
		_, err := c.Recv(y.addr(), count/2, Int32, 1, 21)
		var e *Error
		if !errors.As(err, &e) || e.Call != "MPI_Recv" || e.Msg == "" || !isArgErr(err) || !Truncated(err) {
			t.Errorf("truncated Recv: got %v (%#v), want an *Error from MPI_Recv wrapping ErrInvalidArgument that Truncated reports", err, e)
		} else {
			t.Logf("truncated Recv: %v", err)
		}
	}
	// The same through requests: the failure names the request's peer
	// (*PeerError), for Wait and for WaitTimeout (Testall) of two.
	for i, wait := range []func(r, other *Request) error{
		func(r, other *Request) error { return errors.Join(r.Wait(), other.Wait()) },
		func(r, other *Request) error { return WaitTimeout([]*Request{r, other}, time.Minute) },
	} {
		tag := 30 + 2*i
		if rank == 1 {
			must(t, "Send", c.Send(x.addr(), count, Int32, 0, tag))
			must(t, "Send", c.Send(x.addr(), count, Int32, 0, tag+1))
		}
		if rank == 0 {
			r, err := c.Irecv(y.addr(), count/2, Int32, 1, tag)
			must(t, "Irecv", err)
			other, err := c.Irecv(y.addr()+uintptr(2*count), count/2, Int32, 1, tag+1)
			must(t, "Irecv", err)
			err = wait(r, other)
			var pe *PeerError
			var e *Error
			if !errors.As(err, &pe) || pe.Peer != 1 || pe.Send || !errors.As(err, &e) || !isArgErr(err) || !Truncated(err) ||
				!strings.HasPrefix(err.Error(), "receive from rank 1: mpi: MPI_") {
				t.Errorf("wait %d on truncated Irecvs from rank 1: got %v (%#v), want a *PeerError naming rank 1 around MPI's *Error", i, err, pe)
			}
		}
	}
	must(t, "Barrier", c.Barrier())
}

// A receive whose sender has not sent times out, then completes once it
// does; one nobody will ever match is cancelled; an Ibarrier that one rank
// has not joined times out.
func TestRankWaitTimeout(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	rank := c.Rank()
	b := a.alloc(t, 8)
	const short = 100 * time.Millisecond

	if rank == 0 {
		r, err := c.Irecv(b.addr(), 1, Int64, 1, 77)
		must(t, "Irecv", err)
		start := time.Now()
		err = WaitTimeout([]*Request{r}, short)
		took := time.Since(start)
		if !errors.Is(err, errs.ErrTimeout) || took < short || took > short+5*time.Second {
			t.Errorf("WaitTimeout with a silent sender: %v after %v, want ErrTimeout after about %v", err, took, short)
		}
		must(t, "Barrier", c.Barrier()) // now rank 1 sends
		must(t, "WaitTimeout", WaitTimeout([]*Request{r}, time.Minute))
		if got := getElem(b.bytes(), 0, 8); got != 0x1234 || r.Status().Source != 1 || r.Status().Tag != 77 {
			t.Errorf("late message %#x, status %+v", got, r.Status())
		}

		r, err = c.Irecv(b.addr(), 1, Int64, AnySource, 78) // nobody sends tag 78
		must(t, "Irecv", err)
		if err := WaitTimeout([]*Request{r}, 20*time.Millisecond); !errors.Is(err, errs.ErrTimeout) {
			t.Errorf("WaitTimeout on an unmatched receive: %v, want ErrTimeout", err)
		}
		must(t, "Cancel", r.Cancel())
		must(t, "Wait after Cancel", r.Wait())
		if !r.Status().Cancelled {
			t.Errorf("cancelled receive: status %+v", r.Status())
		}
	} else {
		must(t, "Barrier", c.Barrier())
		if rank == 1 {
			setElem(b.bytes(), 0, 8, 0x1234)
			must(t, "Send", c.Send(b.addr(), 1, Int64, 0, 77))
		}
	}

	// Rank 1 joins the Ibarrier only after rank 0 has seen it time out.
	if rank == 1 {
		_, err := c.Recv(b.addr(), 1, Int64, 0, 79)
		must(t, "Recv", err)
	}
	r, err := c.Ibarrier()
	must(t, "Ibarrier", err)
	if rank == 0 {
		if err := WaitTimeout([]*Request{r}, short); !errors.Is(err, errs.ErrTimeout) {
			t.Errorf("Ibarrier without rank 1: %v, want ErrTimeout", err)
		}
		must(t, "Send", c.Send(b.addr(), 1, Int64, 1, 79))
	}
	must(t, "WaitTimeout(Ibarrier)", WaitTimeout([]*Request{r}, time.Minute))
	if err := WaitTimeout(nil, time.Millisecond); err != nil {
		t.Errorf("WaitTimeout of nothing: %v", err)
	}
}

// Goroutines drive their own communicators at once. Thread-multiple MPI
// takes blocking calls; serialised MPI needs nonblocking ones and
// WaitTimeout, which frees the lock between polls.
func TestRankConcurrentComms(t *testing.T) {
	c := ranksWorld(t)
	a := newArena(t)
	rank, size := c.Rank(), c.Size()
	const goroutines, rounds, count = 3, 4, 64
	comms := make([]*Comm, goroutines)
	bufs := make([]buf, goroutines)
	for g := range comms {
		d, err := c.Dup()
		must(t, "Dup", err)
		comms[g], bufs[g] = d, a.alloc(t, 8*count)
	}
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			d, b := comms[g], bufs[g]
			for i := range rounds {
				for k := range count {
					setElem(b.bytes(), k, 8, uint64(rank*1000+g*100+i+k))
				}
				var err error
				if serialize.Load() {
					var r *Request
					if r, err = d.Iallreduce(b.addr(), b.addr(), count, Int64, Sum); err == nil {
						err = WaitTimeout([]*Request{r}, time.Minute)
					}
				} else {
					err = d.Allreduce(b.addr(), b.addr(), count, Int64, Sum)
				}
				if err != nil {
					errc <- err
					return
				}
				for k := range count {
					want := int64(1000*size*(size-1)/2 + size*(g*100+i+k))
					if got := int64(getElem(b.bytes(), k, 8)); got != want {
						errc <- fmt.Errorf("goroutine %d round %d element %d = %d, want %d", g, i, k, got, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("rank %d: %v", rank, err)
	}
	for _, d := range comms {
		must(t, "Free", d.Free())
	}
}

// MPI libraries install signal handlers; Go's must still turn a nil
// dereference into a panic that recover sees.
func TestRankGoPanicsStillRecoverAfterInit(t *testing.T) {
	ranksWorld(t)
	var p *[4]int
	recovered := func() (r any) {
		defer func() { r = recover() }()
		return p[2]
	}()
	if recovered == nil {
		t.Error("a nil dereference did not panic")
	}
}

// SIGUSR1 is a launcher's notice: Hydra (-disable-auto-cleanup) sends it to
// every rank when one dies, and MPICH's MPI_Init installs a handler for it
// that passes it on to Go's. Wherever it lands, on a thread running Go code
// or on one of MPI's own threads (UCX's async thread, Open MPI's progress
// threads), the rank must live on. A survivor of the node-kill drill died of
// it (TestMultinodeWholeNodeKilledIsNamedBySurvivors, MPICH: "fatal error:
// non-Go code set up signal handler without SA_ONSTACK flag"), and a notice
// on UCX's thread ended a rank with signal 10.
func TestRankSIGUSR1LeavesTheRankRunning(t *testing.T) {
	c := ranksWorld(t)
	// On this thread, while it runs Go code: the handler runs at once,
	// as the signal system call returns.
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		pid, tid := os.Getpid(), syscall.Gettid()
		sum := 0
		for i := range 50 {
			if err := syscall.Tgkill(pid, tid, syscall.SIGUSR1); err != nil {
				t.Fatalf("tgkill: %v", err)
			}
			for j := range 10000 {
				sum += i ^ j
			}
		}
		_ = sum
	}()
	// On every thread of the process, MPI's own among them.
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if tid, err := strconv.Atoi(task.Name()); err == nil {
			syscall.Tgkill(os.Getpid(), tid, syscall.SIGUSR1) // ESRCH: the thread ended meanwhile
		}
	}
	time.Sleep(200 * time.Millisecond) // a fatal notice has ended the process by now
	must(t, "Barrier", c.Barrier())
	// MPICH's MPI_Init installs its SIGUSR1 handler without SA_ONSTACK:
	// gc_init must have given it one (Open MPI's 4.1 installs none such).
	if Family() == "mpich" && onstackFixed() == 0 {
		t.Errorf("rank %d: no signal handler of MPICH's was given SA_ONSTACK after MPI_Init", c.Rank())
	}
	t.Logf("rank %d: %d threads signalled; signal handlers given SA_ONSTACK after MPI_Init: %d", c.Rank(), len(tasks), onstackFixed())
}

func TestRankAbortEndsTheJob(t *testing.T) {
	c := ranksWorld(t)
	if os.Getenv(abortEnv) == "" {
		t.Skip("ends the job: only TestUnderLauncherAbortEndsTheJob runs it")
	}
	if c.Rank() == 1 {
		c.Abort(7)
	}
	_ = c.Barrier() // the other ranks wait here until the launcher kills them
	t.Error("the job outlived Abort")
}
