//go:build cgo

package devmem

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/cuda"
)

// IPC of GPU memory between processes: VMM memory (AllocShared), legacy
// memory (Alloc), what happens once the exporter frees, and a legacy
// mapping made outside gpucomm, as a CUDA-aware MPI makes one. On the fake
// driver (TestCUDADriverOnAFakeLibrary) and on a GPU.

func init() {
	cudaChildRoles["ipc-stale-mapping"] = cudaChildStaleMapping
	cudaChildRoles["ipc-expect-bad-handle"] = cudaChildExpectBadHandle
	cudaChildRoles["vmm-hold-after-free"] = cudaChildHoldAfterFree
	cudaChildRoles["ipc-beside-foreign-mapping"] = cudaChildBesideForeignMapping
	cudaChildRoles["vmm-unsupported"] = cudaChildVMMUnsupported
}

func textOf(tb testing.TB, h IPCHandle) string {
	tb.Helper()
	b, err := h.MarshalText()
	must(tb, err)
	return string(b)
}

// mustAllocShared is AllocShared, freed at the end of the test if still live.
func mustAllocShared(tb testing.TB, d *Device, n int) Buffer {
	tb.Helper()
	b, err := d.AllocShared(n)
	must(tb, err)
	tb.Cleanup(func() {
		if err := b.Free(); err != nil && !errors.Is(err, ErrInvalidArgument) {
			tb.Errorf("Free: %v", err)
		}
	})
	return b
}

// vmmHere reports whether AllocShared gives VMM memory on d by default.
func vmmHere(t *testing.T, d *Device) bool {
	t.Helper()
	ok, why := d.drv.(*cudaDriver).vmmSupport()
	if !ok {
		t.Logf("no VMM on %v: %s", d, why)
	}
	return ok
}

// TestCUDAOnGPUVMMAcrossFourProcesses is TestCUDAOnGPUIPCAcrossFourProcesses
// on AllocShared memory: each of four processes opens the buffer three
// ways, checks its part and writes it; the exporter checks every byte.
func TestCUDAOnGPUVMMAcrossFourProcesses(t *testing.T) {
	d := needCUDA(t)
	if !vmmHere(t, d) {
		t.Skip("the device has no VMM")
	}
	ipcAcrossFourProcesses(t, d, d.AllocShared, true)
}

// TestCUDAOnGPUIPCHandleOfFreedMemoryIsRefused: once the exporter has freed
// the memory, another process's OpenIPC of its handle fails with
// ErrBadHandle and opens nothing, for legacy and VMM memory. (The H200
// opened a freed legacy handle; the fake does as it does.)
func TestCUDAOnGPUIPCHandleOfFreedMemoryIsRefused(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	allocs := map[string]func(int) (Buffer, error){"legacy": d.Alloc}
	if vmmHere(t, d) {
		allocs["vmm"] = d.AllocShared
	}
	for name, alloc := range allocs {
		t.Run(name, func(t *testing.T) {
			b, err := alloc(1 << 20)
			must(t, err)
			must(t, CopyFromHost(b, cudaRandom(71, 1<<20), nil))
			h, err := b.Export()
			must(t, err)
			if h.VMM() != (name == "vmm") {
				t.Fatalf("handle VMM() = %v for %s memory", h.VMM(), name)
			}
			// While it is live, another process opens it.
			c := startCUDAChild(t, "ipc-expect-bad-handle", "GCT_HANDLE="+textOf(t, h), "GCT_LIVE=1")
			if got := c.next(t); got != "ok" {
				t.Errorf("open of the live handle: %s", got)
			}
			c.wait(t)
			must(t, b.Free())
			c = startCUDAChild(t, "ipc-expect-bad-handle", "GCT_HANDLE="+textOf(t, h))
			if got := c.next(t); got != "ok" {
				t.Errorf("open of the freed handle: %s", got)
			}
			c.wait(t)
			if v, err := d.OpenIPC(h); !errors.Is(err, ErrBadHandle) {
				t.Errorf("open in the exporter after Free = %v, %v; want ErrBadHandle", v, err)
			}
		})
	}
}

// cudaChildOpen opens cuda:0 and reads the handle the parent gave in
// GCT_HANDLE: how the children that open an exporter's memory start.
func cudaChildOpen() (IPCHandle, *Device, error) {
	h, err := cudaEnvHandle("GCT_HANDLE")
	if err != nil {
		return h, nil, err
	}
	d, err := Open("cuda:0", 0)
	return h, d, err
}

