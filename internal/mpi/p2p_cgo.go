//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

/*
#include "gpucomm_mpi.h"
*/
import "C"

func (c *Comm) checkPeer(name, what string, peer int, wildcard bool) error {
	if peer == ProcNull || (wildcard && peer == AnySource) || (peer >= 0 && peer < c.size) {
		return nil
	}
	return argError(name, "%s rank %d is outside [0, %d)", what, peer, c.size)
}

func checkTag(name string, tag int, wildcard bool) error {
	if (wildcard && tag == AnyTag) || (tag >= 0 && tag <= tagUB) {
		return nil
	}
	return argError(name, "tag %d is outside [0, %d]", tag, tagUB)
}

// checkP2P checks one side of a point-to-point call; wildcard admits
// AnySource and AnyTag (receives).
func (c *Comm) checkP2P(name string, buf uintptr, count int, dt Datatype, peer, tag int, wildcard bool) error {
	if err := c.common(name, count, dt); err != nil {
		return err
	}
	what := "destination"
	if wildcard {
		what = "source"
	}
	if err := c.checkPeer(name, what, peer, wildcard); err != nil {
		return err
	}
	if err := checkTag(name, tag, wildcard); err != nil {
		return err
	}
	return checkBuf(name, "", buf, count)
}

func toStatus(s C.gc_status) Status {
	return Status{Source: int(s.source), Tag: int(s.tag), Count: int(s.count), Cancelled: s.cancelled != 0}
}

// Send is MPI_Send of count elements at buf to rank dest with tag.
func (c *Comm) Send(buf uintptr, count int, dt Datatype, dest, tag int) error {
	if err := c.checkP2P("Send", buf, count, dt, dest, tag, false); err != nil {
		return err
	}
	return call("MPI_Send", func() C.int {
		return C.gc_send(addr(buf), C.int(count), C.int(dt), C.int(dest), C.int(tag), c.h)
	})
}

// Recv is MPI_Recv of at most count elements into buf from src (or
// AnySource) with tag (or AnyTag). A longer message is an *Error
// (MPI_ERR_TRUNCATE) wrapping errs.ErrInvalidArgument.
func (c *Comm) Recv(buf uintptr, count int, dt Datatype, src, tag int) (Status, error) {
	if err := c.checkP2P("Recv", buf, count, dt, src, tag, true); err != nil {
		return Status{}, err
	}
	var r C.gc_result
	err := call("MPI_Recv", func() C.int {
		r = C.gc_recv(addr(buf), C.int(count), C.int(dt), C.int(src), C.int(tag), c.h)
		return r.rc
	})
	return toStatus(r.st), err
}

// Iprobe is MPI_Iprobe: whether a message from src (or AnySource) with tag
// (or AnyTag) has arrived and could be received now, and its status (the
// count in elements of dt), without receiving it.
func (c *Comm) Iprobe(src, tag int, dt Datatype) (bool, Status, error) {
	if err := c.common("Iprobe", 0, dt); err != nil {
		return false, Status{}, err
	}
	if err := c.checkPeer("Iprobe", "source", src, true); err != nil {
		return false, Status{}, err
	}
	if err := checkTag("Iprobe", tag, true); err != nil {
		return false, Status{}, err
	}
	var r C.gc_result
	err := call("MPI_Iprobe", func() C.int {
		r = C.gc_iprobe(C.int(src), C.int(tag), C.int(dt), c.h)
		return r.rc
	})
	if err != nil || r.flag == 0 {
		return false, Status{}, err
	}
	return true, toStatus(r.st), nil
}

// Sendrecv is MPI_Sendrecv with one datatype for both sides: the halo
// exchange's call. Either peer may be ProcNull. The buffers must not overlap.
func (c *Comm) Sendrecv(send uintptr, sendCount, dest, sendTag int, recv uintptr, recvCount, src, recvTag int, dt Datatype) (Status, error) {
	const name = "Sendrecv"
	if err := c.checkP2P(name, send, sendCount, dt, dest, sendTag, false); err != nil {
		return Status{}, err
	}
	if err := c.checkP2P(name, recv, recvCount, dt, src, recvTag, true); err != nil {
		return Status{}, err
	}
	if err := checkDistinct(name, send, sendCount*dt.Size(), recv, recvCount*dt.Size()); err != nil {
		return Status{}, err
	}
	var st C.gc_status
	err := call("MPI_Sendrecv", func() C.int {
		return C.gc_sendrecv(addr(send), C.int(sendCount), C.int(dest), C.int(sendTag),
			addr(recv), C.int(recvCount), C.int(src), C.int(recvTag), C.int(dt), c.h, &st)
	})
	return toStatus(st), err
}

// Isend is MPI_Isend; buf must stay valid and unchanged until the request
// completes.
func (c *Comm) Isend(buf uintptr, count int, dt Datatype, dest, tag int) (*Request, error) {
	if err := c.checkP2P("Isend", buf, count, dt, dest, tag, false); err != nil {
		return nil, err
	}
	r := &Request{dt: dt, p2p: true, peer: dest, send: true}
	err := call("MPI_Isend", func() C.int {
		return C.gc_isend(addr(buf), C.int(count), C.int(dt), C.int(dest), C.int(tag), c.h, &r.h)
	})
	return r.started(r.failed(err))
}

// Irecv is MPI_Irecv; buf must stay valid until the request completes.
func (c *Comm) Irecv(buf uintptr, count int, dt Datatype, src, tag int) (*Request, error) {
	if err := c.checkP2P("Irecv", buf, count, dt, src, tag, true); err != nil {
		return nil, err
	}
	r := &Request{dt: dt, p2p: true, peer: src}
	err := call("MPI_Irecv", func() C.int {
		return C.gc_irecv(addr(buf), C.int(count), C.int(dt), C.int(src), C.int(tag), c.h, &r.h)
	})
	return r.started(r.failed(err))
}

