package devmem

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Stream is an ordered queue of work on one device. Streams come from
// Device.NewStream. A nil *Stream is valid wherever a stream is taken and
// means "now" (see the package documentation); a zero Stream that
// NewStream did not make is refused by every method that returns an error,
// with one wrapping ErrInvalidArgument, and has no Device.
type Stream struct {
	dev       *Device
	impl      streamImpl
	destroyed atomic.Bool
}

// NewStream makes a stream on d.
func (d *Device) NewStream() (*Stream, error) {
	if err := d.usable("NewStream"); err != nil {
		return nil, err
	}
	impl, err := d.drv.newStream()
	if err != nil {
		return nil, err
	}
	addLive(impl.hq(), d)
	d.stats.streams.Add(1)
	return &Stream{dev: d, impl: impl}, nil
}

// Device is the stream's device: nil for a nil Stream ("now", on no device
// in particular) and for a zero Stream.
func (s *Stream) Device() *Device {
	if s == nil {
		return nil
	}
	return s.dev
}

// check accepts a nil stream (meaning "now") or a live stream of dev.
func (s *Stream) check(dev *Device) error {
	if s == nil {
		return nil
	}
	if s.impl == nil {
		return fmt.Errorf("devmem: a zero Stream (streams come from Device.NewStream): %w", ErrInvalidArgument)
	}
	if s.destroyed.Load() {
		return fmt.Errorf("devmem: stream was destroyed: %w", ErrInvalidArgument)
	}
	if dev != nil && s.dev != dev {
		return fmt.Errorf("devmem: stream of %v used with %v: %w", s.dev, dev, ErrInvalidArgument)
	}
	return nil
}

// Check returns an error unless s is nil or a live stream of dev.
func (s *Stream) Check(dev *Device) error { return s.check(dev) }

// HostFunc runs fn on the host once all earlier work on s is done; later work
// on s waits for it. HostFunc returns at once: fn runs on a goroutine of the
// stream's (or, on the cuda driver, on the goroutine of a Synchronize of s
// that finds it not started yet), and fn's error is returned by the next
// Synchronize of s. On the
// cuda driver, work queued on s while fn waits or runs is handed to CUDA
// when fn returns (the GPU never waits for the host), and events recorded
// on s count as not reached until then. fn must not wait for s itself. With
// a nil stream fn runs now and its error is returned here. A nil fn is
// refused at the call, with an error wrapping ErrInvalidArgument, and
// queues nothing.
func (s *Stream) HostFunc(fn func() error) error {
	if fn == nil {
		return fmt.Errorf("devmem: HostFunc of a nil function: %w", ErrInvalidArgument)
	}
	if s == nil {
		return fn()
	}
	if err := s.check(nil); err != nil {
		return err
	}
	return s.impl.hostFunc(fn)
}

// hostCall is HostFunc for a call that runs even when the stream's work
// before it failed, given the failure (internal/devhook.HostCall).
func (s *Stream) hostCall(call func(before error) error) error {
	if call == nil {
		return fmt.Errorf("devmem: HostCall of a nil function: %w", ErrInvalidArgument)
	}
	if s == nil {
		return call(nil)
	}
	if err := s.check(nil); err != nil {
		return err
	}
	return s.impl.hostCall(call)
}

// hostFuncDeferred is HostFunc for work that nothing needs to start before
// the stream's next Synchronize (internal/devhook.HostFuncDeferred).
func (s *Stream) hostFuncDeferred(fn func() error) error {
	if fn == nil {
		return fmt.Errorf("devmem: HostFuncDeferred of a nil function: %w", ErrInvalidArgument)
	}
	if s == nil {
		return fn()
	}
	if err := s.check(nil); err != nil {
		return err
	}
	return s.impl.hostFuncDeferred(fn)
}

// hostWait queues, in stream order, a wait for work already under way
// elsewhere (internal/devhook.HostWait).
func (s *Stream) hostWait(wait func() error, poll func() (bool, error), deferred bool) error {
	if wait == nil {
		return fmt.Errorf("devmem: HostWait of a nil wait: %w", ErrInvalidArgument)
	}
	if s == nil {
		return wait()
	}
	if err := s.check(nil); err != nil {
		return err
	}
	if poll == nil {
		return fmt.Errorf("devmem: HostWait without a poll: %w", ErrInvalidArgument)
	}
	return s.impl.hostWait(wait, poll, deferred)
}

// task queues fn on s's host queue, behind the host work queued before it
// but not behind s's GPU work, to run on a goroutine other than the
// caller's (internal/devhook.Task).
func (s *Stream) task(fn func(ctx, handle uintptr) error) error {
	switch {
	case s == nil:
		return fmt.Errorf("devmem: Task on a nil stream: %w", ErrInvalidArgument)
	case fn == nil:
		return fmt.Errorf("devmem: Task of a nil function: %w", ErrInvalidArgument)
	}
	if err := s.check(nil); err != nil {
		return err
	}
	return s.impl.task(fn)
}

