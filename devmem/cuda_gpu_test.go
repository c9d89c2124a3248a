package devmem

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/nvrtc"
)

// The tests named TestCUDAOnGPU... need a usable CUDA device and skip
// without one; TestCUDADriverOnAFakeLibrary also runs them against a fake
// driver. The benchmarks feed docs/PERFORMANCE.md. None needs Go or the
// sources at run time: the test binary is built elsewhere and carried.

func init() {
	cudaChildRoles["ipc-writer"] = cudaChildIPCWriter
	cudaChildRoles["ipc-hold"] = cudaChildIPCHold
	cudaChildRoles["ipc-open-bench"] = cudaChildIPCOpenBench
}

// needCUDA returns CUDA device 0, or skips the test saying why there is none.
func needCUDA(tb testing.TB) *Device {
	tb.Helper()
	d, err := Open("cuda:0", 0)
	if err != nil {
		tb.Skipf("no usable CUDA device: %v", err)
	}
	return d
}

func onFake() bool { return os.Getenv(cudaFakeEnv) != "" }

// cudaNoLeaks fails the test unless, when it ends, d's Stats are what they
// are now (and, on the fake driver, no device memory is left allocated).
func cudaNoLeaks(tb testing.TB, d *Device) {
	tb.Helper()
	before := d.Stats()
	tb.Cleanup(func() {
		if err := d.Synchronize(); err != nil {
			tb.Errorf("Synchronize at the end: %v", err)
		}
		if after := d.Stats(); after != before {
			tb.Errorf("%v: Stats went from %+v to %+v: something leaked", d, before, after)
		}
		if onFake() {
			if free, total, err := d.MemInfo(); err != nil || free != total {
				tb.Errorf("%v: %d of %d bytes free at the end (%v)", d, free, total, err)
			}
		}
	})
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func mustAlloc(tb testing.TB, d *Device, n int, pinned bool) Buffer {
	tb.Helper()
	alloc := d.Alloc
	if pinned {
		alloc = d.AllocPinned
	}
	b, err := alloc(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := b.Free(); err != nil && !errors.Is(err, ErrInvalidArgument) {
			tb.Errorf("Free: %v", err)
		}
	})
	return b
}

func mustStream(tb testing.TB, d *Device) *Stream {
	tb.Helper()
	s, err := d.NewStream()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Destroy(); err != nil && !errors.Is(err, ErrInvalidArgument) {
			tb.Errorf("stream Destroy: %v", err)
		}
	})
	return s
}

func mustEvent(tb testing.TB, d *Device) *Event {
	tb.Helper()
	e, err := d.NewEvent()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.Destroy(); err != nil && !errors.Is(err, ErrInvalidArgument) {
			tb.Errorf("event Destroy: %v", err)
		}
	})
	return e
}

