//go:build cgo && (mpi || mpich)

package cbaseline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// childEnv marks the processes that mpirun starts: they run the MPI tests
// between gpucomm's own MPI Init and Finalize (internal/mpi: its thread
// level, its launcher checks), as a program that opens an MPI backend does;
// the parent only launches them.
const childEnv = "GPUCOMM_CBASELINE_MPI_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "1" {
		os.Exit(m.Run())
	}
	if err := mpi.Init(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := mpi.Finalize(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func inChild(t *testing.T) {
	t.Helper()
	if os.Getenv(childEnv) != "1" {
		t.Skip("runs under mpirun, started by TestMPILoopsUnderMpirun")
	}
}

func TestMPIBeforeInitIsAnError(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		t.Skip("MPI is initialised in this process")
	}
	buf, err := devmem.NewHostDevice().Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	a := Args{Send: buf.Addr(), Recv: buf.Addr(), Count: 1, DType: comm.Float32, Op: comm.Sum}
	if err := MPI(AllReduce, a, make([]float64, 1)); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("got %v, want ErrNotInitialized", err)
	}
}

// TestMPILoopsUnderMpirun starts this test binary on 2 ranks, whose
// TestMPIChild tests check the loops' results and times.
func TestMPILoopsUnderMpirun(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		t.Skip("already under mpirun")
	}
	launcher, args := mpiLauncher()
	path, err := exec.LookPath(launcher)
	if err != nil {
		t.Skipf("%s not installed: %v", launcher, err)
	}
	// A guard against a hung MPI job, not a timing assertion.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append(args, "-np", "2", os.Args[0], "-test.run", "^TestMPIChild", "-test.v", "-test.count=1")
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", launcher, strings.Join(args, " "), err, out)
	}
	for _, name := range []string{"TestMPIChildLoopsGiveCorrectResults", "TestMPIChildUnsupportedTypeIsAnError",
		"TestMPIChildLoopRunsAsGpucommsOwnMPICalls"} {
		if n := strings.Count(string(out), "--- PASS: "+name); n != 2 {
			t.Errorf("%s passed on %d ranks, want 2:\n%s", name, n, out)
		}
	}
	if strings.Contains(string(out), "--- FAIL") || strings.Contains(string(out), "--- SKIP: TestMPIChild") {
		t.Errorf("a rank failed or skipped:\n%s", out)
	}
}

// i32 views a host-device buffer as int32s.
func i32(t *testing.T, b devmem.Buffer) []int32 {
	v, ok := b.Bytes()
	if !ok {
		t.Fatal("host device buffer without a host view")
	}
	return devmem.FromBytes[int32](v)
}