// cudaRead copies b to the host.
func cudaRead(b Buffer) ([]byte, error) {
	got := make([]byte, b.Len())
	return got, CopyToHost(got, b, nil)
}

// cudaReportHolds reports "ok" when v, opened from h, holds the exporter's
// bytes (cudaRandom(71, size)), and that what does not otherwise; it
// closes v.
func cudaReportHolds(v Buffer, h IPCHandle, what string) error {
	got, err := cudaRead(v)
	if err != nil {
		return err
	}
	if string(got) != string(cudaRandom(71, h.Size())) {
		cudaReport("%s does not hold the exporter's bytes", what)
		return v.CloseIPC()
	}
	if err := v.CloseIPC(); err != nil {
		return err
	}
	cudaReport("ok")
	return nil
}

// cudaMapRaw maps the legacy IPC handle the parent gave in GCT_RAW (hex)
// with cuIpcOpenMemHandle in ctx, outside gpucomm, as a CUDA-aware MPI
// maps memory it moved.
func cudaMapRaw(ctx cuda.Context) (cuda.DevicePtr, error) {
	var raw cuda.IpcMemHandle
	b, err := hex.DecodeString(os.Getenv("GCT_RAW"))
	if err != nil || len(b) != len(raw) {
		return 0, fmt.Errorf("GCT_RAW: %d bytes, %v", len(b), err)
	}
	copy(raw[:], b)
	var p cuda.DevicePtr
	err = cuda.WithContext(ctx, func() error {
		var err error
		p, err = cuda.IpcOpenMemHandle(raw, cuda.IpcMemLazyEnablePeerAccess)
		return err
	})
	return p, err
}

// cudaChildExpectBadHandle opens GCT_HANDLE: with GCT_LIVE set it must open
// and hold cudaRandom(71, size); otherwise OpenIPC must fail with
// ErrBadHandle and leave nothing open.
func cudaChildExpectBadHandle() error {
	h, d, err := cudaChildOpen()
	if err != nil {
		return err
	}
	v, err := d.OpenIPC(h)
	if os.Getenv("GCT_LIVE") != "" {
		if err != nil {
			cudaReport("open of a live handle: %v", err)
			return nil
		}
		return cudaReportHolds(v, h, "the opened memory")
	}
	switch {
	case err == nil:
		v.CloseIPC()
		cudaReport("a handle of freed memory opened (%d bytes at %#x)", v.Len(), v.Addr())
	case !errors.Is(err, ErrBadHandle):
		cudaReport("open of a freed handle: %v, want ErrBadHandle", err)
	case d.Stats().Opened != 0 || len(mappings) != 0:
		cudaReport("after the refused open: %+v, %d mappings", d.Stats(), len(mappings))
	default:
		cudaReport("ok")
	}
	return nil
}

// TestCUDAOnGPUVMMMemoryOutlivesExporterFree: a process that opened VMM
// memory keeps reading what the exporter wrote after the exporter freed it
// (the physical memory lives while any process holds it), while new opens
// are refused.
func TestCUDAOnGPUVMMMemoryOutlivesExporterFree(t *testing.T) {
	d := needCUDA(t)
	if !vmmHere(t, d) {
		t.Skip("the device has no VMM")
	}
	cudaNoLeaks(t, d)
	const n = 3<<20 + 12345 // not a multiple of any granularity
	b := mustAllocShared(t, d, n)
	must(t, CopyFromHost(b, cudaRandom(72, n), nil))
	h, err := b.Export()
	must(t, err)
	c := startCUDAChild(t, "vmm-hold-after-free", "GCT_HANDLE="+textOf(t, h))
	if got := c.next(t); got != "opened" {
		t.Fatalf("child: %s", got)
	}
	must(t, b.Free())
	late := startCUDAChild(t, "ipc-expect-bad-handle", "GCT_HANDLE="+textOf(t, h))
	if got := late.next(t); got != "ok" {
		t.Errorf("a new open after Free: %s", got)
	}
	late.wait(t)
	fmt.Fprintln(c.stdin, "freed")
	if got := c.next(t); got != "ok" {
		t.Errorf("child after the exporter freed: %s", got)
	}
	c.wait(t)
}