func view(tb testing.TB, b Buffer, off, n int) Buffer {
	tb.Helper()
	v, err := b.Slice(off, n)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// copyThenCheck queues on s a copy of 4096 bytes of fill from the device to
// pinned memory, then host work that calls arrived if the bytes are there
// when it runs, and closes done: the tail of the host-work tests, which
// check that work queued behind host work waits for it and still runs.
func copyThenCheck(t *testing.T, d *Device, s *Stream, fill byte, arrived func(), done chan struct{}) {
	t.Helper()
	const n = 4096
	src := mustAlloc(t, d, n, false)
	pin := mustAlloc(t, d, n, true)
	must(t, Memset(src, fill, nil))
	must(t, Memset(pin, 0, nil))
	h, _ := pin.Bytes()
	must(t, CopyN(pin, src, n, s))
	must(t, s.HostFunc(func() error {
		if h[0] == fill && h[n-1] == fill {
			arrived()
		}
		close(done)
		return nil
	}))
}

// readAll returns all of b's bytes, read after s's work.
func readAll(tb testing.TB, b Buffer, s *Stream) []byte {
	tb.Helper()
	got := make([]byte, b.Len())
	must(tb, CopyToHost(got, b, s))
	return got
}

func TestCUDAOnGPUOpenIsCachedAndDescribesTheDevice(t *testing.T) {
	d := needCUDA(t)
	n, err := CUDADeviceCount()
	must(t, err)
	for _, spec := range []string{"cuda", "CUDA:0", "auto", " cuda "} {
		rank := n // local rank n maps to device 0 too
		if spec == "CUDA:0" {
			rank = 5
		}
		d2, err := Open(spec, rank)
		if err != nil || d2 != d {
			t.Errorf("Open(%q, %d) = %p, %v; want the cached %p", spec, rank, d2, err, d)
		}
	}
	for _, spec := range []string{fmt.Sprintf("cuda:%d", n), "cuda:-1", "cuda:x"} {
		if d2, err := Open(spec, 0); !errors.Is(err, ErrInvalidArgument) || d2 != nil {
			t.Errorf("Open(%q) = %v, %v; want ErrInvalidArgument", spec, d2, err)
		}
	}
	major, minor, err := d.ComputeCapability()
	must(t, err)
	free, total, err := d.MemInfo()
	must(t, err)
	t.Logf("%v: %d visible, UUID %s, PCI %s, sm_%d%d, %d of %d MiB free", d, n, UUIDString(d.UUID()), d.PCIBusID(), major, minor, free>>20, total>>20)
	switch {
	case d.Kind() != CUDA || d.Ordinal() != 0 || !strings.HasPrefix(d.String(), "cuda:0"):
		t.Errorf("device %v: kind %v, ordinal %d", d, d.Kind(), d.Ordinal())
	case d.Name() == "" || d.UUID() == [16]byte{}:
		t.Errorf("device %v: name %q, UUID %x", d, d.Name(), d.UUID())
	case !regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`).MatchString(d.PCIBusID()):
		t.Errorf("PCI bus id %q", d.PCIBusID())
	case major < 3:
		t.Errorf("compute capability %d.%d", major, minor)
	case total <= 0 || free <= 0 || free > total:
		t.Errorf("MemInfo: %d free of %d", free, total)
	}
	if n > 1 {
		d1, err := Open("cuda:1", 0)
		must(t, err)
		if d1 == d || d1.UUID() == d.UUID() || d1.Ordinal() != 1 {
			t.Errorf("cuda:1 is %v (%x), cuda:0 is %v (%x)", d1, d1.UUID(), d, d.UUID())
		}
	}
}

func TestCUDAOnGPUAllocAndFreeKeepStats(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	before := d.Stats()
	sizes := []int{0, 1, 4097, 1 << 20}
	var dev, pin []Buffer
	var total int64
	seen := map[uintptr]bool{}
	for _, n := range sizes {
		b, err := d.Alloc(n)
		must(t, err)
		p, err := d.AllocPinned(n)
		must(t, err)
		dev, pin = append(dev, b), append(pin, p)
		total += 2 * int64(n)
		if _, ok := b.Bytes(); ok && n > 0 {
			t.Errorf("device buffer of %d bytes has a host view", n)
		}
		if h, ok := p.Bytes(); !ok || len(h) != n || !p.Pinned() || b.Pinned() {
			t.Errorf("pinned buffer of %d bytes: host view %d bytes (%v), pinned %v", n, len(h), ok, p.Pinned())
		}
		for _, x := range []Buffer{b, p} {
			if n > 0 && (x.Addr() == 0 || seen[x.Addr()]) {
				t.Errorf("address %#x of a %d-byte buffer is zero or taken", x.Addr(), n)
			}
			seen[x.Addr()] = true
		}
	}
	st := d.Stats()
	if st.Buffers != before.Buffers+4 || st.Pinned != before.Pinned+4 || st.Bytes != before.Bytes+total {
		t.Errorf("Stats after 4+4 allocations of %d bytes: %+v (before %+v)", total, st, before)
	}
	if _, err := d.Alloc(-1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Alloc(-1): %v", err)
	}
	if b, err := d.Alloc(1 << 62); err == nil || !b.IsZero() {
		t.Errorf("Alloc of 4 EiB = %v, %v; want an error", b, err)
	}
	if d.Stats() != st {
		t.Errorf("failed allocations changed Stats: %+v", d.Stats())
	}
	v := view(t, dev[3], 8, 16)
	if err := v.Free(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Free of a view: %v", err)
	}
	for i := range dev {
		must(t, dev[i].Free())
		must(t, pin[i].Free())
		if err := dev[i].Free(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("second Free: %v", err)
		}
	}
	if d.Stats() != before {
		t.Errorf("Stats after freeing everything: %+v, want %+v", d.Stats(), before)
	}
}

// TestCUDAOnGPUCopiesEveryDirection moves random bytes through every kind
// of copy, into views that start and end inside poisoned buffers, and checks
// every byte of the result and of the poison around it.
func TestCUDAOnGPUCopiesEveryDirection(t *testing.T) {
	d := needCUDA(t)
	for _, withStream := range []bool{false, true} {
		t.Run(map[bool]string{false: "nil stream", true: "stream"}[withStream], func(t *testing.T) {
			cudaNoLeaks(t, d)
			var s *Stream
			if withStream {
				s = mustStream(t, d)
			}
			const n, pad, poison = 1<<20 + 3, 4099, 0x5c
			whole := map[string]Buffer{}
			views := map[string]Buffer{}
			for _, name := range []string{"devA", "devB", "devC", "pinA", "pinB"} {
				b := mustAlloc(t, d, n+2*pad, strings.HasPrefix(name, "pin"))
				must(t, Memset(b, poison, s))
				whole[name], views[name] = b, view(t, b, pad, n)
			}
			want := cudaRandom(21, n)
			must(t, CopyFromHost(views["devA"], want, s))      // Go -> device
			must(t, CopyN(views["devB"], views["devA"], n, s)) // device -> device
			must(t, CopyN(views["pinA"], views["devB"], n, s)) // device -> pinned
			must(t, CopyN(views["pinB"], views["pinA"], n, s)) // pinned -> pinned
			must(t, CopyN(views["devC"], views["pinB"], n, s)) // pinned -> device
			cudaSameBytes(t, "device -> Go", readAll(t, views["devC"], s), want)
			cudaSameBytes(t, "pinned -> Go", readAll(t, views["pinB"], s), want)
			again := cudaRandom(22, n)
			must(t, CopyFromHost(views["pinA"], again, s)) // Go -> pinned
			cudaSameBytes(t, "Go -> pinned", readAll(t, views["pinA"], s), again)

			must(t, Memset(view(t, views["devB"], 10, 1000), 0x77, s))
			must(t, Memset(view(t, views["pinB"], 20, 2000), 0x33, s))
			must(t, s.Synchronize())
			expect := map[string][]byte{"devA": want, "devB": want, "devC": want, "pinA": again, "pinB": want}
			expect["devB"] = bytes.Clone(want)
			copy(expect["devB"][10:1010], bytes.Repeat([]byte{0x77}, 1000))
			expect["pinB"] = bytes.Clone(want)
			copy(expect["pinB"][20:2020], bytes.Repeat([]byte{0x33}, 2000))
			fence := bytes.Repeat([]byte{poison}, pad)
			for name, b := range whole {
				var got []byte
				if h, ok := b.Bytes(); ok {
					got = bytes.Clone(h)
				} else {
					got = readAll(t, b, s)
				}
				cudaSameBytes(t, name+" before the view", got[:pad], fence)
				cudaSameBytes(t, name+" in the view", got[pad:pad+n], expect[name])
				cudaSameBytes(t, name+" after the view", got[pad+n:], fence)
			}
			if err := CopyN(views["devA"], view(t, whole["devA"], pad+1, n), n, s); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("copy between overlapping ranges: %v, want ErrInvalidArgument", err)
			}
			cudaSameBytes(t, "devA after a refused copy", readAll(t, views["devA"], s), want)
		})
	}
}

func TestCUDAOnGPUStreamRunsQueuedWorkInOrder(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	const rounds, n = 16, 1 << 20
	x := mustAlloc(t, d, n, false)
	y := mustAlloc(t, d, n, false)
	pins := make([]Buffer, rounds)
	for r := range pins {
		pins[r] = mustAlloc(t, d, n, true)
	}
	// Every round overwrites x and y; only in-order execution leaves round
	// r's value in pins[r].
	for r := range rounds {
		must(t, Memset(x, byte(r+1), s))
		must(t, CopyN(y, x, n, s))
		must(t, Memset(x, 0, s))
		must(t, CopyN(pins[r], y, n, s))
	}
	last, _ := pins[rounds-1].Bytes()
	var sawLast atomic.Bool
	must(t, s.HostFunc(func() error {
		sawLast.Store(bytes.Count(last, []byte{rounds}) == n)
		return nil
	}))
	must(t, s.Synchronize())
	if !sawLast.Load() {
		t.Error("HostFunc ran before the stream's earlier work was done")
	}
	for r, p := range pins {
		h, _ := p.Bytes()
		cudaSameBytes(t, fmt.Sprintf("round %d", r), h, bytes.Repeat([]byte{byte(r + 1)}, n))
	}
	sentinel := errors.New("from fn")
	must(t, s.HostFunc(func() error { return sentinel }))
	if err := s.Synchronize(); !errors.Is(err, sentinel) {
		t.Errorf("Synchronize after a failing HostFunc returned %v, want fn's error", err)
	}
	must(t, s.Synchronize()) // reported once
	var nilStream *Stream
	must(t, nilStream.Synchronize())
}

// HostFunc returns at once; work queued behind a waiting host function
// (a copy, an event record, another stream's wait for that event) is
// handed to the GPU only after it, and Synchronize of the stream and of the
// device wait for all of it.
func TestCUDAOnGPUHostFuncQueuesLaterWork(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s1, s2 := mustStream(t, d), mustStream(t, d)
	ev := mustEvent(t, d)
	const n = 1 << 20
	src := mustAlloc(t, d, n, false)
	mid := mustAlloc(t, d, n, false)
	dst := mustAlloc(t, d, n, true)
	must(t, Memset(src, 7, nil))
	must(t, Memset(mid, 1, nil))
	must(t, Memset(dst, 2, nil))
	gate := make(chan struct{})
	var ran atomic.Bool
	returned := make(chan error, 1)
	go func() { returned <- s1.HostFunc(func() error { <-gate; ran.Store(true); return nil }) }()
	select {
	case err := <-returned:
		must(t, err)
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("HostFunc waited for its function")
	}
	must(t, CopyN(mid, src, n, s1)) // queued behind the gate
	must(t, ev.Record(s1))
	must(t, s2.WaitEvent(ev))
	must(t, CopyN(dst, mid, n, s2)) // must see the copy into mid
	time.Sleep(50 * time.Millisecond)
	if done, err := ev.Done(); err != nil || done {
		t.Errorf("event queued behind a waiting host function: Done = %v, %v; want not reached", done, err)
	}
	if h, _ := dst.Bytes(); h[0] != 2 {
		t.Errorf("the second stream ran before the event it waits for was recorded: dst[0] = %d", h[0])
	}
	close(gate)
	must(t, d.Synchronize())
	if !ran.Load() {
		t.Error("Device.Synchronize returned before a queued host function ran")
	}
	h, _ := dst.Bytes()
	cudaSameBytes(t, "copied through the queued work", h, bytes.Repeat([]byte{7}, n))
	must(t, ev.Synchronize())
	must(t, errors.Join(s1.Synchronize(), s2.Synchronize()))
}

// Device.Synchronize waits for the host functions queued on every stream
// of the device, and the work behind them (testDeviceSynchronizeWaitsForHostWork).
func TestCUDAOnGPUDeviceSynchronizeWaitsForHostWork(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	testDeviceSynchronizeWaitsForHostWork(t, d)
}

// Device memory freed while a copy that reads it waits on the host behind a
// host function (not handed to CUDA yet, so cuMemFree cannot wait for it)
// stays allocated until the copy is in CUDA: Free returns at once, with the
// Stats counting it freed, and the copy reads the freed buffer's bytes.
// Before the fix cuMemFree ran at Free, and the copy met freed memory.
func TestCUDAOnGPUFreeWaitsForWorkQueuedBehindAHostFunction(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	const n = 1 << 20
	want := bytes.Repeat([]byte{0x5a, 0x17, 0xc3}, n/3+1)[:n]
	src, err := d.Alloc(n)
	must(t, err)
	must(t, CopyFromHost(src, want, nil))
	dst := mustAlloc(t, d, n, true)
	must(t, Memset(dst, 0xee, nil))
	before := d.Stats()
	gate := make(chan struct{})
	must(t, s.HostFunc(func() error { <-gate; return nil }))
	must(t, CopyN(dst, src, n, s)) // queued on the host, behind the gate
	freed := make(chan error, 1)
	go func() { freed <- src.Free() }()
	select {
	case err := <-freed:
		must(t, err)
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("Free waited for a host function")
	}
	if st := d.Stats(); st.Buffers != before.Buffers-1 || st.Bytes != before.Bytes-n {
		t.Errorf("Stats after Free: %+v, want one buffer of %d bytes fewer than %+v", st, n, before)
	}
	close(gate)
	must(t, s.Synchronize())
	h, _ := dst.Bytes()
	cudaSameBytes(t, "copied from a buffer freed while the copy was queued", h, want)
}

// Synchronize runs queued host work itself when no goroutine is running it.
// With one goroutine queueing host functions and copies while another
// synchronizes over and over, every host function runs once, in order,
// after the copy queued before it, and a Synchronize returns only after the
// work queued before it.
func TestCUDAOnGPUSynchronizeWhileHostWorkIsQueued(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s := mustStream(t, d)
	const rounds, n = 200, 4096
	src := mustAlloc(t, d, n, false)
	pin := mustAlloc(t, d, n, true)
	h, _ := pin.Bytes()
	var ran []int // written by host functions only, which run one at a time
	var bad atomic.Int64
	stop := make(chan struct{})
	helper := make(chan error, 1)
	go func() { // synchronizes concurrently, taking over the queue at times
		for {
			select {
			case <-stop:
				helper <- nil
				return
			default:
			}
			if err := s.Synchronize(); err != nil {
				helper <- err
				return
			}
		}
	}()
	for r := range rounds {
		v := byte(r%250 + 1)
		must(t, Memset(src, v, s))
		must(t, CopyN(pin, src, n, s))
		must(t, s.HostFunc(func() error {
			if h[0] != v || h[n-1] != v {
				bad.Add(1)
			}
			ran = append(ran, r)
			return nil
		}))
		if r%7 == 0 {
			must(t, s.Synchronize())
			if len(ran) != r+1 {
				t.Fatalf("round %d: Synchronize returned after %d host functions, want %d", r, len(ran), r+1)
			}
		}
	}
	must(t, s.Synchronize())
	close(stop)
	must(t, <-helper)
	if bad.Load() != 0 {
		t.Errorf("%d host functions ran before the copy queued before them", bad.Load())
	}
	if len(ran) != rounds {
		t.Fatalf("%d host functions ran, want %d", len(ran), rounds)
	}
	for i, r := range ran {
		if r != i {
			t.Fatalf("host function %d ran as number %d: out of order", r, i)
		}
	}
}

// Two streams that wait for each other's events every step, one of them
// behind a host function each step (the solver's compute and exchange
// streams): a wait must be for the record that was latest when it was
// queued, not for one recorded later behind work that waits for it.
func TestCUDAOnGPUCrossStreamWaitsBehindHostWorkDoNotDeadlock(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	compute, exch := mustStream(t, d), mustStream(t, d)
	computeDone, haloReady := mustEvent(t, d), mustEvent(t, d)
	const n, steps = 4096, 40
	x := mustAlloc(t, d, n, false)
	y := mustAlloc(t, d, n, false)
	pin := mustAlloc(t, d, n, true)
	var hosts atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range steps {
			err := errors.Join(
				computeDone.Record(compute),
				exch.WaitEvent(computeDone),
				CopyN(y, x, n, exch),
				exch.HostFunc(func() error { time.Sleep(time.Millisecond); hosts.Add(1); return nil }),
				haloReady.Record(exch),
				Memset(x, byte(i+1), compute),
				compute.WaitEvent(haloReady),
				CopyN(pin, x, n, compute),
			)
			if err != nil {
				done <- err
				return
			}
		}
		done <- errors.Join(compute.Synchronize(), exch.Synchronize())
	}()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("streams waiting for each other's events behind host work deadlocked")
	}
	if hosts.Load() != steps {
		t.Errorf("%d host functions ran, want %d", hosts.Load(), steps)
	}
	h, _ := pin.Bytes()
	cudaSameBytes(t, "the last step's copy", h, bytes.Repeat([]byte{steps}, n))
}

func TestCUDAOnGPUEventsOrderStreamsAndTime(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	s1, s2 := mustStream(t, d), mustStream(t, d)
	start, end, never := mustEvent(t, d), mustEvent(t, d), mustEvent(t, d)
	const n = 64 << 20
	x := mustAlloc(t, d, n, false)
	y := mustAlloc(t, d, n, false)
	pin := mustAlloc(t, d, n, true)
	must(t, Memset(y, 0, nil))
	must(t, start.Record(s1))
	must(t, Memset(x, 0xab, s1))
	must(t, CopyN(y, x, n, s1))
	must(t, end.Record(s1))
	must(t, s2.WaitEvent(end))
	must(t, CopyN(pin, y, n, s2))
	must(t, s2.Synchronize())
	h, _ := pin.Bytes()
	cudaSameBytes(t, "bytes s2 copied after waiting for s1's event", h, bytes.Repeat([]byte{0xab}, n))
	must(t, end.Synchronize())
	if done, err := end.Done(); err != nil || !done {
		t.Errorf("Done after Synchronize = %v, %v", done, err)
	}
	el, err := Elapsed(start, end)
	if err != nil || el < 0 {
		t.Errorf("Elapsed = %v, %v", el, err)
	}
	t.Logf("memset and copy of %d MiB: %v by the device's clock", n>>20, el)
	if _, err := Elapsed(never, end); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Elapsed from an event never recorded: %v, want ErrInvalidArgument", err)
	}
	now := mustEvent(t, d)
	must(t, now.Record(nil))
	must(t, now.Synchronize())
	if done, err := now.Done(); err != nil || !done {
		t.Errorf("event recorded on the nil stream: Done = %v, %v after Synchronize", done, err)
	}
	if done, err := never.Done(); err != nil || !done {
		t.Errorf("event never recorded: Done = %v, %v; CUDA counts it as reached", done, err)
	}
	var nilStream *Stream
	must(t, nilStream.WaitEvent(end))
	if err := end.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := end.Destroy(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("second Destroy: %v", err)
	}
	if err := s1.WaitEvent(end); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("WaitEvent on a destroyed event: %v", err)
	}
}

func TestCUDAOnGPURegisterHost(t *testing.T) {
	d := needCUDA(t)
	cudaNoLeaks(t, d)
	page := os.Getpagesize()
	mem := mmapPages(t, 32)
	half := len(mem) / 2
	for name, m := range map[string][]byte{"misaligned": mem[8 : 8+page], "partial page": mem[:page+8]} {
		if _, err := d.RegisterHost(m); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	before := d.Stats()
	b, err := d.RegisterHost(mem)
	must(t, err)
	if st := d.Stats(); st.Pinned != before.Pinned+1 || st.Bytes != before.Bytes+int64(len(mem)) {
		t.Errorf("Stats after RegisterHost: %+v (before %+v)", st, before)
	}
	if _, err := d.RegisterHost(mem[:page]); err == nil {
		t.Error("registering memory twice succeeded")
	}
	want := cudaRandom(31, half)
	copy(mem, want)
	for i := half; i < len(mem); i++ {
		mem[i] = 0xfe
	}
	s := mustStream(t, d)
	dev := mustAlloc(t, d, half, false)
	must(t, CopyN(dev, view(t, b, 0, half), half, s))
	must(t, CopyN(view(t, b, half, half), dev, half, s))
	must(t, s.Synchronize())
	cudaSameBytes(t, "registered memory after a round trip through the device", mem[half:], want)
	must(t, b.Free())
	if d.Stats().Pinned != before.Pinned {
		t.Errorf("Stats after Free: %+v", d.Stats())
	}
	// Registering again works only if Free unregistered it.
	b2, err := d.RegisterHost(mem)
	must(t, err)
	must(t, b2.Free())
	cudaSameBytes(t, "memory after unregistering", mem[half:], want)
}

func TestCUDAOnGPUPeerCopyBetweenTwoDevices(t *testing.T) {
	d0 := needCUDA(t)
	if n, _ := CUDADeviceCount(); n < 2 {
		t.Skipf("needs two GPUs, %d visible", n)
	}
	d1, err := Open("cuda:1", 0)
	must(t, err)
	cudaNoLeaks(t, d0)
	cudaNoLeaks(t, d1)
	const n, pad = 3<<20 + 1, 513
	a := mustAlloc(t, d0, n+2*pad, false)
	b := mustAlloc(t, d1, n+2*pad, false)
	s0, s1 := mustStream(t, d0), mustStream(t, d1)
	for i, st := range []*Stream{s0, s1, nil} {
		src, dst := a, b
		if i == 1 {
			src, dst = b, a
		}
		want := cudaRandom(uint64(40+i), n)
		must(t, Memset(dst, 0xa5, nil))
		must(t, CopyFromHost(view(t, src, pad, n), want, nil))
		must(t, CopyPeer(view(t, dst, pad, n), view(t, src, pad, n), n, st))
		must(t, st.Synchronize()) // st may belong to the other device
		got := readAll(t, dst, nil)
		cudaSameBytes(t, fmt.Sprintf("copy %d", i), got[pad:pad+n], want)
		cudaSameBytes(t, fmt.Sprintf("copy %d: bytes around it", i), append(got[:pad:pad], got[pad+n:]...), bytes.Repeat([]byte{0xa5}, 2*pad))
	}
	if err := CopyN(b, a, n, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("CopyN across devices: %v, want ErrInvalidArgument (CopyPeer does that)", err)
	}
	pin := mustAlloc(t, d0, n, true)
	if err := CopyPeer(b, pin, n, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("CopyPeer of pinned memory: %v, want ErrInvalidArgument", err)
	}
}

// addOnePTX is add_one(float* x, unsigned n) written by hand: x[i] += 1
// for each global thread index i < n. %s is the device's sm_XY, %s a PTX
// ISA version that knows it.
const addOnePTX = `
.version %s
.target %s
.address_size 64

.visible .entry add_one(
	.param .u64 p_x,
	.param .u32 p_n
)
{
	.reg .pred %%p<2>;
	.reg .b32 %%r<6>;
	.reg .f32 %%f<3>;
	.reg .b64 %%rd<5>;

	ld.param.u64 %%rd1, [p_x];
	ld.param.u32 %%r1, [p_n];
	mov.u32 %%r2, %%ctaid.x;
	mov.u32 %%r3, %%ntid.x;
	mov.u32 %%r4, %%tid.x;
	mad.lo.u32 %%r5, %%r2, %%r3, %%r4;
	setp.ge.u32 %%p1, %%r5, %%r1;
	@%%p1 bra DONE;
	cvta.to.global.u64 %%rd2, %%rd1;
	mul.wide.u32 %%rd3, %%r5, 4;
	add.s64 %%rd4, %%rd2, %%rd3;
	ld.global.f32 %%f1, [%%rd4];
	add.rn.f32 %%f2, %%f1, 0f3F800000;
	st.global.f32 [%%rd4], %%f2;
DONE:
	ret;
}
`

const addOneCUDA = `
extern "C" __global__ void add_one(float* x, unsigned n) {
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) x[i] += 1.0f;
}
`

func TestCUDAOnGPUModuleLoadsAndLaunchesAKernel(t *testing.T) {
	d := needCUDA(t)
	major, minor, err := d.ComputeCapability()
	must(t, err)
	arch := fmt.Sprintf("sm_%d%d", major, minor)
	t.Run("hand-written PTX", func(t *testing.T) {
		isa := "8.0" // knows sm_50 to sm_90
		if major >= 10 {
			isa = "8.8"
		}
		testAddOne(t, d, []byte(fmt.Sprintf(addOnePTX, isa, arch)))
	})
	t.Run("NVRTC", func(t *testing.T) {
		if onFake() {
			t.Skip("the fake driver loads PTX text only, not NVRTC's cubin")
		}
		if err := nvrtc.Load(); err != nil {
			t.Skipf("NVRTC not loadable: %v", err)
		}
		ptx, cubin, log, err := nvrtc.Compile(addOneCUDA, "add_one.cu", []string{"--gpu-architecture=" + arch})
		if err != nil {
			t.Fatalf("NVRTC: %v\n%s", err, log)
		}
		image := cubin
		if len(image) == 0 {
			image = ptx
		}
		testAddOne(t, d, image)
	})
	t.Run("refusals", func(t *testing.T) {
		cudaNoLeaks(t, d)
		if m, err := d.LoadModule(nil); !errors.Is(err, ErrInvalidArgument) || m != nil {
			t.Errorf("LoadModule(nil) = %v, %v", m, err)
		}
		if m, err := d.LoadModule([]byte("this is not PTX")); err == nil || m != nil {
			t.Errorf("LoadModule of garbage = %v, %v", m, err)
		}
	})
}

// testAddOne loads image, runs add_one twice over random floats in a
// poisoned buffer and checks every element, then that misuse is refused
// without touching the data.
func testAddOne(t *testing.T, d *Device, image []byte) {
	cudaNoLeaks(t, d)
	m, err := d.LoadModule(image)
	must(t, err)
	if _, err := m.Function("no_such_kernel"); err == nil {
		t.Error("Function of a missing kernel succeeded")
	}
	f, err := m.Function("add_one")
	must(t, err)
	const n, pad = 10007, 64 // n is no multiple of the block size
	r := rand.New(rand.NewPCG(51, 52))
	x := make([]float32, n+pad)
	for i := range x {
		if i < n {
			x[i] = float32(r.NormFloat64() * 1000)
		} else {
			x[i] = math.Float32frombits(0x7fc0dead)
		}
	}
	buf := mustAlloc(t, d, 4*(n+pad), false)
	sl := SliceOf[float32](buf)
	must(t, sl.CopyFrom(x, nil))
	s := mustStream(t, d)
	grid, block := [3]uint32{(n + 255) / 256, 1, 1}, [3]uint32{256, 1, 1}
	must(t, f.Launch(grid, block, 0, s, buf, uint32(n)))
	must(t, s.Synchronize()) // the nil stream is not ordered after s
	must(t, f.Launch(grid, block, 0, nil, sl, uint32(n)))
	want := make([]float32, len(x))
	for i := range x {
		want[i] = x[i]
		if i < n {
			want[i] = x[i] + 1 + 1
		}
	}
	check := func(what string) {
		t.Helper()
		got, err := sl.ToHost(nil)
		must(t, err)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: x[%d] = %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
	check("after two launches")

	freed := mustAlloc(t, d, 16, false)
	must(t, freed.Free())
	other := NewHostDevice()
	otherStream := mustStream(t, other)
	for name, launch := range map[string]func() error{
		"plain int":           func() error { return f.Launch(grid, block, 0, s, buf, n) },
		"zero block":          func() error { return f.Launch(grid, [3]uint32{0, 1, 1}, 0, s, buf, uint32(n)) },
		"negative shared":     func() error { return f.Launch(grid, block, -1, s, buf, uint32(n)) },
		"freed buffer":        func() error { return f.Launch(grid, block, 0, s, freed, uint32(n)) },
		"other device stream": func() error { return f.Launch(grid, block, 0, otherStream, buf, uint32(n)) },
	} {
		if err := launch(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("launch with %s: %v, want ErrInvalidArgument", name, err)
		}
	}
	must(t, s.Synchronize())
	check("after refused launches")
	must(t, m.Unload())
	if err := f.Launch(grid, block, 0, s, buf, uint32(n)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("launch after Unload: %v", err)
	}
	if _, err := m.Function("add_one"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Function after Unload: %v", err)
	}
	if err := m.Unload(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("second Unload: %v", err)
	}
	check("after Unload")
}

// TestCUDAOnGPUIPCAcrossFourProcesses shares one device buffer with four
// child processes: each checks its part of the exporter's data, opens the
// buffer three ways (the last two from the cache), writes its own part and
// closes; the exporter then checks every byte.
func TestCUDAOnGPUIPCAcrossFourProcesses(t *testing.T) {
	d := needCUDA(t)
	ipcAcrossFourProcesses(t, d, d.Alloc, false)
}

// ipcAcrossFourProcesses is the body of the four-process tests, on memory
// from alloc, whose handles are VMM ones when vmm.
func ipcAcrossFourProcesses(t *testing.T, d *Device, alloc func(int) (Buffer, error), vmm bool) {
	cudaNoLeaks(t, d)
	const procs, chunk, seed = 4, 1<<18 + 4096, 61
	buf, err := alloc(procs * chunk)
	must(t, err)
	defer func() { must(t, buf.Free()) }()
	orig := cudaRandom(seed, procs*chunk)
	must(t, CopyFromHost(buf, orig, nil))
	whole, err := buf.Export()
	must(t, err)
	if whole.VMM() != vmm {
		t.Fatalf("handle VMM() = %v, want %v", whole.VMM(), vmm)
	}
	text := func(h IPCHandle) string {
		b, err := h.MarshalText()
		must(t, err)
		return string(b)
	}
	children := make([]*cudaChild, procs)
	for r := range children {
		part, err := view(t, buf, r*chunk, chunk).Export()
		must(t, err)
		children[r] = startCUDAChild(t, "ipc-writer", "GCT_HANDLE="+text(whole), "GCT_PART="+text(part),
			fmt.Sprintf("GCT_RANK=%d", r), fmt.Sprintf("GCT_CHUNK=%d", chunk), fmt.Sprintf("GCT_SEED=%d", seed))
	}
	for _, c := range children {
		if got := c.next(t); got != "ok" {
			t.Errorf("child: %s", got)
		}
		c.wait(t)
	}
	got := readAll(t, buf, nil)
	for r := range procs {
		cudaSameBytes(t, fmt.Sprintf("part %d written by child %d", r, r), got[r*chunk:(r+1)*chunk], cudaRandom(seed+1+uint64(r), chunk))
	}

	// Opened in the exporting process, a handle is the memory itself.
	before := d.Stats()
	v, err := d.OpenIPC(whole)
	must(t, err)
	if v.Addr() != buf.Addr() || v.Len() != buf.Len() || d.Stats().Opened != before.Opened+1 {
		t.Errorf("open in the exporter: %d bytes at %#x, want %d at %#x; Stats %+v", v.Len(), v.Addr(), buf.Len(), buf.Addr(), d.Stats())
	}
	must(t, v.CloseIPC())

	// Driver bytes that name nothing are refused and leave nothing open:
	// from a process that is not there, and from this process's own
	// service (which knows no such allocation), as legacy and VMM bytes.
	node, err := localNode()
	must(t, err)
	token, err := serviceToken()
	must(t, err)
	for _, f := range []handleFields{
		{kind: CUDA, pid: 1, token: 0x5eed, size: 64, uuid: d.UUID(), node: node},
		{kind: CUDA, pid: uint32(os.Getpid()), token: token, size: 64, uuid: d.UUID(), node: node},
		{kind: CUDA, vmm: true, pid: 1, token: 0x5eed, size: 64, uuid: d.UUID(), node: node},
	} {
		if f.vmm {
			f.drv = vmmIPC{id: 99, size: 1 << 20}.bytes()
		} else {
			copy(f.drv[:], cudaRandom(62, 64))
		}
		if b, err := d.OpenIPC(f.seal()); err == nil {
			b.CloseIPC()
			t.Errorf("a handle of nothing opened: %+v", f)
		} else if !errors.Is(err, ErrBadHandle) {
			t.Errorf("a handle of nothing: %v, want ErrBadHandle", err)
		}
	}
	if d.Stats().Opened != before.Opened {
		t.Errorf("Stats after the refused open: %+v", d.Stats())
	}
}

func cudaEnvInt(name string) (int, error) {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %v", name, os.Getenv(name), err)
	}
	return v, nil
}

func cudaEnvHandle(name string) (IPCHandle, error) {
	var h IPCHandle
	return h, h.UnmarshalText([]byte(os.Getenv(name)))
}

// cudaChildIPCWriter is one of the four processes of
// TestCUDAOnGPUIPCAcrossFourProcesses.
func cudaChildIPCWriter() (err error) {
	var v [3]int
	for i, name := range []string{"GCT_RANK", "GCT_CHUNK", "GCT_SEED"} {
		if v[i], err = cudaEnvInt(name); err != nil {
			return err
		}
	}
	rank, chunk, seed := v[0], v[1], uint64(v[2])
	wholeH, err := cudaEnvHandle("GCT_HANDLE")
	if err != nil {
		return err
	}
	partH, err := cudaEnvHandle("GCT_PART")
	if err != nil {
		return err
	}
	d, err := Open("cuda:0", 0)
	if err != nil {
		return err
	}
	whole, err := d.OpenIPC(wholeH)
	if err != nil {
		return fmt.Errorf("first open: %w", err)
	}
	if whole.Len() != 4*chunk {
		return fmt.Errorf("opened %d bytes, want %d", whole.Len(), 4*chunk)
	}
	mine, _ := whole.Slice(rank*chunk, chunk)
	got := make([]byte, chunk)
	if err := CopyToHost(got, mine, nil); err != nil {
		return err
	}
	if want := cudaRandom(seed, 4*chunk)[rank*chunk : (rank+1)*chunk]; !bytes.Equal(got, want) {
		return fmt.Errorf("part %d does not hold the exporter's bytes", rank)
	}
	// Both later opens must come from the cache: the driver maps a handle
	// once per process (the fake refuses a second cuIpcOpenMemHandle).
	part, err := d.OpenIPC(partH)
	if err != nil {
		return fmt.Errorf("open of the part: %w", err)
	}
	again, err := d.OpenIPC(wholeH)
	if err != nil {
		return fmt.Errorf("second open: %w", err)
	}
	if part.Addr() != whole.Addr()+uintptr(rank*chunk) || again.Addr() != whole.Addr() || d.Stats().Opened != 3 {
		return fmt.Errorf("cached opens at %#x and %#x, first at %#x; Stats %+v", part.Addr(), again.Addr(), whole.Addr(), d.Stats())
	}
	s, err := d.NewStream()
	if err != nil {
		return err
	}
	local, err := d.Alloc(chunk)
	if err != nil {
		return err
	}
	want := cudaRandom(seed+1+uint64(rank), chunk)
	if err := CopyFromHost(local, want, s); err != nil {
		return err
	}
	if err := CopyN(part, local, chunk, s); err != nil { // device to peer memory, on a stream
		return err
	}
	if err := CopyToHost(got, mine, s); err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return errors.New("my part does not read back what I wrote")
	}
	errs := []error{again.CloseIPC(), part.CloseIPC(), whole.CloseIPC(), local.Free(), s.Destroy()}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := whole.CloseIPC(); !errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("second CloseIPC: %v", err)
	}
	if st := d.Stats(); st != (Stats{}) {
		return fmt.Errorf("Stats at the end: %+v", st)
	}
	cudaReport("ok")
	return nil
}

// cudaChildIPCHold allocates GCT_SIZE bytes, exports them, writes the handle
// and holds the memory until its stdin closes.
func cudaChildIPCHold() error {
	n, err := cudaEnvInt("GCT_SIZE")
	if err != nil {
		return err
	}
	d, err := Open("cuda:0", 0)
	if err != nil {
		return err
	}
	b, err := d.Alloc(n)
	if err != nil {
		return err
	}
	defer b.Free()
	h, err := b.Export()
	if err != nil {
		return err
	}
	text, err := h.MarshalText()
	if err != nil {
		return err
	}
	cudaReport("%s", text)
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// cudaChildIPCOpenBench times, in a fresh process, the first open of
// GCT_HANDLE, GCT_REPS opens after a close, and GCT_REPS opens while one is
// held (cache hits).
func cudaChildIPCOpenBench() error {
	reps, err := cudaEnvInt("GCT_REPS")
	if err != nil {
		return err
	}
	h, err := cudaEnvHandle("GCT_HANDLE")
	if err != nil {
		return err
	}
	d, err := Open("cuda:0", 0) // context creation is not part of the open
	if err != nil {
		return err
	}
	t0 := time.Now()
	v, err := d.OpenIPC(h)
	first := time.Since(t0)
	if err != nil {
		return err
	}
	if err := v.CloseIPC(); err != nil {
		return err
	}
	var reopen, cached time.Duration
	for range reps {
		t0 := time.Now()
		v, err := d.OpenIPC(h)
		reopen += time.Since(t0)
		if err != nil {
			return err
		}
		if err := v.CloseIPC(); err != nil {
			return err
		}
	}
	hold, err := d.OpenIPC(h)
	if err != nil {
		return err
	}
	for range reps {
		t0 := time.Now()
		v, err := d.OpenIPC(h)
		cached += time.Since(t0)
		if err != nil {
			return err
		}
		if err := v.CloseIPC(); err != nil {
			return err
		}
	}
	if err := hold.CloseIPC(); err != nil {
		return err
	}
	cudaReport("%d %d %d", first.Nanoseconds(), reopen.Nanoseconds()/int64(reps), cached.Nanoseconds()/int64(reps))
	return nil
}

// BenchmarkCUDAIPCOpen reports what opening a handle costs in another
// process: the first open there (first-open-ns), an open after the last
// view closed (reopen-ns) and an open while one is held (cached-open-ns).
// One iteration is one fresh process, so ns/op includes starting it.
func BenchmarkCUDAIPCOpen(b *testing.B) {
	d := needCUDA(b)
	buf := mustAlloc(b, d, 64<<20, false)
	h, err := buf.Export()
	must(b, err)
	text, err := h.MarshalText()
	must(b, err)
	var first, reopen, cached float64
	for range b.N {
		c := startCUDAChild(b, "ipc-open-bench", "GCT_HANDLE="+string(text), "GCT_REPS=100")
		var f, r, k float64
		if _, err := fmt.Sscan(c.next(b), &f, &r, &k); err != nil {
			b.Fatal(err)
		}
		c.wait(b)
		first, reopen, cached = first+f, reopen+r, cached+k
	}
	n := float64(b.N)
	b.ReportMetric(first/n, "first-open-ns")
	b.ReportMetric(reopen/n, "reopen-ns")
	b.ReportMetric(cached/n, "cached-open-ns")
}

// BenchmarkCUDACopy compares a device-to-device copy into a buffer another
// process exported and this one opened with the same copy between two
// local buffers. MB/s and GB/s (by the device's clock) count the bytes
// copied once, not read plus written.
func BenchmarkCUDACopy(b *testing.B) {
	d := needCUDA(b)
	for _, n := range []int{64 << 20, 1 << 30} {
		src, err := d.Alloc(n)
		must(b, err)
		local, err := d.Alloc(n)
		must(b, err)
		must(b, Memset(src, 1, nil))
		c := startCUDAChild(b, "ipc-hold", fmt.Sprintf("GCT_SIZE=%d", n))
		var h IPCHandle
		must(b, h.UnmarshalText([]byte(c.next(b))))
		peer, err := d.OpenIPC(h)
		must(b, err)
		for _, dst := range []struct {
			name string
			buf  Buffer
		}{{"local", local}, {"opened-peer", peer}} {
			b.Run(fmt.Sprintf("%s/%dMiB", dst.name, n>>20), func(b *testing.B) {
				benchCopy(b, d, n, func(s *Stream) error { return CopyN(dst.buf, src, n, s) })
			})
		}
		must(b, errors.Join(peer.CloseIPC(), src.Free(), local.Free()))
		c.wait(b)
	}
}

// BenchmarkCUDAHostCopy compares copies between the device and pinned host
// memory (asynchronous, on a stream) with copies of Go (pageable) memory.
func BenchmarkCUDAHostCopy(b *testing.B) {
	d := needCUDA(b)
	const n = 64 << 20
	dev := mustAlloc(b, d, n, false)
	pin := mustAlloc(b, d, n, true)
	goMem := make([]byte, n)
	for _, c := range []struct {
		name string
		op   func(s *Stream) error
	}{
		{"pinned-h2d", func(s *Stream) error { return CopyN(dev, pin, n, s) }},
		{"pinned-d2h", func(s *Stream) error { return CopyN(pin, dev, n, s) }},
		{"pageable-h2d", func(s *Stream) error { return CopyFromHost(dev, goMem, s) }},
		{"pageable-d2h", func(s *Stream) error { return CopyToHost(goMem, dev, s) }},
	} {
		b.Run(fmt.Sprintf("%s/%dMiB", c.name, n>>20), func(b *testing.B) { benchCopy(b, d, n, c.op) })
	}
}

// benchCopy runs op b.N times on one stream and reports MB/s by the wall
// clock (b.SetBytes), waiting for the last copy inside the timed part, and
// GB/s by the device's events.
func benchCopy(b *testing.B, d *Device, n int, op func(s *Stream) error) {
	s, err := d.NewStream()
	must(b, err)
	start, err := d.NewEvent()
	must(b, err)
	end, err := d.NewEvent()
	must(b, err)
	defer func() { must(b, errors.Join(s.Destroy(), start.Destroy(), end.Destroy())) }()
	must(b, op(s)) // the first copy pays for page mapping and peer setup
	must(b, s.Synchronize())
	b.SetBytes(int64(n))
	b.ResetTimer()
	must(b, start.Record(s))
	for range b.N {
		if err := op(s); err != nil {
			b.Fatal(err)
		}
	}
	must(b, end.Record(s))
	must(b, s.Synchronize())
	b.StopTimer()
	el, err := Elapsed(start, end)
	must(b, err)
	if el > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/el.Seconds()/1e9, "GB/s")
	}
}
