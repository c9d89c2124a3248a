//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"
)

// setupEnv makes TestRankThreadSetupBracketsEveryCall run: it installs a
// thread setup for the rest of its process.
const setupEnv = "GPUCOMM_MPI_TEST_THREAD_SETUP"

// countingSetup counts Enter and Leave, and whether each Leave came on a
// goroutine that Enter had locked to its thread.
type countingSetup struct {
	enters, leaves, depth atomic.Int64
}

func (s *countingSetup) Enter() {
	runtime.LockOSThread()
	s.enters.Add(1)
	s.depth.Add(1)
}

func (s *countingSetup) Leave() {
	s.depth.Add(-1)
	s.leaves.Add(1)
	runtime.UnlockOSThread()
}

func TestUnderLauncherThreadSetupBracketsEveryCall(t *testing.T) {
	const np = 2
	out, err := runRanks(t, np, "^TestRankThreadSetupBracketsEveryCall$", setupEnv+"=1")
	expectRanksPass(t, np, out, err)
}

// Every MPI call of the package runs between the setup's Enter and Leave
// (what makes a GPU's context current for a CUDA-aware MPI), the first
// setup stays, and entering and leaving allocates nothing.
func TestRankThreadSetupBracketsEveryCall(t *testing.T) {
	c := ranksWorld(t)
	if os.Getenv(setupEnv) == "" {
		t.Skip("installs a thread setup for the rest of its process: run by TestUnderLauncherThreadSetupBracketsEveryCall")
	}
	s := &countingSetup{}
	if !SetThreadSetup(s) || !HasThreadSetup() {
		t.Fatal("SetThreadSetup did not install the first setup")
	}
	if SetThreadSetup(&countingSetup{}) {
		t.Error("a second SetThreadSetup replaced the first")
	}
	peer := 1 - c.Rank()
	var sendBuf, recvBuf [4]int64
	sendBuf[0] = int64(100 + c.Rank())
	recvBuf[0] = -1
	calls := []struct {
		name string
		f    func() error
	}{
		{"Barrier", c.Barrier},
		{"AllreduceInt64s", func() error { return AllreduceInt64s(c, []int64{int64(c.Rank())}, Sum) }},
		{"Isend, Irecv, Waitall", func() error {
			r1, err1 := c.Irecv(uintptr(unsafe.Pointer(&recvBuf[0])), 4, Int64, peer, 5)
			r2, err2 := c.Isend(uintptr(unsafe.Pointer(&sendBuf[0])), 4, Int64, peer, 5)
			if err := errors.Join(err1, err2); err != nil {
				return err
			}
			return Waitall([]*Request{r1, r2})
		}},
		{"CUDAAwareQuery", func() error { CUDAAwareQuery(); return nil }},
		{"Dup, Free", func() error {
			d, err := c.Dup()
			if err != nil {
				return err
			}
			return d.Free()
		}},
	}
	for _, call := range calls {
		before := s.enters.Load()
		if err := call.f(); err != nil {
			t.Fatalf("%s: %v", call.name, err)
		}
		if s.enters.Load() == before {
			t.Errorf("%s made no call through the thread setup", call.name)
		}
		if e, l, d := s.enters.Load(), s.leaves.Load(), s.depth.Load(); e != l || d != 0 {
			t.Errorf("after %s: %d Enter, %d Leave, depth %d; want every Enter left", call.name, e, l, d)
		}
	}
	runtime.UnlockOSThread() // a no-op unless a Leave were missing, which the counts catch
	if recvBuf[0] != int64(100+peer) {
		t.Errorf("received %d from rank %d, want %d", recvBuf[0], peer, 100+peer)
	}
	if n := testing.AllocsPerRun(1000, func() { leave(enter()) }); n != 0 {
		t.Errorf("entering and leaving with a setup allocates %v times a call, want 0", n)
	}
}

// The cost a call pays for the thread setup: with none installed (the host
// device) an atomic load; with one, the setup's own work.
func BenchmarkEnterLeave(b *testing.B) {
	if HasThreadSetup() {
		b.Skip("a setup is installed in this process")
	}
	b.Run("none", func(b *testing.B) {
		for b.Loop() {
			leave(enter())
		}
	})
	b.Run("lockOSThread", func(b *testing.B) {
		box := &setupBox{&countingSetup{}}
		for b.Loop() {
			box.s.Enter()
			box.s.Leave()
		}
	})
}