// cudaChildHoldAfterFree opens GCT_HANDLE, says "opened", waits for the
// parent's "freed", then checks the memory still holds cudaRandom(72, size)
// and takes a write, and closes.
func cudaChildHoldAfterFree() error {
	h, d, err := cudaChildOpen()
	if err != nil {
		return err
	}
	v, err := d.OpenIPC(h)
	if err != nil {
		return err
	}
	cudaReport("opened")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "freed\n" {
		return fmt.Errorf("waiting for the parent: %q, %v", line, err)
	}
	got, err := cudaRead(v)
	if err != nil {
		return err
	}
	want := cudaRandom(72, h.Size())
	for i := range want {
		if got[i] != want[i] {
			cudaReport("byte %d is %#x after the exporter freed, want %#x", i, got[i], want[i])
			return v.CloseIPC()
		}
	}
	if err := CopyFromHost(v, cudaRandom(73, v.Len()), nil); err != nil {
		return err
	}
	if err := CopyToHost(got, v, nil); err != nil {
		return err
	}
	if string(got) != string(cudaRandom(73, v.Len())) {
		cudaReport("memory the exporter freed does not keep what this process wrote")
		return v.CloseIPC()
	}
	if err := v.CloseIPC(); err != nil {
		return err
	}
	if st := d.Stats(); st != (Stats{}) {
		cudaReport("Stats at the end: %+v", st)
		return nil
	}
	cudaReport("ok")
	return nil
}

// TestCUDAOnGPUIPCBesideAForeignLegacyMapping is the CUDA-aware MPI
// collision: a process that has mapped an allocation through its legacy
// CUDA IPC handle outside gpucomm (MPI does, for memory it moved) opens the
// VMM handle of AllocShared memory, which no legacy handle names, whatever
// MPI did. Under the one-legacy-mapping-per-process rule (the fake's; the
// seed program's CUDA_ERROR_ALREADY_MAPPED) the legacy open fails, naming
// the collision; the H200's driver (CUDA 13) let the same handle open twice
// in one process, so there the legacy outcome is only logged.
func TestCUDAOnGPUIPCBesideAForeignLegacyMapping(t *testing.T) {
	d := needCUDA(t)
	modes := []string{"legacy"}
	if vmmHere(t, d) {
		modes = append(modes, "auto")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			cudaNoLeaks(t, d)
			t.Setenv(IPCModeEnv, mode)
			const n = 1 << 20
			b := mustAllocShared(t, d, n)
			must(t, CopyFromHost(b, cudaRandom(71, n), nil))
			h, err := b.Export()
			must(t, err)
			if h.VMM() != (mode == "auto") {
				t.Fatalf("%s=%s: handle VMM() = %v", IPCModeEnv, mode, h.VMM())
			}
			// What MPI does on the sending side.
			var raw cuda.IpcMemHandle
			rawErr := cuda.WithContext(cuda.Context(d.context()), func() error {
				var err error
				raw, err = cuda.IpcGetMemHandle(cuda.DevicePtr(b.Addr()))
				return err
			})
			if mode == "legacy" {
				must(t, rawErr)
			}
			env := []string{"GCT_HANDLE=" + textOf(t, h), "GCT_MODE=" + mode}
			if rawErr == nil {
				env = append(env, fmt.Sprintf("GCT_RAW=%x", raw[:]))
			} else {
				t.Logf("cuIpcGetMemHandle of VMM memory: %v (so MPI cannot map it that way)", rawErr)
			}
			c := startCUDAChild(t, "ipc-beside-foreign-mapping", env...)
			if got := c.next(t); got != "ok" {
				t.Errorf("child: %s", got)
			}
			c.wait(t)
			if strings.Contains(c.output(), "maps a handle twice") {
				t.Logf("this driver maps one legacy handle twice in a process")
			}
			must(t, b.Free())
		})
	}
}

