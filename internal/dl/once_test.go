package dl

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestOnceLoadsOnceRetriesFailuresAndResets(t *testing.T) {
	var o Once
	boom := errors.New("boom")
	var calls atomic.Int32
	fail := func() (*Library, error) { calls.Add(1); return nil, boom }
	ok := func() (*Library, error) { calls.Add(1); return &Library{Name: "fake"}, nil }
	if err := o.Load(fail); !errors.Is(err, boom) || o.Loaded() {
		t.Fatalf("failed load: %v, loaded %v", err, o.Loaded())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := o.Load(ok); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if calls.Load() != 2 || !o.Loaded() {
		t.Fatalf("%d opens after a failure and 8 concurrent loads, loaded %v; want 2, true", calls.Load(), o.Loaded())
	}
	cleared := 0
	o.Reset(func() { cleared++ })
	o.Reset(func() { cleared++ }) // nothing loaded: clear not called
	if cleared != 1 || o.Loaded() {
		t.Fatalf("clear called %d times, loaded %v", cleared, o.Loaded())
	}
	if err := o.Load(ok); err != nil || calls.Load() != 3 {
		t.Fatalf("load after reset: %v, %d opens", err, calls.Load())
	}
}
