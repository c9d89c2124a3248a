package mpicomm

import (
	"errors"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/devhook"
)

// CUDA-aware Open MPI registers device memory it moves by asking the driver
// for a legacy IPC handle (cuIpcGetMemHandle), which memory of the driver's
// virtual memory management (NodeShared buffers: devmem's VMM memory) does
// not have: MPI then prints "cuIpcGetMemHandle failed" and falls back to a
// slower protocol. In Direct mode a VMM buffer therefore reaches MPI through
// a bounce buffer of ordinary device memory: a device-to-device copy in
// before MPI reads it, out after MPI wrote it. Each rank decides for its own
// buffers, so the ranks' protocols stay the same whatever the others hold.

// isVMM reports whether b's memory comes from the driver's virtual memory
// management (a variable, so that a test can call host memory VMM).
var isVMM = devhook.IsVMM

// hasVMM reports whether any buffer of bufs is VMM memory.
func hasVMM(bufs ...devmem.Buffer) bool {
	for _, b := range bufs {
		if !b.IsZero() && isVMM(b) {
			return true
		}
	}
	return false
}

// p2pHasVMM reports whether any transfer of ps moves VMM memory.
func p2pHasVMM(ps []comm.P2P) bool {
	for _, p := range ps {
		if hasVMM(p.Buf) {
			return true
		}
	}
	return false
}

// bounceIn returns an ordinary device buffer holding b's bytes, and the
// function that frees it (kept after a timeout, when an abandoned MPI call
// may still use it: Close ends the job then).
func (c *Comm) bounceIn(b devmem.Buffer) (devmem.Buffer, func(error), error) {
	tmp, err := c.dev.Alloc(max(b.Len(), 1))
	if err != nil {
		return devmem.Buffer{}, nil, err
	}
	if tmp, err = tmp.Slice(0, b.Len()); err == nil && b.Len() > 0 {
		err = devmem.CopyN(tmp, b, b.Len(), nil)
	}
	free := func(cause error) {
		if !errors.Is(cause, comm.ErrTimeout) {
			tmp.Free()
		}
	}
	if err != nil {
		free(nil)
		return devmem.Buffer{}, nil, err
	}
	return tmp, free, nil
}

// bounced runs a direct collective with its VMM buffers swapped for bounce
// buffers; recv's comes back after MPI wrote it. A send inside recv (in
// place, or this rank's block of it) stays inside recv's bounce buffer.
func (c *Comm) bounced(o *op, direct func(*Comm, *op) error) (err error) {
	orig := o.call
	defer func() { o.call = orig }()
	send, recv := orig.Send, orig.Recv
	var frees []func(error)
	defer func() {
		for _, f := range frees {
			f(err)
		}
	}()
	var bRecv devmem.Buffer
	if hasVMM(recv) {
		b, free, err := c.bounceIn(recv)
		if err != nil {
			return err
		}
		frees, bRecv = append(frees, free), b
		o.call.Recv = b
	}
	if hasVMM(send) {
		if !bRecv.IsZero() && send.Overlaps(recv) && send.Addr() >= recv.Addr() {
			if o.call.Send, err = bRecv.Slice(int(send.Addr()-recv.Addr()), send.Len()); err != nil {
				return err
			}
		} else {
			b, free, err := c.bounceIn(send)
			if err != nil {
				return err
			}
			frees = append(frees, free)
			o.call.Send = b
		}
	}
	if err := direct(c, o); err != nil {
		return err
	}
	if !bRecv.IsZero() && bRecv.Len() > 0 {
		return devmem.CopyN(recv, bRecv, bRecv.Len(), nil)
	}
	return nil
}

// bouncedP2P runs direct transfers with their VMM buffers swapped for
// bounce buffers; receives come back once every transfer has completed.
func (c *Comm) bouncedP2P(o *op, ps []comm.P2P, tags []int) (err error) {
	qs := append([]comm.P2P(nil), ps...)
	var frees []func(error)
	defer func() {
		for _, f := range frees {
			f(err)
		}
	}()
	for i, p := range qs {
		if !hasVMM(p.Buf) {
			continue
		}
		b, free, err := c.bounceIn(p.Buf)
		if err != nil {
			return err
		}
		frees = append(frees, free)
		qs[i].Buf = b
	}
	if err := c.directP2P(o, qs, tags); err != nil {
		return err
	}
	for i, p := range ps {
		if p.Kind == comm.RecvKind && !qs[i].Buf.Same(p.Buf) && p.Buf.Len() > 0 {
			if err := devmem.CopyN(p.Buf, qs[i].Buf, p.Buf.Len(), nil); err != nil {
				return err
			}
		}
	}
	return nil
}
