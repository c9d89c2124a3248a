package nccl

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/conformance"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// Rank tests on real GPUs and NCCL. They skip, saying why, wherever Probe
// does not find MPI, NCCL and a GPU. One node is assumed: world rank r is
// local rank r, on GPU r mod the GPU count.

// gpuRank skips t unless this rank can run NCCL, and returns the node's GPU
// count and local rank count.
func gpuRank(t *testing.T) (gpus, localSize int) {
	t.Helper()
	rankOnly(t)
	// More ranks than GPUs is what TestRankGPUDuplicate wants; any other
	// reason Probe gives (no GPU, no libnccl) skips.
	if v := Probe(); !v.Usable && !strings.Contains(v.Reason, "NCCL needs one GPU a rank") {
		t.Skip("NCCL cannot run here: " + v.Reason)
	}
	gpus, err := devmem.CUDADeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := mpi.World().SplitShared()
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Free()
	return gpus, sh.Size()
}

// onePerGPU skips t unless every rank of the node has a GPU of its own.
func onePerGPU(t *testing.T) {
	t.Helper()
	if gpus, ls := gpuRank(t); ls > gpus {
		t.Skipf("%d ranks on %d GPU(s): NCCL needs one GPU per rank (TestRankGPUDuplicate checks the refusal)", ls, gpus)
	}
}

// ncclGroup opens this rank through comm.Open, as programs and the CLI do.
func ncclGroup(opts ...comm.Option) conformance.NewGroup {
	return func() ([]comm.Communicator, error) {
		c, err := comm.Open(Name, append([]comm.Option{comm.WithDevice("cuda")}, opts...)...)
		if err != nil {
			return nil, err
		}
		if c.Backend() != Name {
			c.Close()
			return nil, fmt.Errorf("comm.Open(%q) gave the %s backend (GPUCOMM_BACKEND?)", Name, c.Backend())
		}
		return []comm.Communicator{c}, nil
	}
}

func TestRankGPUConformance(t *testing.T) {
	onePerGPU(t)
	conformance.RunConfig(t, ncclGroup(), conformance.Config{Short: testing.Short()})
	// With a timeout, every operation is also watched between two events.
	t.Run("with a timeout", func(t *testing.T) {
		conformance.RunConfig(t, ncclGroup(comm.WithTimeout(time.Minute)), conformance.Config{Short: true})
	})
}

func TestRankGPUSplitWithoutCommSplit(t *testing.T) {
	onePerGPU(t)
	useCommSplit = false
	defer func() { useCommSplit = true }()
	conformance.RunConfig(t, ncclGroup(), conformance.Config{Run: "^Split$"})
}

// countingLib is NCCL that counts the calls made before a communicator
// exists, to show that a refusal came before any.
type countingLib struct {
	library
	calls atomic.Int64
}

func (l *countingLib) uniqueID() ([128]byte, error) {
	l.calls.Add(1)
	return l.library.uniqueID()
}

func (l *countingLib) initRank(d *devmem.Device, nranks, rank int, id [128]byte) (engine, error) {
	l.calls.Add(1)
	return l.library.initRank(d, nranks, rank, id)
}

func TestRankGPUDuplicate(t *testing.T) {
	gpus, ls := gpuRank(t)
	if ls <= gpus {
		t.Skipf("%d ranks on %d GPU(s): none shares a GPU (run more ranks than GPUs)", ls, gpus)
	}
	lib := &countingLib{library: realLibrary()}
	c, err := open(comm.Options{Device: "cuda"}, openWorld, lib)
	if c != nil {
		c.Close()
		t.Fatal("opened an NCCL communicator with two ranks on one GPU")
	}
	var ce *comm.Error
	if !errors.Is(err, comm.ErrDuplicateGPU) || !errors.As(err, &ce) || ce.Rank != mpi.World().Rank() {
		t.Fatalf("%v; want this rank's *comm.Error wrapping ErrDuplicateGPU", err)
	}
	for g := range gpus {
		var ranks []int
		for r := g; r < ls; r += gpus {
			ranks = append(ranks, r)
		}
		if len(ranks) > 1 && !strings.Contains(err.Error(), rankList(ranks)+" share GPU-") {
			t.Errorf("%v; want %s named with their GPU", err, rankList(ranks))
		}
	}
	if n := lib.calls.Load(); n != 0 {
		t.Errorf("%d NCCL calls (ncclGetUniqueId, ncclCommInitRank) before the refusal; want none", n)
	}
	t.Logf("rank %d: %v", mpi.World().Rank(), err)
}

