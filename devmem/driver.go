package devmem

import "time"

// driver is what each kind of device implements. Arguments reaching it have
// been checked already: buffers are live, on this device, and large enough.
type driver interface {
	alloc(n int, pinned bool) (*allocation, error)
	copy(dst, src Buffer, n int, s *Stream) error
	copyFromHost(dst Buffer, src []byte, s *Stream) error
	copyToHost(dst []byte, src Buffer, s *Stream) error
	memset(dst Buffer, v byte, s *Stream) error
	newStream() (streamImpl, error)
	newEvent() (eventImpl, error)
	synchronize() error
}

type streamImpl interface {
	hostFunc(fn func() error) error
	synchronize() error
	waitEvent(e eventImpl) error
	destroy() error
}

type eventImpl interface {
	record(s streamImpl) error
	synchronize() error
	query() (bool, error)
	elapsedSince(start eventImpl) (time.Duration, error)
	destroy() error
}
