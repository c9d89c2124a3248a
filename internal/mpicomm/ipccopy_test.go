package mpicomm

import (
	"bytes"
	"errors"
	"math/rand"
	"runtime"
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
	wg.Go(func() { errs[0] = b.copy(jobs[0].dst, jobs[0].src, n) }) // the first synchronize, held
	// Wait until the first copier synchronizes.
	for {
		b.mu.Lock()
		s := b.syncing
		b.mu.Unlock()
		if s {
			break
		}
		runtime.Gosched()
	}
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

// A failure on the stream is the error of every copy its synchronize
// covered, and not of the copies waited for by the next one.
func TestCopyBatchFailureIsTheSynchronizesOwn(t *testing.T) {
	d, b := batchFixture(t)
	const k, n = 8, 4096
	boom := errors.New("boom")
	gate := make(chan struct{})
	if err := b.s.HostFunc(func() error { <-gate; return boom }); err != nil {
		t.Fatal(err)
	}
	src, want := filled(t, d, 1, n)
	first, _ := filled(t, d, 2, n)
	var firstErr error
	var wg sync.WaitGroup
	wg.Go(func() { firstErr = b.copy(first, src, n) })
	for {
		b.mu.Lock()
		s := b.syncing
		b.mu.Unlock()
		if s {
			break
		}
		runtime.Gosched()
	}
	dsts := make([]devmem.Buffer, k)
	errs := make([]error, k)
	for i := range dsts {
		dsts[i], _ = filled(t, d, int64(10+i), n)
		wg.Go(func() { errs[i] = b.copy(dsts[i], src, n) })
	}
	waitIssued(b, k)
	close(gate)
	wg.Wait()
	if !errors.Is(firstErr, boom) {
		t.Errorf("the copy behind the failing work: %v, want %v", firstErr, boom)
	}
	for i, dst := range dsts {
		if errs[i] != nil {
			t.Errorf("copy %d, issued after the failing synchronize began: %v", i, errs[i])
			continue
		}
		got := make([]byte, n)
		if err := devmem.CopyToHost(got, dst, nil); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("copy %d: the destination differs from its source", i)
		}
	}
}
