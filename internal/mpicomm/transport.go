package mpicomm

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/pipeline"
)

// MPI as the chunk pipeline's transport (internal/pipeline): a chunk's
// requests are MPI requests, and the running operation (*op) completes them
// within its deadline and settles those a failure leaves behind.

// pipe is one pipelined transfer over MPI.
type pipe = pipeline.Pipe[*mpi.Request]

// slot is one pinned staging chunk of the pipeline.
type slot = pipeline.Slot

var _ pipeline.Transport[*mpi.Request] = (*op)(nil)

// run drives p to the end as part of operation o.
func (c *Comm) run(o *op, p pipe) error { return pipeline.Run(&c.eng, o, p) }

// policy is the chunk-size policy with the chunk the ranks agreed on.
func (c *Comm) policy() pipeline.Policy { return pipeline.Policy{Chunk: c.chunk} }

// cut is a pipe of the given bytes of elements of es bytes, cut as the
// policy says.
func (c *Comm) cut(bytes, es int) pipe { return pipe{Bytes: bytes, Cut: c.policy().Cut(es)} }

// Wait completes a chunk's requests within the operation's deadline.
func (o *op) Wait(reqs []*mpi.Request) error { return o.c.wait(o, reqs) }

// Label names the operation in a pipeline trace.
func (o *op) Label() string { return o.call.Signature() }

// Abandon settles the requests a failed transfer leaves: receives posted
// ahead are cancelled (a shorter message than expected leaves the next
// chunk's receive posted); MPI requests still pending keep their slots and
// leave the communicator broken, since MPI may yet write there and the
// ranks are out of step.
func (o *op) Abandon(reqs [][]*mpi.Request, cancel bool, err error) bool {
	var pending []*mpi.Request
	for _, rs := range reqs {
		for _, r := range rs {
			if !r.Done() {
				pending = append(pending, r)
			}
		}
	}
	if len(pending) == 0 {
		return true
	}
	if cancel && !errors.Is(err, comm.ErrTimeout) {
		for _, r := range pending {
			r.Cancel()
		}
		mpi.WaitTimeout(pending, time.Second)
	}
	if done, terr := mpi.Testall(pending); terr == nil && done {
		return true
	}
	if !errors.Is(err, comm.ErrTimeout) {
		o.c.setBroken(fmt.Errorf("%v failed with MPI requests pending: %w", o.call.Operation, err))
	}
	return false
}