// Request is a pending nonblocking operation. Complete it with Wait, Test,
// Waitall, Testall or WaitTimeout; one goroutine at a time may use it.
type Request struct {
	h      C.MPI_Request
	dt     Datatype
	done   bool
	status Status
	p2p    bool // Isend or Irecv: a failure, posting or completing, names peer (*PeerError)
	send   bool
	peer   int
}

// failed is err, MPI's failure of r, naming r's peer when r has one.
func (r *Request) failed(err error) error {
	if err == nil || !r.p2p {
		return err
	}
	return &PeerError{Peer: r.peer, Send: r.send, Err: err}
}

func (r *Request) started(err error) (*Request, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Done reports whether r has completed (a nil Request has).
func (r *Request) Done() bool { return r == nil || r.done }

// Status describes a completed receive; the zero Status before completion.
func (r *Request) Status() Status {
	if r == nil {
		return Status{}
	}
	return r.status
}

// Wait blocks until r completes.
func (r *Request) Wait() error {
	if r.Done() {
		return nil
	}
	if err := upError("Wait"); err != nil {
		return err
	}
	defer leave(enter())
	return r.complete1("MPI_Wait", C.gc_wait1(&r.h, C.int(r.dt)))
}

// Test reports whether r has completed, without blocking.
func (r *Request) Test() (bool, error) {
	if r.Done() {
		return true, nil
	}
	if err := upError("Test"); err != nil {
		return false, err
	}
	defer leave(enter())
	err := r.complete1("MPI_Test", C.gc_test1(&r.h, C.int(r.dt)))
	return err == nil && r.done, err
}

// Cancel is MPI_Cancel: it asks MPI to cancel a pending receive. The request
// must still be completed (Wait); its Status then says whether it was
// cancelled or had completed first.
func (r *Request) Cancel() error {
	if r == nil || r.done {
		return nil
	}
	if err := upError("Cancel"); err != nil {
		return err
	}
	return call("MPI_Cancel", func() C.int { return C.gc_cancel(&r.h) })
}

// single is the one request of reqs not yet complete, when there is exactly
// one: Waitall and Testall then call MPI_Wait or MPI_Test on it, with no
// arrays to allocate.
func single(reqs []*Request) (*Request, bool) {
	var one *Request
	for _, r := range reqs {
		if r != nil && !r.done {
			if one != nil {
				return nil, false
			}
			one = r
		}
	}
	return one, one != nil
}

// complete1 records what MPI_Wait or MPI_Test reported of r.
func (r *Request) complete1(name string, res C.gc_result) error {
	if res.rc == C.MPI_SUCCESS && res.flag != 0 {
		r.done, r.status = true, toStatus(res.st)
	}
	return r.failed(check(name, res.rc))
}

// pendingHandles copies the handles of the requests not yet complete, so
// that MPI gets a plain array. nil entries and completed requests drop out.
func pendingHandles(reqs []*Request) (live []*Request, hs []C.MPI_Request, dts []C.int, sts []C.gc_status) {
	for _, r := range reqs {
		if r != nil && !r.done {
			live = append(live, r)
			hs = append(hs, r.h)
			dts = append(dts, C.int(r.dt))
		}
	}
	return live, hs, dts, make([]C.gc_status, len(live))
}

// finish records what MPI_Waitall or MPI_Testall reported.
func finish(name string, rc C.int, complete bool, live []*Request, hs []C.MPI_Request, sts []C.gc_status) error {
	for i, r := range live {
		r.h = hs[i]
		if rc == C.MPI_ERR_IN_STATUS {
			if sts[i].error != C.MPI_ERR_PENDING {
				r.done, r.status = true, toStatus(sts[i])
			}
		} else if rc == C.MPI_SUCCESS && complete {
			r.done, r.status = true, toStatus(sts[i])
		}
	}
	if rc == C.MPI_ERR_IN_STATUS {
		for i := range live {
			if e := sts[i].error; e != C.MPI_SUCCESS && e != C.MPI_ERR_PENDING {
				return live[i].failed(check(name, e))
			}
		}
	}
	return check(name, rc)
}

// Waitall blocks until every request in reqs has completed (MPI_Waitall).
// nil entries are ignored.
func Waitall(reqs []*Request) error {
	if err := upError("Waitall"); err != nil {
		return err
	}
	if r, ok := single(reqs); ok {
		defer leave(enter())
		return r.complete1("MPI_Wait", C.gc_wait1(&r.h, C.int(r.dt)))
	}
	live, hs, dts, sts := pendingHandles(reqs)
	if len(live) == 0 {
		return nil
	}
	defer leave(enter())
	rc := C.gc_waitall(C.int(len(hs)), &hs[0], &dts[0], &sts[0])
	return finish("MPI_Waitall", rc, true, live, hs, sts)
}

// Testall reports whether every request in reqs has completed
// (MPI_Testall), without blocking. nil entries are ignored.
func Testall(reqs []*Request) (bool, error) {
	if err := upError("Testall"); err != nil {
		return false, err
	}
	if r, ok := single(reqs); ok {
		defer leave(enter())
		err := r.complete1("MPI_Test", C.gc_test1(&r.h, C.int(r.dt)))
		return err == nil && r.done, err
	}
	live, hs, dts, sts := pendingHandles(reqs)
	if len(live) == 0 {
		return true, nil
	}
	defer leave(enter())
	var flag C.int
	rc := C.gc_testall(C.int(len(hs)), &hs[0], &dts[0], &flag, &sts[0])
	err := finish("MPI_Testall", rc, flag != 0, live, hs, sts)
	return err == nil && flag != 0, err
}