// spinPTX is a kernel that spins until the word at flag (page-locked host
// memory, which the GPU reads directly) is not zero: a stream stalled on
// purpose, as a peer that never comes stalls NCCL's kernel.
const spinPTX = `
.version 8.0
.target sm_%d
.address_size 64
.visible .entry gpucomm_test_spin(.param .u64 flag)
{
	.reg .pred %%p;
	.reg .b32 %%r;
	.reg .b64 %%rd<2>;
	ld.param.u64 %%rd0, [flag];
	cvta.to.global.u64 %%rd1, %%rd0;
SPIN:
	ld.volatile.global.u32 %%r, [%%rd1];
	setp.eq.u32 %%p, %%r, 0;
	@%%p bra SPIN;
	ret;
}
`

// stall makes the next operation's stream wait, inside its timed window,
// until the returned release is called.
func stall(t *testing.T, dev *devmem.Device) (release func()) {
	t.Helper()
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := dev.LoadModule([]byte(fmt.Sprintf(spinPTX, min(10*major+minor, 90))))
	if err != nil {
		t.Fatal(err)
	}
	spin, err := mod.Function("gpucomm_test_spin")
	if err != nil {
		t.Fatal(err)
	}
	flag, err := dev.AllocPinned(4)
	if err != nil {
		t.Fatal(err)
	}
	word, _ := flag.Bytes()
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&word[0])), 0)
	var once atomic.Bool
	testHookAfterStart = func(s *devmem.Stream) {
		if once.CompareAndSwap(false, true) {
			if err := spin.Launch([3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, flag); err != nil {
				t.Errorf("launching the spinning kernel: %v", err)
			}
		}
	}
	var released atomic.Bool
	release = func() {
		if released.CompareAndSwap(false, true) {
			atomic.StoreUint32((*uint32)(unsafe.Pointer(&word[0])), 1)
		}
	}
	t.Cleanup(func() {
		testHookAfterStart = func(*devmem.Stream) {}
		release()
		if err := dev.Synchronize(); err != nil {
			t.Errorf("after the stall: %v", err)
		}
		if err := mod.Unload(); err != nil {
			t.Error(err)
		}
		if err := flag.Free(); err != nil {
			t.Error(err)
		}
	})
	return release
}

// On one GPU no NCCL rank can miss a collective, so the GPU is made to
// stall inside one: the watchdog must abort the communicator and every
// waiting call return ErrTimeout.
func TestRankGPUTimeout(t *testing.T) {
	onePerGPU(t)
	if n := mpi.World().Size(); n != 1 {
		t.Skipf("stalls its GPU: runs on one rank, not %d", n)
	}
	const timeout = 2 * time.Second
	open := func(t *testing.T) (*Comm, devmem.Buffer, devmem.Buffer) {
		c, err := Open(comm.WithDevice("cuda"), comm.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		send, err := c.Device().Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		recv, err := c.Device().Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { send.Free(); recv.Free() })
		return c, send, recv
	}
	check := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "did not finish within 2s") {
			t.Errorf("%s: %v; want ErrTimeout", what, err)
		}
	}
	after := func(t *testing.T, c *Comm, send, recv devmem.Buffer) {
		t.Helper()
		check(t, "AllReduce after the timeout", c.AllReduce(send, recv, 1024, comm.Float32, comm.Sum, nil))
		check(t, "Barrier after the timeout", c.Barrier(nil))
		if err := c.Close(); err != nil {
			t.Errorf("Close after the abort: %v", err)
		}
		if err := c.Barrier(nil); !errors.Is(err, comm.ErrClosed) {
			t.Errorf("Barrier after Close: %v", err)
		}
	}

	t.Run("on a stream, seen by Wait", func(t *testing.T) {
		c, send, recv := open(t)
		release := stall(t, c.Device())
		s, err := c.Device().NewStream()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		if err := c.AllReduce(send, recv, 1024, comm.Float32, comm.Sum, s); err != nil {
			t.Fatalf("AllReduce on a stream: %v; want it queued", err)
		}
		check(t, "Wait", c.Wait(s))
		release() // the abort may wait for the stalled stream
		after(t, c, send, recv)
	})

	t.Run("with a nil stream", func(t *testing.T) {
		c, send, recv := open(t)
		release := stall(t, c.Device())
		go func() { <-c.failCh; release() }()
		check(t, "AllReduce", c.AllReduce(send, recv, 1024, comm.Float32, comm.Sum, nil))
		after(t, c, send, recv)
	})
}
