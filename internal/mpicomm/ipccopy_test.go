package mpicomm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// batchFixture is a host device with a copy batch on a stream of its own.
func batchFixture(t *testing.T) (*devmem.Device, *copyBatch) {
	t.Helper()
	d := devmem.NewHostDevice()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return d, newCopyBatch(s)
}

// filled is a buffer of n bytes of seeded random data, and the data.
func filled(t *testing.T, d *devmem.Device, seed int64, n int) (devmem.Buffer, []byte) {
	t.Helper()
	data := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(data)
	b, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	if err := devmem.CopyFromHost(b, data, nil); err != nil {
		t.Fatal(err)
	}
	return b, data
}

// waitIssued waits until k copies have joined the batch's open generation.
func waitIssued(b *copyBatch, k int) {
	for {
		b.mu.Lock()
		n := b.cur.n
		b.mu.Unlock()
		if n >= k {
			return
		}
		runtime.Gosched()
	}
}

// waitSyncing waits until a copier synchronizes the batch's stream.
func waitSyncing(b *copyBatch) {
	for {
		b.mu.Lock()
		s := b.syncing
		b.mu.Unlock()
		if s {
			return
		}
		runtime.Gosched()
	}
}

// Copies issued while one synchronize runs are waited for by one more, not
// one each, and each lands whole in its own buffer. The stream is held by a
// host function until every later copy is issued.
func TestCopyBatchWaitsForCopiesTogether(t *testing.T) {
	d, b := batchFixture(t)
	const k, n = 16, 1 << 16
	gate := make(chan struct{})
	if err := b.s.HostFunc(func() error { <-gate; return nil }); err != nil {
		t.Fatal(err)
	}
	type job struct {
		src, dst devmem.Buffer
		want     []byte
	}
	jobs := make([]job, k+1)
	for i := range jobs {
		jobs[i].src, jobs[i].want = filled(t, d, int64(i+1), n)
		jobs[i].dst, _ = filled(t, d, int64(1000+i), n) // poisoned: other data
	}
	errs := make([]error, k+1)
	var wg sync.WaitGroup
	// The first copy's synchronize, held by the gate.
	wg.Go(func() { errs[0] = b.copy(jobs[0].dst, jobs[0].src, n) })
	waitSyncing(b)
	for i := 1; i <= k; i++ {
		wg.Go(func() { errs[i] = b.copy(jobs[i].dst, jobs[i].src, n) })
	}
	waitIssued(b, k)
	close(gate)
	wg.Wait()
	for i, j := range jobs {
		if errs[i] != nil {
			t.Fatalf("copy %d: %v", i, errs[i])
		}
		got := make([]byte, n)
		if err := devmem.CopyToHost(got, j.dst, nil); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, j.want) {
			t.Errorf("copy %d: the destination differs from its source", i)
		}
	}
	if b.syncs != 2 {
		t.Errorf("%d copies, the last %d issued during the first's synchronize, took %d synchronizes, want 2", k+1, k, b.syncs)
	}
}

// holdFirst queues fn on the batch's stream behind a gate, starts a copy
// whose synchronize runs into it, and returns once that synchronize is
// under way, with the gate and the copy's result.
func holdFirst(t *testing.T, d *devmem.Device, b *copyBatch, fn func() error) (gate chan struct{}, first func() error) {
	t.Helper()
	gate = make(chan struct{})
	if err := b.s.HostFunc(func() error { <-gate; return fn() }); err != nil {
		t.Fatal(err)
	}
	src, _ := filled(t, d, 1, 64)
	dst, _ := filled(t, d, 2, 64)
	done := make(chan error, 1)
	go func() { done <- b.copy(dst, src, 64) }()
	waitSyncing(b)
	return gate, func() error { return <-done }
}