func TestMPIChildLoopsGiveCorrectResults(t *testing.T) {
	inChild(t)
	rank, size := mpi.World().Rank(), mpi.World().Size()
	if size != 2 {
		t.Fatalf("%d ranks, want 2", size)
	}
	const c = 1000
	dev := devmem.NewHostDevice()
	send, err := dev.Alloc(4 * c * size)
	if err != nil {
		t.Fatal(err)
	}
	defer send.Free()
	recv, err := dev.Alloc(4 * c * size)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Free()
	in := func(r, i int) int32 { return int32(r*100000 + i) }
	sum := func(i int) int32 { return in(0, i) + in(1, i) }
	cases := []struct {
		coll Coll
		root int
		// want is element i of this rank's receive buffer; ok false where
		// the rank's buffer holds nothing to check.
		want func(i int) (int32, bool)
		n    int // elements to check
	}{
		{AllReduce, 0, func(i int) (int32, bool) { return sum(i), true }, c},
		{AllGather, 0, func(i int) (int32, bool) { return in(i/c, i%c), true }, size * c},
		{ReduceScatter, 0, func(i int) (int32, bool) { return sum(rank*c + i), true }, c},
		{Broadcast, 1, func(i int) (int32, bool) { return in(1, i), rank != 1 }, c},
		{Reduce, 0, func(i int) (int32, bool) { return sum(i), rank == 0 }, c},
		{AllToAll, 0, func(i int) (int32, bool) { return in(i/c, rank*c+i%c), true }, size * c},
		{PingPong, 0, func(i int) (int32, bool) { return in(0, i), true }, c},
		{Bandwidth, 0, func(i int) (int32, bool) { return in(0, i), rank == 1 }, c},
	}
	for _, tc := range cases {
		s, r := i32(t, send), i32(t, recv)
		for i := range s {
			s[i] = in(rank, i)
		}
		for i := range r {
			r[i] = -1
		}
		a := Args{Send: send.Addr(), Recv: recv.Addr(), Count: c, DType: comm.Int32, Op: comm.Sum, Root: tc.root,
			Peer: 1 - rank, Initiator: rank == 0, Window: 8, Warmup: 2}
		times := make([]float64, 5)
		if err := MPI(tc.coll, a, times); err != nil {
			t.Fatalf("%v: %v", tc.coll, err)
		}
		wrong := 0
		for i := 0; i < tc.n; i++ {
			if w, ok := tc.want(i); ok && r[i] != w {
				if wrong == 0 {
					t.Errorf("rank %d %v: element %d is %d, want %d", rank, tc.coll, i, r[i], w)
				}
				wrong++
			}
		}
		if wrong > 0 {
			t.Errorf("rank %d %v: %d wrong elements", rank, tc.coll, wrong)
		}
		timed := tc.coll != PingPong && tc.coll != Bandwidth || rank == 0
		for i, v := range times {
			if timed && !(v > 0) || !timed && v != 0 {
				t.Errorf("rank %d %v: time %d is %g s", rank, tc.coll, i, v)
			}
		}
	}
}

func TestMPIChildUnsupportedTypeIsAnError(t *testing.T) {
	inChild(t)
	dev := devmem.NewHostDevice()
	buf, err := dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	a := Args{Send: buf.Addr(), Recv: buf.Addr(), Count: 4, DType: comm.Float16, Op: comm.Sum}
	if err := MPI(AllReduce, a, make([]float64, 1)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("float16 allreduce: got %v, want ErrUnsupported", err)
	}
	// Moving float16 needs no arithmetic, so it works.
	v, _ := buf.Bytes()
	binary.NativeEndian.PutUint16(v, 0x3c00)
	if err := MPI(Broadcast, a, make([]float64, 1)); err != nil {
		t.Errorf("float16 broadcast: %v", err)
	}
}

// countingSetup is a thread setup (mpi.SetThreadSetup) that counts its
// calls; a CUDA-aware backend's makes the GPU's context current instead.
type countingSetup struct{ enter, leave atomic.Int32 }

func (s *countingSetup) Enter() { s.enter.Add(1) }
func (s *countingSetup) Leave() { s.leave.Add(1) }

// TestMPIChildLoopRunsAsGpucommsOwnMPICalls checks that a C loop runs as
// internal/mpi runs its own calls: inside the thread setup, once per loop,
// so that MPI on device buffers has the GPU's context as the backend's
// calls have it.
func TestMPIChildLoopRunsAsGpucommsOwnMPICalls(t *testing.T) {
	inChild(t)
	s := &countingSetup{}
	if !mpi.SetThreadSetup(s) {
		t.Fatal("a thread setup was installed already")
	}
	buf, err := devmem.NewHostDevice().Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	a := Args{Send: buf.Addr(), Recv: buf.Addr() + 32, Count: 4, DType: comm.Int32, Op: comm.Sum, Warmup: 1}
	for _, c := range []Coll{AllReduce, Broadcast} {
		before, beforeLeave := s.enter.Load(), s.leave.Load()
		if err := MPI(c, a, make([]float64, 3)); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if e, l := s.enter.Load()-before, s.leave.Load()-beforeLeave; e != 1 || l != 1 {
			t.Errorf("%v: the thread setup was entered %d and left %d times around the loop, want 1 and 1", c, e, l)
		}
	}
}
