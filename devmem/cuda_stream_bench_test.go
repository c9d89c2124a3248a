//go:build cgo

package devmem

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkCUDAStreamHostCost is the host time of the stream calls every
// stream-ordered operation makes, each call returning before the GPU is
// done: Enqueue of a function that calls nothing (what a backend adds around
// its library call, as NCCL's enqueue does), an event Record (a timed
// benchmark records two an iteration), and a HostFunc with the Synchronize
// that follows it (a stream-ordered MPI call waited for). The stream is
// synchronized every 256 calls, so its queue stays short. The deferred cases
// are the same host work through HostFuncDeferred, hostwait-deferred a
// wait for work under way (HostWait), and query-idle the Query
// a stream-ordered Send or Recv makes first. Each case also
// reports hand-backs/op: how often a Synchronize slept while the stream's
// goroutine ran host work, to be woken when it was done.
func BenchmarkCUDAStreamHostCost(b *testing.B) {
	d := needCUDA(b)
	s := mustStream(b, d)
	cs := s.impl.(*cudaStream)
	ev := mustEvent(b, d)
	src, dst := mustAlloc(b, d, 64, false), mustAlloc(b, d, 64, false)
	hostWork := func(d time.Duration) func() error {
		return func() error { busy(d); return nil }
	}
	// handBack is the time from the end of host work the stream's
	// goroutine ran to the return of the Synchronize that waited for it.
	var handBack time.Duration
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"enqueue-nothing", func() error { return s.enqueue(func(uintptr) error { return nil }) }},
		{"event-record", func() error { return ev.Record(s) }},
		{"hostfunc-then-synchronize", func() error {
			return errors.Join(s.HostFunc(func() error { return nil }), s.Synchronize())
		}},
		// Host work of a stream-ordered 8-byte MPI_Send waited for at once
		// (c.Send(...); s.Synchronize()): the caller should run it itself,
		// so the time above 1 µs is the stream's own cost, no hand-back.
		{"hostfunc-of-1us-then-synchronize", func() error {
			return errors.Join(s.HostFunc(hostWork(time.Microsecond)), s.Synchronize())
		}},
		// The same with 2 µs of the caller's own work between the two calls
		// (a backend's bookkeeping after it queued the call): the stream's
		// goroutine may have woken by the time Synchronize comes.
		{"hostfunc-of-1us-2us-then-synchronize", func() error {
			err := s.HostFunc(hostWork(time.Microsecond))
			busy(2 * time.Microsecond)
			return errors.Join(err, s.Synchronize())
		}},
		// The same with 10 µs of the caller's own work after it (waiting
		// for the peer's reply in a ping-pong): the stream's goroutine has
		// ended by the next HostFunc, which starts another. The time above
		// 11 µs includes that start.
		{"hostfunc-of-1us-then-synchronize-each-10us", func() error {
			err := errors.Join(s.HostFunc(hostWork(time.Microsecond)), s.Synchronize())
			busy(10 * time.Microsecond)
			return err
		}},
		// The same two as deferred host work (a stream-ordered receive
		// posted at once, its wait left for the Synchronize): no goroutine
		// starts, so against the hostfunc rows this is what the deferral
		// saves.
		{"deferred-of-1us-then-synchronize", func() error {
			return errors.Join(s.hostFuncDeferred(hostWork(time.Microsecond)), s.Synchronize())
		}},
		{"deferred-of-1us-then-synchronize-each-10us", func() error {
			err := errors.Join(s.hostFuncDeferred(hostWork(time.Microsecond)), s.Synchronize())
			busy(10 * time.Microsecond)
			return err
		}},
		// A wait for MPI requests already posted, left for the Synchronize
		// as the cudaaware backend queues a small message's (HostWait,
		// deferred): the poll says not yet, so the Synchronize waits.
		{"hostwait-deferred-of-1us-then-synchronize", func() error {
			poll := func() (bool, error) { return false, nil }
			return errors.Join(s.hostWait(hostWork(time.Microsecond), poll, true), s.Synchronize())
		}},
		// Query of a stream with nothing pending: what a stream-ordered
		// Send or Recv of the cudaaware backend asks before it posts at once.
		{"query-idle", func() error {
			_, err := s.Query()
			return err
		}},
		// A device copy queued on the stream, then waited for: what the
		// mpi backend's IPC path does for every message it receives (the
		// copy from the sender's buffer, then its copy stream's
		// Synchronize), two calls of one C call each.
		{"copy-then-synchronize", func() error {
			return errors.Join(CopyN(dst, src, 64, s), s.Synchronize())
		}},
		// Host work of 20 µs that the stream's goroutine has started when
		// Synchronize comes (a stream-ordered MPI_Recv waiting for its
		// message, with the caller busy meanwhile): the hand-back-ns/op
		// metric is the time from its end to Synchronize's return.
		{"hostfunc-of-20us-started-then-synchronize", func() error {
			var started atomic.Bool
			var ended time.Time
			err := s.HostFunc(func() error {
				started.Store(true)
				busy(20 * time.Microsecond)
				ended = time.Now()
				return nil
			})
			for !started.Load() {
				runtime.Gosched()
			}
			err = errors.Join(err, s.Synchronize())
			handBack += time.Since(ended) // ended is written before Synchronize returns
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			handBack = 0
			before := cs.handBacks.Load()
			i := 0
			for b.Loop() {
				must(b, c.op())
				if i++; i%256 == 0 {
					must(b, s.Synchronize())
				}
			}
			must(b, s.Synchronize())
			b.ReportMetric(float64(cs.handBacks.Load()-before)/float64(b.N), "hand-backs/op")
			if handBack > 0 {
				b.ReportMetric(float64(handBack.Nanoseconds())/float64(b.N), "hand-back-ns/op")
			}
		})
	}
}