// Query reports whether all work queued on s so far is done, host work
// included, without waiting. A nil stream has none.
func (s *Stream) Query() (bool, error) {
	if s == nil {
		return true, nil
	}
	if err := s.check(nil); err != nil {
		return false, err
	}
	return s.impl.query()
}

// Synchronize waits for all work queued on s and returns the first error that
// work met since the last Synchronize.
func (s *Stream) Synchronize() error {
	if s == nil {
		return nil
	}
	if err := s.check(nil); err != nil {
		return err
	}
	return s.impl.synchronize()
}

// WaitEvent makes later work on s wait until e's last recorded point is done.
func (s *Stream) WaitEvent(e *Event) error {
	if err := s.check(nil); err != nil {
		return err
	}
	if s == nil {
		return e.Synchronize()
	}
	if err := e.check(s.dev); err != nil {
		return err
	}
	return s.impl.waitEvent(e.impl)
}

// Destroy waits for the stream's work and releases it.
func (s *Stream) Destroy() error {
	if s == nil {
		return fmt.Errorf("devmem: destroy of a nil stream: %w", ErrInvalidArgument)
	}
	if s.impl == nil {
		return fmt.Errorf("devmem: destroy of a zero Stream (streams come from Device.NewStream): %w", ErrInvalidArgument)
	}
	if !s.destroyed.CompareAndSwap(false, true) {
		return fmt.Errorf("devmem: stream destroyed twice: %w", ErrInvalidArgument)
	}
	s.dev.stats.streams.Add(-1)
	err := s.impl.destroy()
	dropLive(s.impl.hq())
	return err
}

// Event marks a point in a stream's work, to wait for or to time. Events
// come from Device.NewEvent (and NewIPCEvent, OpenIPCEvent); a nil *Event,
// or a zero Event that none of them made, is refused by every method with
// an error wrapping ErrInvalidArgument.
type Event struct {
	dev       *Device
	impl      eventImpl
	destroyed atomic.Bool
}

// NewEvent makes an event on d.
func (d *Device) NewEvent() (*Event, error) {
	if err := d.usable("NewEvent"); err != nil {
		return nil, err
	}
	impl, err := d.drv.newEvent()
	if err != nil {
		return nil, err
	}
	d.stats.events.Add(1)
	return &Event{dev: d, impl: impl}, nil
}

func (e *Event) check(dev *Device) error {
	switch {
	case e == nil:
		return fmt.Errorf("devmem: nil event: %w", ErrInvalidArgument)
	case e.impl == nil:
		return fmt.Errorf("devmem: a zero Event (events come from Device.NewEvent): %w", ErrInvalidArgument)
	case e.destroyed.Load():
		return fmt.Errorf("devmem: event was destroyed: %w", ErrInvalidArgument)
	case dev != nil && e.dev != dev:
		return fmt.Errorf("devmem: event of %v used with %v: %w", e.dev, dev, ErrInvalidArgument)
	}
	return nil
}

// Record marks the point after all work queued on s so far. With a nil
// stream the point is now. An event opened from another process
// (OpenIPCEvent) is recorded by its exporter only: ErrUnsupported.
func (e *Event) Record(s *Stream) error {
	if err := e.check(nil); err != nil {
		return err
	}
	if err := s.check(e.dev); err != nil {
		return err
	}
	var si streamImpl
	if s != nil {
		si = s.impl
	}
	return e.impl.record(si)
}

// Synchronize waits until the recorded point is reached.
func (e *Event) Synchronize() error {
	if err := e.check(nil); err != nil {
		return err
	}
	return e.impl.synchronize()
}

// Done reports whether the recorded point has been reached.
func (e *Event) Done() (bool, error) {
	if err := e.check(nil); err != nil {
		return false, err
	}
	return e.impl.query()
}

// Elapsed is the time between two recorded events, both reached. The
// interprocess events (NewIPCEvent, OpenIPCEvent) have no timing: Elapsed
// of one is an error wrapping ErrInvalidArgument.
func Elapsed(start, end *Event) (time.Duration, error) {
	if err := start.check(nil); err != nil {
		return 0, err
	}
	if err := end.check(start.dev); err != nil {
		return 0, err
	}
	return end.impl.elapsedSince(start.impl)
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	if e == nil {
		return fmt.Errorf("devmem: destroy of a nil event: %w", ErrInvalidArgument)
	}
	if e.impl == nil {
		return fmt.Errorf("devmem: destroy of a zero Event (events come from Device.NewEvent): %w", ErrInvalidArgument)
	}
	if !e.destroyed.CompareAndSwap(false, true) {
		return fmt.Errorf("devmem: event destroyed twice: %w", ErrInvalidArgument)
	}
	e.dev.stats.events.Add(-1)
	return e.impl.destroy()
}