// A failure on the stream fails every copy a synchronize that met it may
// have covered: its own and, as a synchronize on the host device also runs
// the copies issued while it is under way, those too, whether the failing
// work came before them or among them. None of them is reported done (the
// receiver would acknowledge a copy that never happened); a copy issued
// afterwards is, and lands whole.
func TestCopyBatchFailureFailsEveryCopyItMayHaveCovered(t *testing.T) {
	d, b := batchFixture(t)
	const k, n = 8, 4096
	boom := errors.New("boom")
	src, want := filled(t, d, 3, n)
	for _, among := range []bool{false, true} {
		fails := func() error { return boom }
		if among { // the failing work is queued after the first synchronize began
			fails = func() error { return nil }
		}
		gate, first := holdFirst(t, d, b, fails)
		if among {
			if err := b.s.HostFunc(func() error { return boom }); err != nil {
				t.Fatal(err)
			}
		}
		errs := make([]error, k)
		var wg sync.WaitGroup
		for i := range errs {
			dst, _ := filled(t, d, int64(10+i), n)
			wg.Go(func() { errs[i] = b.copy(dst, src, n) })
		}
		waitIssued(b, k)
		close(gate)
		wg.Wait()
		if err := first(); !errors.Is(err, boom) {
			t.Errorf("failure among later copies %v: the first copy's synchronize met the failure but returned %v", among, err)
		}
		for i, err := range errs {
			if !errors.Is(err, boom) {
				t.Errorf("failure among later copies %v: copy %d, issued while the failing synchronize ran, returned %v, want %v", among, i, err, boom)
			}
		}
		after, _ := filled(t, d, 99, n)
		if err := b.copy(after, src, n); err != nil {
			t.Fatalf("failure among later copies %v: a copy issued after the failure: %v", among, err)
		}
		got := make([]byte, n)
		if err := devmem.CopyToHost(got, after, nil); err != nil || !bytes.Equal(got, want) {
			t.Errorf("failure among later copies %v: the copy after the failure differs from its source (%v)", among, err)
		}
	}
}

// A synchronize that panics is every waiter's error, and the batch goes on.
func TestCopyBatchPanicIsAnError(t *testing.T) {
	d, b := batchFixture(t)
	gate, first := holdFirst(t, d, b, func() error { return nil })
	// A host function's panic is an error already (devmem's safely); a
	// panic out of the stream's synchronize itself is what the batch
	// recovers: the wait is swapped for one that panics, once.
	close(gate)
	if err := first(); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.wait = func() error { b.wait = b.s.Synchronize; panic("driver fault") }
	b.mu.Unlock()
	src, want := filled(t, d, 5, 64)
	dst, _ := filled(t, d, 6, 64)
	if err := b.copy(dst, src, 64); err == nil || !strings.Contains(err.Error(), "panicked: driver fault") {
		t.Fatalf("a synchronize that panicked: %v, want an error saying so", err)
	}
	if b.syncing {
		t.Fatal("the batch still counts a synchronize under way")
	}
	if err := b.copy(dst, src, 64); err != nil {
		t.Fatalf("the copy after a synchronize that panicked: %v", err)
	}
	got := make([]byte, 64)
	if err := devmem.CopyToHost(got, dst, nil); err != nil || !bytes.Equal(got, want) {
		t.Errorf("the copy after a synchronize that panicked differs from its source (%v)", err)
	}
}

// A window's copies (ipcWindow): issued one after another, then awaited in
// turn, they take one synchronize, the first await's, and each lands whole.
// A copy issued while another goroutine's synchronize is under way joins
// the next generation: awaiting it makes a second synchronize, not the
// running one's report.
func TestCopyBatchIssueThenAwait(t *testing.T) {
	d, b := batchFixture(t)
	const k, n = 6, 1 << 12
	srcs, dsts := make([]devmem.Buffer, k), make([]devmem.Buffer, k)
	wants := make([][]byte, k)
	gens := make([]*copyGen, k)
	for i := range k {
		srcs[i], wants[i] = filled(t, d, int64(200+i), n)
		dsts[i], _ = filled(t, d, int64(300+i), n)
		g, err := b.issue(dsts[i], srcs[i], n)
		if err != nil {
			t.Fatal(err)
		}
		gens[i] = g
	}
	for i, g := range gens {
		if err := b.await(g); err != nil {
			t.Fatalf("await %d: %v", i, err)
		}
	}
	if b.syncs != 1 {
		t.Errorf("%d copies issued, then awaited in turn, took %d synchronizes, want 1", k, b.syncs)
	}
	check := func(what string, dst devmem.Buffer, want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		if err := devmem.CopyToHost(got, dst, nil); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: the destination differs from its source (%v)", what, err)
		}
	}
	for i := range k {
		check(fmt.Sprintf("copy %d", i), dsts[i], wants[i])
	}

	gate, first := holdFirst(t, d, b, func() error { return nil })
	src, want := filled(t, d, 400, n)
	dst, _ := filled(t, d, 401, n)
	g, err := b.issue(dst, src, n)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	done := g.done
	b.mu.Unlock()
	close(gate)
	if err := first(); err != nil {
		t.Fatal(err)
	}
	if done {
		t.Fatal("a copy issued during a synchronize was reported done before that synchronize ended")
	}
	syncs := b.syncs
	if err := b.await(g); err != nil {
		t.Fatal(err)
	}
	if b.syncs != syncs+1 {
		t.Errorf("awaiting a copy issued during another's synchronize made %d synchronizes, want 1 of its own", b.syncs-syncs)
	}
	check("the copy issued during a synchronize", dst, want)
}
