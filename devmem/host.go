package devmem

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// hostDriver simulates a device in host memory. Device memory is a memfd
// mapping, so that it can be exported to other processes of the node; pinned
// memory is an anonymous mapping. Streams run their work in order, one task
// after another, each on a goroutine of its own.
type hostDriver struct {
	dev *Device
}

func hostUUID(n int64) [16]byte {
	host, _ := os.Hostname()
	var b [16]byte
	h := sha256.New()
	fmt.Fprintf(h, "gpucomm host device %s %d %d", host, os.Getpid(), n)
	copy(b[:], h.Sum(nil))
	return b
}

// sharedMem is host-driver memory that other processes can map.
type sharedMem struct {
	fd  int
	pid int
}

func (h *hostDriver) alloc(n int, pinned bool) (*allocation, error) {
	if n == 0 {
		return &allocation{host: []byte{}, release: func() error { return nil }}, nil
	}
	if pinned {
		mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			return nil, fmt.Errorf("devmem: host pinned alloc of %d bytes: %w", n, err)
		}
		return &allocation{host: mem, addr: addrOf(mem), release: func() error { return unix.Munmap(mem) }}, nil
	}
	mem, fd, err := memfdMap(n)
	if err != nil {
		return nil, fmt.Errorf("devmem: host alloc of %d bytes: %w", n, err)
	}
	release := func() error {
		return errors.Join(unix.Munmap(mem), unix.Close(fd))
	}
	return &allocation{host: mem, addr: addrOf(mem), release: release, shared: &sharedMem{fd: fd, pid: os.Getpid()}}, nil
}

func (h *hostDriver) copy(dst, src Buffer, n int, s *Stream) error {
	if s == nil { // no closure: a staged collective's copies on no stream allocate nothing
		hostCopy(dst, src, n)
		return nil
	}
	return s.impl.hostFunc(func() error {
		hostCopy(dst, src, n)
		return nil
	})
}

func hostCopy(dst, src Buffer, n int) {
	d, _ := dst.Bytes()
	v, _ := src.Bytes()
	copy(d[:n], v[:n])
}

func (h *hostDriver) copyFromHost(dst Buffer, src []byte, s *Stream) error {
	return runSync(s, func() error {
		d, _ := dst.Bytes()
		copy(d, src)
		return nil
	})
}

func (h *hostDriver) copyToHost(dst []byte, src Buffer, s *Stream) error {
	return runSync(s, func() error {
		v, _ := src.Bytes()
		copy(dst, v)
		return nil
	})
}

func (h *hostDriver) memset(dst Buffer, v byte, s *Stream) error {
	return onStream(s, func() error {
		d, _ := dst.Bytes()
		for i := range d {
			d[i] = v
		}
		return nil
	})
}

func (h *hostDriver) newStream() (streamImpl, error) {
	s := &hostStream{}
	s.init(nil)
	return s, nil
}

func (h *hostDriver) newEvent() (eventImpl, error) { return &hostEvent{}, nil }

// synchronize drains the queue of every live stream of the device, as the
// cuda driver's does; a nil stream's work is done when its call returns.
func (h *hostDriver) synchronize() error {
	var errs []error
	for _, q := range liveQueues(h.dev) {
		errs = append(errs, q.flush())
	}
	return errors.Join(errs...)
}

// onStream queues fn on s, or runs it now for a nil stream.
func onStream(s *Stream, fn func() error) error {
	if s == nil {
		return fn()
	}
	return s.impl.hostFunc(fn)
}

// runSync runs fn in stream order on s and waits for it, returning its error.
func runSync(s *Stream, fn func() error) error {
	if s == nil {
		return fn()
	}
	ch := make(chan error, 1)
	if err := s.impl.hostFunc(func() error { ch <- fn(); return nil }); err != nil {
		return err
	}
	return <-ch
}

// hostStream is a queue of host work (hostQueue) and nothing else: its
// tasks run one at a time, in order, each on a drain goroutine of the
// stream's or on the goroutine of a Synchronize that finds it not started.
type hostStream struct {
	hostQueue
}

// safely turns a panic in queued work into an error, as a GPU turns a fault
// into a sticky error instead of killing the host.
func safely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("devmem: stream task panicked: %v", r)
		}
	}()
	return fn()
}

func (s *hostStream) synchronize() error { return s.flush() }

// query reports whether no host work is queued or running.
func (s *hostStream) query() (bool, error) {
	s.mu.Lock()
	busy := s.busyLocked()
	s.mu.Unlock()
	return !busy, nil
}

func (s *hostStream) waitEvent(e eventImpl) error {
	m := e.(*hostEvent).last()
	return s.hostFunc(func() error { <-m.done; return nil })
}

// task runs fn as a host function, with no handles: a host stream has no
// GPU work for it to skip waiting for.
func (s *hostStream) task(fn func(ctx, handle uintptr) error) error {
	return s.hostFunc(func() error { return fn(0, 0) })
}

func (s *hostStream) destroy() error { return s.flush() }

// hostEvent keeps the mark of its latest Record.
type hostEvent struct {
	mu sync.Mutex
	m  *mark
}

type mark struct {
	done chan struct{}
	at   time.Time // written before done is closed
}

var reached = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (e *hostEvent) last() *mark {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		return &mark{done: reached} // never recorded: counts as reached, as in CUDA
	}
	return e.m
}

func (e *hostEvent) record(s streamImpl) error {
	m := &mark{done: make(chan struct{})}
	e.mu.Lock()
	e.m = m
	e.mu.Unlock()
	if s == nil {
		m.at = time.Now()
		close(m.done)
		return nil
	}
	return s.hostFunc(func() error { m.at = time.Now(); close(m.done); return nil })
}

func (e *hostEvent) synchronize() error { <-e.last().done; return nil }

func (e *hostEvent) query() (bool, error) {
	select {
	case <-e.last().done:
		return true, nil
	default:
		return false, nil
	}
}

func (e *hostEvent) elapsedSince(start eventImpl) (time.Duration, error) {
	a, b := start.(*hostEvent).last(), e.last()
	for _, m := range []*mark{a, b} {
		select {
		case <-m.done:
			if m.at.IsZero() {
				return 0, fmt.Errorf("devmem: elapsed time of an event never recorded: %w", ErrInvalidArgument)
			}
		default:
			return 0, fmt.Errorf("devmem: elapsed time of an event not yet reached: %w", ErrInvalidArgument)
		}
	}
	return b.at.Sub(a.at), nil
}

func (e *hostEvent) destroy() error { return nil }