// cudaChildBesideForeignMapping maps GCT_RAW (when given) with
// cuIpcOpenMemHandle, as MPI would, then opens GCT_HANDLE: in legacy mode
// the open must fail with ErrBadHandle naming the collision, otherwise it
// must open and read cudaRandom(71, size).
func cudaChildBesideForeignMapping() error {
	h, d, err := cudaChildOpen()
	if err != nil {
		return err
	}
	ctx := cuda.Context(d.context())
	if os.Getenv("GCT_RAW") != "" {
		foreign, err := cudaMapRaw(ctx)
		if err != nil {
			return fmt.Errorf("the foreign (MPI's) mapping: %w", err)
		}
		defer cuda.WithContext(ctx, func() error { return cuda.IpcCloseMemHandle(foreign) })
	}
	v, err := d.OpenIPC(h)
	if os.Getenv("GCT_MODE") == "legacy" {
		switch {
		case err == nil && !onFake():
			fmt.Printf("a legacy handle opened beside a foreign mapping of its memory: this driver maps a handle twice\n")
			cudaReport("ok")
			return v.CloseIPC()
		case err == nil:
			v.CloseIPC()
			cudaReport("a legacy handle opened beside a foreign mapping of its memory on the fake")
		case !errors.Is(err, ErrBadHandle) || !strings.Contains(err.Error(), "ALREADY_MAPPED"):
			cudaReport("legacy open beside a foreign mapping: %v, want ErrBadHandle naming CUDA_ERROR_ALREADY_MAPPED", err)
		default:
			cudaReport("ok")
		}
		return nil
	}
	if err != nil {
		cudaReport("VMM open beside a foreign mapping: %v", err)
		return nil
	}
	return cudaReportHolds(v, h, "the VMM view")
}

// TestCUDAOnGPUVMMSettingChoosesTheMemory: GPUCOMM_IPC=legacy gives legacy
// memory, an unknown value is an error, and on a device without VMM (the
// fake, told so) auto falls back to legacy while vmm is refused.
func TestCUDAOnGPUVMMSettingChoosesTheMemory(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	t.Setenv(IPCModeEnv, "sideways")
	if b, err := d.AllocShared(64); !errors.Is(err, ErrInvalidArgument) {
		b.Free()
		t.Errorf("AllocShared with %s=sideways = %v, want ErrInvalidArgument", IPCModeEnv, err)
	}
	t.Setenv(IPCModeEnv, "legacy")
	b := mustAllocShared(t, d, 64)
	h, err := b.Export()
	must(t, err)
	if h.VMM() || b.a.vmm != nil {
		t.Errorf("%s=legacy gave VMM memory", IPCModeEnv)
	}
	if onFake() {
		c := startCUDAChild(t, "vmm-unsupported", "GPUCOMM_FAKE_CUDA_NO_VMM=1")
		if got := c.next(t); got != "ok" {
			t.Errorf("child on a device without VMM: %s", got)
		}
		c.wait(t)
	}
}

func cudaChildVMMUnsupported() error {
	d, err := Open("cuda:0", 0)
	if err != nil {
		return err
	}
	os.Setenv(IPCModeEnv, "vmm")
	if b, err := d.AllocShared(64); !errors.Is(err, ErrUnsupported) {
		b.Free()
		cudaReport("%s=vmm on a device without VMM: %v, want ErrUnsupported", IPCModeEnv, err)
		return nil
	}
	os.Setenv(IPCModeEnv, "auto")
	b, err := d.AllocShared(64)
	if err != nil {
		return err
	}
	h, err := b.Export()
	if err != nil {
		return err
	}
	if h.VMM() {
		cudaReport("auto on a device without VMM gave a VMM handle")
		return b.Free()
	}
	if err := b.Free(); err != nil {
		return err
	}
	cudaReport("ok")
	return nil
}

// TestCUDAOnGPUNodeSharedTwoBuffersAcrossProcesses is the seed scenario's
// shape on a GPU: seven processes share two node-shared buffers (VMM by
// default) and move data between them.
func TestCUDAOnGPUNodeSharedTwoBuffersAcrossProcesses(t *testing.T) {
	d := needCUDA(t)
	nodeSharedTwoBuffers(t, "cuda:0", vmmHere(t, d) && os.Getenv(IPCModeEnv) != "legacy", []int64{5000, 1, 0, 4321, 77, 1 << 16, 3})
}

