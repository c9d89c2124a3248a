//go:build cgo

package devmem

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpucomm/gpucomm/internal/cuda"
)

// cudaStream is a non-blocking CUDA stream: it does not wait for the legacy
// default stream, so other libraries' work there does not stall ours.
type cudaStream struct {
	c *cudaDriver
	h cuda.Stream
}

func (c *cudaDriver) newStream() (streamImpl, error) {
	var h cuda.Stream
	err := c.do(func() error {
		var err error
		h, err = cuda.StreamCreate(cuda.StreamNonBlocking)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("devmem: new stream on %v: %w", c.dev, err)
	}
	return &cudaStream{c: c, h: h}, nil
}

// hostFunc waits for the stream's work and then runs fn before it returns,
// returning fn's error: a Go function cannot safely run on the driver's
// callback thread, and waiting keeps later work ordered after fn.
func (s *cudaStream) hostFunc(fn func() error) error {
	if err := s.synchronize(); err != nil {
		return err
	}
	return fn()
}

func (s *cudaStream) synchronize() error {
	if err := s.c.do(func() error { return cuda.StreamSynchronize(s.h) }); err != nil {
		return fmt.Errorf("devmem: stream of %v: %w", s.c.dev, err)
	}
	return nil
}

func (s *cudaStream) waitEvent(e eventImpl) error {
	ev := e.(*cudaEvent)
	if err := s.c.do(func() error { return cuda.StreamWaitEvent(s.h, ev.h) }); err != nil {
		return fmt.Errorf("devmem: stream of %v waiting for an event: %w", s.c.dev, err)
	}
	return nil
}

func (s *cudaStream) destroy() error {
	err := s.c.do(func() error {
		// Destroyed even when its work failed, so that it does not leak.
		return errors.Join(cuda.StreamSynchronize(s.h), cuda.StreamDestroy(s.h))
	})
	if err != nil {
		return fmt.Errorf("devmem: destroying a stream of %v: %w", s.c.dev, err)
	}
	return nil
}

// cudaEvent is a CUDA event with timing enabled, so that Elapsed works.
type cudaEvent struct {
	c *cudaDriver
	h cuda.Event
}

func (c *cudaDriver) newEvent() (eventImpl, error) {
	var h cuda.Event
	err := c.do(func() error {
		var err error
		h, err = cuda.EventCreate(cuda.EventDefault)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("devmem: new event on %v: %w", c.dev, err)
	}
	return &cudaEvent{c: c, h: h}, nil
}

// record marks the point after s's queued work. For a nil s it records on
// the device's private stream for nil-stream work, which holds nothing
// (that work is waited for before its call returns), so the point is
// reached at once: "now", ordered after no other stream.
func (e *cudaEvent) record(s streamImpl) error {
	h := e.c.now
	if s != nil {
		h = s.(*cudaStream).h
	}
	if err := e.c.do(func() error { return cuda.EventRecord(e.h, h) }); err != nil {
		return fmt.Errorf("devmem: recording an event on %v: %w", e.c.dev, err)
	}
	return nil
}

func (e *cudaEvent) synchronize() error {
	if err := e.c.do(func() error { return cuda.EventSynchronize(e.h) }); err != nil {
		return fmt.Errorf("devmem: waiting for an event on %v: %w", e.c.dev, err)
	}
	return nil
}

func (e *cudaEvent) query() (bool, error) {
	var done bool
	err := e.c.do(func() error {
		var err error
		done, err = cuda.EventQuery(e.h)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("devmem: querying an event on %v: %w", e.c.dev, err)
	}
	return done, nil
}

func (e *cudaEvent) elapsedSince(start eventImpl) (time.Duration, error) {
	st := start.(*cudaEvent)
	var d time.Duration
	err := e.c.do(func() error {
		var err error
		d, err = cuda.EventElapsedTime(st.h, e.h)
		return err
	})
	switch {
	case err == nil:
		return d, nil
	case cuda.IsCode(err, cuda.CUDA_ERROR_NOT_READY):
		return 0, fmt.Errorf("devmem: elapsed time of an event not yet reached: %w: %w", ErrInvalidArgument, err)
	case cuda.IsCode(err, cuda.CUDA_ERROR_INVALID_HANDLE):
		return 0, fmt.Errorf("devmem: elapsed time of an event never recorded: %w: %w", ErrInvalidArgument, err)
	}
	return 0, fmt.Errorf("devmem: elapsed time on %v: %w", e.c.dev, err)
}

func (e *cudaEvent) destroy() error {
	if err := e.c.do(func() error { return cuda.EventDestroy(e.h) }); err != nil {
		return fmt.Errorf("devmem: destroying an event of %v: %w", e.c.dev, err)
	}
	return nil
}

// cudaModule is a CUmodule loaded in the device's primary context.
type cudaModule struct {
	c *cudaDriver
	h cuda.Module
}

func (c *cudaDriver) loadModule(image []byte) (moduleImpl, error) {
	var h cuda.Module
	// ModuleLoadData copies the image into C memory with the NUL that PTX needs.
	err := c.do(func() error {
		var err error
		h, err = cuda.ModuleLoadData(image)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &cudaModule{c: c, h: h}, nil
}

func (m *cudaModule) function(name string) (functionImpl, error) {
	var f cuda.Function
	err := m.c.do(func() error {
		var err error
		f, err = cuda.ModuleGetFunction(m.h, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &cudaFunction{c: m.c, h: f}, nil
}

func (m *cudaModule) unload() error {
	err := m.c.do(func() error {
		// Launches still queued may run the module's code.
		if err := cuda.CtxSynchronize(); err != nil {
			return err
		}
		return cuda.ModuleUnload(m.h)
	})
	if err != nil {
		return fmt.Errorf("devmem: unloading a module of %v: %w", m.c.dev, err)
	}
	return nil
}

type cudaFunction struct {
	c *cudaDriver
	h cuda.Function
}

func (f *cudaFunction) launch(grid, block [3]uint32, sharedBytes int, s streamImpl, params [][]byte) error {
	var cs *cudaStream
	if s != nil {
		cs = s.(*cudaStream)
	}
	g := cuda.Dim3{X: grid[0], Y: grid[1], Z: grid[2]}
	b := cuda.Dim3{X: block[0], Y: block[1], Z: block[2]}
	return f.c.enqueue(cs, func(h cuda.Stream) error {
		return cuda.LaunchKernel(f.h, g, b, sharedBytes, h, params...)
	})
}
