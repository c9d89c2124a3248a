package nccl_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/nccl"
)

// TestGPUSingleRankCommunicator runs NCCL with one rank on device 0: enough
// to check every call's arguments against the real library.
func TestGPUSingleRankCommunicator(t *testing.T) {
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		t.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU and NCCL")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	major, minor, patch, err := nccl.Version()
	must(err)
	t.Logf("NCCL %d.%d.%d", major, minor, patch)
	ctx, err := cuda.PrimaryCtxRetain(0)
	must(err)
	defer cuda.PrimaryCtxRelease(0)
	must(cuda.WithContext(ctx, func() error {
		id, err := nccl.GetUniqueID()
		must(err)
		c, err := nccl.CommInitRank(1, id, 0)
		must(err)
		for name, f := range map[string]func(nccl.Comm) (int, error){"count": nccl.CommCount, "device": nccl.CommCuDevice, "rank": nccl.CommUserRank} {
			v, err := f(c)
			must(err)
			if want := map[string]int{"count": 1, "device": 0, "rank": 0}[name]; v != want {
				t.Errorf("%s = %d, want %d", name, v, want)
			}
		}
		const n = 4096
		send, err := cuda.MemAlloc(8 * n)
		must(err)
		defer cuda.MemFree(send)
		recv, err := cuda.MemAlloc(8 * n)
		must(err)
		defer cuda.MemFree(recv)
		vals := make([]float64, n)
		for i := range vals {
			vals[i] = float64(i) + 0.5
		}
		src := unsafe.Slice((*byte)(unsafe.Pointer(&vals[0])), 8*n)
		must(cuda.MemcpyHtoDBytes(send, src))
		s, err := cuda.StreamCreate(cuda.StreamNonBlocking)
		must(err)
		defer cuda.StreamDestroy(s)
		check := func(what string) {
			t.Helper()
			must(cuda.StreamSynchronize(s))
			got := make([]byte, 8*n)
			must(cuda.MemcpyDtoHBytes(got, recv))
			if string(got) != string(src) {
				t.Errorf("%s: wrong data", what)
			}
			must(cuda.MemsetD8(recv, 0, 8*n))
		}
		// ctx 0: the context is current (WithContext); ctx itself: the
		// same, with the check inside the call.
		must(nccl.AllReduce(0, send, recv, n, nccl.Float64, nccl.Sum, c, s))
		check("AllReduce")
		must(nccl.Reduce(ctx, send, recv, n, nccl.Float64, nccl.Max, 0, c, s))
		check("Reduce")
		must(nccl.Broadcast(0, send, recv, n, nccl.Float64, 0, c, s))
		check("Broadcast")
		must(nccl.AllGather(ctx, send, recv, n, nccl.Float64, c, s))
		check("AllGather")
		must(nccl.ReduceScatter(0, send, recv, n, nccl.Float64, nccl.Avg, c, s))
		check("ReduceScatter")
		// From a thread with no context current, the call makes ctx current
		// for itself and leaves the thread as it found it.
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			errc <- func() error {
				if err := cuda.CtxSetCurrent(0); err != nil {
					return err
				}
				if err := nccl.AllReduce(ctx, send, recv, n, nccl.Float64, nccl.Sum, c, s); err != nil {
					return err
				}
				// The call leaves ctx current where none was (gn_leave), so
				// that the thread's next call sets nothing.
				if now, err := cuda.CtxGetCurrent(); err != nil || now != ctx {
					return fmt.Errorf("after AllReduce(ctx, ...) on a thread with no context, current = %#x, %v; want ctx %#x left current", now, err, ctx)
				}
				return nil
			}()
		}()
		must(<-errc)
		check("AllReduce from a thread with no context")
		must(nccl.GroupStart())
		must(nccl.Send(send, 2*n, nccl.Float32, 0, c, s))
		must(nccl.Recv(recv, 2*n, nccl.Float32, 0, c, s))
		must(nccl.GroupEnd())
		check("Send/Recv to self")

		err = nccl.AllReduce(ctx, send, recv, n, nccl.DataType(77), nccl.Sum, c, s)
		t.Logf("bad datatype: %v", err)
		if !nccl.IsCode(err, nccl.InvalidArgument) {
			t.Errorf("AllReduce with datatype 77 = %v, want ncclInvalidArgument", err)
		}

		sub, err := nccl.CommSplit(c, 0, 0)
		if err != nil {
			t.Logf("CommSplit: %v", err)
		} else {
			must(nccl.CommDestroy(sub))
		}
		if err := nccl.CommFinalize(c); err != nil {
			t.Logf("CommFinalize: %v", err)
		}
		must(nccl.CommDestroy(c))

		// A non-blocking communicator: calls return at once, the state is polled.
		id, err = nccl.GetUniqueID()
		must(err)
		nb, err := nccl.CommInitRankConfig(1, id, 0, nccl.Config{NonBlocking: true})
		must(err)
		deadline := time.Now().Add(time.Minute)
		for {
			r, err := nccl.CommGetAsyncError(nb)
			must(err)
			if r != nccl.InProgress {
				if r != nccl.Success {
					t.Fatalf("non-blocking init ended in %v", r)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("non-blocking init still in progress after a minute")
			}
			time.Sleep(time.Millisecond)
		}
		must(nccl.CommAbort(nb))
		return nil
	}))
}
