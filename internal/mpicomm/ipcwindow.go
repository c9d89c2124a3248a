package mpicomm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/ipccache"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// ipcWindow moves the IPC path's messages of one operation (a GroupP2P
// window: osu_bw's 64 sends, say) together on the calling goroutine, where
// each had a goroutine of its own that waited for its own requests. Under
// MPS on the H200 a window of 64 messages of 4 MiB took 15 µs a message
// where cudaaware took 8 and the copy itself 2: a CPU profile found half
// the time in the Go scheduler's lock, taken by the goroutines' yields
// between their polls of MPI. Here one loop tests every message's requests
// in turn; the receivers' copies whose control messages came in the same
// round are queued on the batch's stream and waited for together
// (copyBatch), and their acknowledgements then go out together.
//
// Nothing changes between the ranks: each message keeps its own control
// message, copy and acknowledgement, on its own tag, so a peer that sends
// or receives the same messages one by one, or in windows of another size,
// matches them as before. A message that needs more than the plain copy (a
// buffer that cannot be exported, counts that differ, a handle that does
// not open, a copy that fails) goes on by itself, on a goroutine, through
// the same code as a single message (ipcSend, ipcControl, restage).
//
// errs[i] is set for each i of win, the indices in ts of the IPC path's
// transfers.
func (c *Comm) ipcWindow(o *op, ts []transfer, win []int, errs []error) {
	ms := make([]winMsg, len(win))
	var aside sync.WaitGroup
	// finish ends m: its error, and its cell back unless MPI may still
	// write into it. Each m's own errs entry, so it may run aside.
	finish := func(m *winMsg, keep bool, err error) {
		if !keep {
			c.putCell(m.cell)
		}
		errs[m.i] = c.explainTimeout(o, m.t, err)
	}
	// alone hands the rest of m to a goroutine of its own.
	alone := func(m *winMsg, rest func() (bool, error)) {
		m.state = winAlone
		aside.Go(func() {
			keep, err := rest()
			finish(m, keep, err)
		})
	}
	for k, i := range win {
		m := &ms[k]
		m.i, m.t = i, ts[i]
		cell, err := c.cell()
		if err != nil {
			errs[i] = err
			continue
		}
		m.cell = cell
		if !m.t.send {
			req, err := m.t.on.Irecv(cell.Addr(), c.ipc.room, mpi.Byte, m.t.peers[0], m.t.tag)
			if err != nil {
				finish(m, false, err)
				continue
			}
			m.reqs, m.state = [2]*mpi.Request{req}, winPosted
			continue
		}
		if staged := c.fillControl(m.t, cell); staged {
			// The bytes follow the control message through the pipeline.
			alone(m, func() (bool, error) { return c.sendControl(o, m.t, m.cell, true) })
			continue
		}
		reqs, keep, err := c.postSend(o, m.t, cell)
		if err != nil {
			finish(m, keep, err)
			continue
		}
		m.reqs, m.state = reqs, winSent
	}

	c.ipc.windows.Add(1)
	var copying []*winMsg
	var pause backoffSleep
	for {
		// Past the deadline, a message that this round's test finds still
		// pending has timed out (each is tested once more first: one may
		// have ended while the last round waited for its copies).
		expired := !o.deadline.IsZero() && time.Now().After(o.deadline)
		live, moved := 0, false
		for k := range ms {
			m := &ms[k]
			if m.state != winSent && m.state != winPosted && m.state != winAcking {
				continue
			}
			live++
			done, err := testTwo(&m.reqs)
			if err == nil && !done && expired {
				err = fmt.Errorf("mpi: requests still pending after %v: %w", c.timeout, comm.ErrTimeout)
			}
			if err != nil {
				m.state = winDone
				finish(m, c.unsettled(m.t, m.reqs[:], err), err)
				moved = true
				continue
			}
			if !done {
				continue
			}
			moved = true
			switch m.state {
			case winSent:
				a := binary.LittleEndian.Uint64(cellBytes(m.cell, c.ipc.room, ackLen))
				if a != ackCopied {
					alone(m, func() (bool, error) { return false, c.ipcAcked(o, m.t, a) })
					continue
				}
				c.ipc.sent.Add(1)
				c.nodeSent.Add(1)
				m.state = winDone
				finish(m, false, nil)
			case winPosted:
				got := m.reqs[0].Status().Count
				raw, plain := c.plainControl(m.t, m.cell, got)
				if !plain {
					alone(m, func() (bool, error) { return c.ipcControl(o, m.t, m.cell, got) })
					continue
				}
				ref, g, err := c.ipcIssue(m.t, raw)
				if err != nil {
					alone(m, func() (bool, error) { return c.restage(o, m.t, m.cell, err) })
					continue
				}
				m.ref, m.gen, m.state = ref, g, winCopying
				copying = append(copying, m)
			case winAcking:
				m.state = winDone
				finish(m, false, nil)
			}
		}
		// The copies queued this round, waited for together: the first
		// await synchronizes for all of them.
		for _, m := range copying {
			err := errors.Join(c.ipc.batch.await(m.gen), m.ref.Release())
			m.ref, m.gen = nil, nil
			if err != nil {
				alone(m, func() (bool, error) { return c.restage(o, m.t, m.cell, err) })
				continue
			}
			c.ipc.got.Add(1)
			c.nodeGot.Add(1)
			r, err := c.postAnswer(m.t, m.cell, ackCopied)
			if err != nil {
				m.state = winDone
				finish(m, false, err)
				continue
			}
			m.reqs, m.state = [2]*mpi.Request{r}, winAcking
			live++
		}
		copying = copying[:0]
		if live == 0 {
			break
		}
		switch {
		case moved:
			pause.reset()
		case o.deadline.IsZero() && c.multiple:
			runtime.Gosched() // as waitCrowded: MPI's calls hold its lock briefly
		default:
			// With a deadline, or MPI serialized (one lock for every
			// call), polls back off as WaitTimeout's do.
			pause.wait(o.deadline)
		}
	}
	aside.Wait()
}

// backoffSleep sleeps between polls that found nothing, longer each time,
// as mpi.WaitTimeout does: from 20 µs up to 2 ms, never past a deadline.
type backoffSleep struct{ d time.Duration }

func (b *backoffSleep) reset() { b.d = 0 }

func (b *backoffSleep) wait(deadline time.Time) {
	b.d = min(max(2*b.d, 20*time.Microsecond), 2*time.Millisecond)
	d := b.d
	if !deadline.IsZero() {
		d = max(min(d, time.Until(deadline)), 0)
	}
	time.Sleep(d)
}

// winMsg is one message of an ipcWindow.
type winMsg struct {
	i     int // its index in the operation's transfers
	t     transfer
	cell  devmem.Buffer
	state winState
	reqs  [2]*mpi.Request // a send's control and acknowledgement; a receive's control, then its acknowledgement
	ref   *ipccache.Ref   // the sender's buffer, opened, while the copy runs
	gen   *copyGen
}

type winState uint8

const (
	winDone    winState = iota // ended (or never started: no cell)
	winSent                    // control message sent, acknowledgement awaited
	winPosted                  // receive of the control message posted
	winCopying                 // the copy queued on the batch's stream
	winAcking                  // the acknowledgement sent
	winAlone                   // going on by itself, on a goroutine
)

// testTwo tests the requests of rs not yet complete (nil ones are done).
func testTwo(rs *[2]*mpi.Request) (bool, error) {
	all := true
	for _, r := range rs {
		done, err := r.Test()
		if err != nil {
			return false, err
		}
		all = all && done
	}
	return all, nil
}