// TestCUDAOnGPUIPCBesideAStaleMappingOfFreedMemory: another process keeps a
// legacy mapping of memory the exporter then frees (as MPI's registration
// cache does); the exporter allocates again (CUDA may reuse the memory) and
// exports. The VMM handle opens there; what the legacy one does is logged
// (it is what a CUDA-aware MPI's stale mappings do to legacy handles).
func TestCUDAOnGPUIPCBesideAStaleMappingOfFreedMemory(t *testing.T) {
	d := needCUDA(t)
	if !vmmHere(t, d) {
		t.Skip("the device has no VMM")
	}
	const n = 4 << 20
	a, err := d.Alloc(n)
	must(t, err)
	var raw cuda.IpcMemHandle
	must(t, cuda.WithContext(cuda.Context(d.context()), func() error {
		var err error
		raw, err = cuda.IpcGetMemHandle(cuda.DevicePtr(a.Addr()))
		return err
	}))
	c := startCUDAChild(t, "ipc-stale-mapping", fmt.Sprintf("GCT_RAW=%x", raw[:]))
	if got := c.next(t); got != "mapped" {
		t.Fatalf("child: %s", got)
	}
	must(t, a.Free())
	b := mustAlloc(t, d, n, false)
	must(t, CopyFromHost(b, cudaRandom(71, n), nil))
	v := mustAllocShared(t, d, n)
	must(t, CopyFromHost(v, cudaRandom(71, n), nil))
	hb, err := b.Export()
	must(t, err)
	hv, err := v.Export()
	must(t, err)
	fmt.Fprintf(c.stdin, "%s\n%s\n", textOf(t, hb), textOf(t, hv))
	t.Logf("legacy handle of reused memory beside a stale mapping (B at %#x, A was at %#x): %s", b.Addr(), a.Addr(), c.next(t))
	if got := c.next(t); got != "ok" {
		t.Errorf("VMM handle beside a stale legacy mapping: %s", got)
	}
	c.wait(t)
}

func cudaChildStaleMapping() error {
	d, err := Open("cuda:0", 0)
	if err != nil {
		return err
	}
	ctx := cuda.Context(d.context())
	stale, err := cudaMapRaw(ctx)
	if err != nil {
		return err
	}
	defer cuda.WithContext(ctx, func() error { return cuda.IpcCloseMemHandle(stale) })
	cudaReport("mapped")
	in := bufio.NewReader(os.Stdin)
	var hs [2]IPCHandle
	for i := range hs {
		line, err := in.ReadString('\n')
		if err != nil {
			return err
		}
		if err := hs[i].UnmarshalText([]byte(strings.TrimSpace(line))); err != nil {
			return err
		}
	}
	for i, h := range hs {
		v, err := d.OpenIPC(h)
		if err != nil {
			cudaReport("%v", err)
			continue
		}
		got, err := cudaRead(v)
		switch {
		case err != nil:
			cudaReport("read: %v", err)
		case string(got) != string(cudaRandom(71, h.Size())):
			cudaReport("opened at %#x (stale mapping at %#x) but does not hold the exporter's bytes", v.Addr(), stale)
		case i == 0:
			cudaReport("opened at %#x, the stale mapping at %#x", v.Addr(), stale)
		default:
			cudaReport("ok")
		}
		if err := v.CloseIPC(); err != nil {
			return err
		}
	}
	return nil
}

// TestCUDAOnGPUIsVMMFollowsTheMemory: isVMM (internal/devhook.IsVMM, which
// keeps a CUDA-aware MPI away from VMM memory) is true for AllocShared's
// VMM memory, every slice of it and every view OpenIPC opens of it, and
// false for Alloc and pinned memory and for legacy shared memory.
func TestCUDAOnGPUIsVMMFollowsTheMemory(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	plain := mustAlloc(t, d, 64, false)
	pinned := mustAlloc(t, d, 64, true)
	t.Setenv(IPCModeEnv, "legacy")
	legacy := mustAllocShared(t, d, 64)
	for name, b := range map[string]Buffer{"Alloc": plain, "AllocPinned": pinned, "legacy AllocShared": legacy, "zero": {}} {
		if b.isVMM() {
			t.Errorf("isVMM of %s memory = true", name)
		}
	}
	lh, err := legacy.Export()
	must(t, err)
	lv, err := d.OpenIPC(lh)
	must(t, err)
	if lv.isVMM() {
		t.Errorf("isVMM of a view of legacy memory = true")
	}
	must(t, lv.CloseIPC())
	if !vmmHere(t, d) {
		return
	}
	t.Setenv(IPCModeEnv, "vmm")
	vmm := mustAllocShared(t, d, 64)
	part, err := vmm.Slice(16, 8)
	must(t, err)
	h, err := vmm.Export()
	must(t, err)
	view, err := d.OpenIPC(h)
	must(t, err)
	defer func() { must(t, view.CloseIPC()) }()
	viewPart, err := view.Slice(8, 8)
	must(t, err)
	for name, b := range map[string]Buffer{"AllocShared": vmm, "a slice": part, "an opened view": view, "a slice of a view": viewPart} {
		if !b.isVMM() {
			t.Errorf("isVMM of %s of VMM memory = false", name)
		}
	}
}
