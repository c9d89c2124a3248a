package mpicomm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// AwareEnv overrides the CUDA-awareness verdict: 1 trusts MPI with device
// pointers without asking, 0 refuses them (on every device), probe skips
// MPI's own answer and exchanges device buffers between ranks to decide.
const AwareEnv = "GPUCOMM_CUDA_AWARE"

// NotAwareAdvice is what to do when MPI cannot take device pointers.
const NotAwareAdvice = "use -backend mpi (host-staged) or nccl, or an MPI built with CUDA support, e.g. Open MPI configured --with-cuda"

// probeTimeout bounds the device-buffer exchange of the run-time probe.
const probeTimeout = 10 * time.Second

const probeTag = 2

// lastVerdict is what the latest Open in Direct mode decided, for Probe.
var lastVerdict atomic.Pointer[comm.Verdict]

type awareness int

const (
	aware awareness = iota
	notAware
	unknown
)

// Override is what GPUCOMM_CUDA_AWARE asks for.
type Override int

const (
	NoOverride Override = iota // unset: ask MPI, then probe if it cannot say
	Trust                      // 1
	Refuse                     // 0
	Check                      // probe: exchange device buffers whatever MPI says
)

// AwareOverride reads GPUCOMM_CUDA_AWARE.
func AwareOverride() (Override, error) {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(AwareEnv)))
	if v == "" {
		return NoOverride, nil
	}
	if v == "probe" {
		return Check, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return NoOverride, fmt.Errorf("%s=%q: want 1, 0 or probe: %w", AwareEnv, v, comm.ErrInvalidArgument)
	}
	if b {
		return Trust, nil
	}
	return Refuse, nil
}

// Library is the first line of MPI's version string.
func Library() string {
	v, _, _ := strings.Cut(mpi.Version(), "\n")
	if v = strings.TrimSpace(v); v == "" {
		return "MPI"
	}
	return v
}

// ProbeCUDAAware is the verdict for the cudaaware backend without starting
// MPI or a device: the override, the verdict of the last Open, MPI's answer
// when MPI is up, or whether the device would be the host device.
func ProbeCUDAAware() comm.Verdict {
	if !mpi.Built() {
		return comm.Verdict{Reason: NotBuiltReason()}
	}
	if err := mpi.JoinError(); err != nil {
		return comm.Verdict{Reason: err.Error()}
	}
	switch o, err := AwareOverride(); {
	case err != nil:
		// Usable, so that "auto" opens this backend and stops with the
		// malformed value (an error of the program's set-up, as a bad
		// GPUCOMM_TIMEOUT is) instead of passing over to mpi unseen.
		return comm.Verdict{Usable: true, Reason: err.Error() + "; Open refuses it"}
	case o == Trust:
		return comm.Verdict{Usable: true, Reason: AwareEnv + "=1: " + Library() + " is trusted with device pointers unchecked"}
	case o == Refuse:
		return comm.Verdict{Reason: AwareEnv + "=0: device pointers are not handed to MPI; " + NotAwareAdvice}
	case o == Check:
		return comm.Verdict{Usable: true, Reason: AwareEnv + "=probe: Open exchanges device buffers between ranks to decide"}
	}
	if v := lastVerdict.Load(); v != nil {
		return *v
	}
	// The host device first: it needs no CUDA support, whatever MPI, when
	// up, says of its own (a command that started MPI before probing was
	// told the backend could not run on the host).
	spec := strings.ToLower(strings.TrimSpace(os.Getenv("GPUCOMM_DEVICE")))
	n, err := devmem.CUDADeviceCount()
	if spec == "host" || ((spec == "" || spec == "auto") && (err != nil || n == 0)) {
		return comm.Verdict{Usable: true, Reason: "host device: " + Library() + " moves host memory, no CUDA support needed"}
	}
	if known, a := mpi.CUDAAwareQuery(); known {
		if a {
			return comm.Verdict{Usable: true, Reason: Library() + " reports CUDA support"}
		}
		return comm.Verdict{Reason: Library() + " reports no CUDA support; " + NotAwareAdvice}
	}
	return comm.Verdict{Usable: true, Tentative: true, Reason: "CUDA support of " + Library() +
		" is known once MPI is up: Open asks MPI, and when MPI cannot say, exchanges device buffers between ranks to find out (" +
		AwareEnv + "=1|0 decides instead)"}
}

// NotBuiltReason is the Probe verdict of a binary built without MPI.
func NotBuiltReason() string { return "not built: " + mpi.NotBuiltReason() }

// localAwareness is this rank's verdict before any exchange.
func (c *Comm) localAwareness() (awareness, string, error) {
	switch o, err := AwareOverride(); {
	case err != nil:
		return notAware, "", err
	case o == Trust:
		return aware, AwareEnv + "=1: trusted unchecked", nil
	case o == Refuse:
		return notAware, AwareEnv + "=0", nil
	case o == Check:
		return unknown, AwareEnv + "=probe", nil
	}
	if c.dev.Kind() == devmem.Host {
		return aware, "host device: MPI moves host memory", nil
	}
	if known, a := mpi.CUDAAwareQuery(); known {
		if a {
			return aware, "MPI reports CUDA support", nil
		}
		return notAware, "MPI reports no CUDA support", nil
	}
	return unknown, "MPI cannot say whether it takes device pointers", nil
}

// admitDeviceMemory decides, on every rank alike, whether MPI may be handed
// device pointers. When MPI cannot say, the ranks exchange small device
// buffers with their neighbours and check what arrived; a non-CUDA-aware MPI
// may crash on a device pointer, so that probe runs only then, never when
// MPI says no (unless GPUCOMM_CUDA_AWARE=probe asks for it).
func (c *Comm) admitDeviceMemory() error {
	state, why, err := c.localAwareness()
	v := []int64{b2i(state == unknown), b2i(err != nil)}
	if aerr := mpi.AllreduceInt64s(c.ctl, v, mpi.Max); aerr != nil {
		return driver.Wrap(c.backend, "Open", c.rank, errors.Join(err, aerr))
	}
	switch {
	case err != nil:
		return driver.Wrap(c.backend, "Open", c.rank, err)
	case v[1] != 0:
		return driver.Errorf(c.backend, "Open", c.rank, comm.ErrInvalidArgument, "another rank's %s is malformed", AwareEnv)
	}
	if v[0] != 0 {
		ok, how := c.exchangeDeviceBuffers()
		if state == unknown {
			state, why = notAware, "a device-buffer exchange between ranks failed: "+how
			if ok {
				state, why = aware, "a device-buffer exchange between ranks delivered the right bytes"
			}
		}
	}
	flags, err := mpi.AllgatherValues(c.ctl, []int64{b2i(state != aware)})
	if err != nil {
		return driver.Wrap(c.backend, "Open", c.rank, err)
	}
	var refused []string
	for r, f := range flags {
		if f != 0 {
			refused = append(refused, strconv.Itoa(r))
		}
	}
	verdict := comm.Verdict{Usable: true, Reason: Library() + ": " + why}
	if refused != nil {
		msg := fmt.Sprintf("%s is not CUDA-aware on rank %s", Library(), strings.Join(refused, ", "))
		if state != aware {
			msg += " (here: " + why + ")"
		}
		verdict = comm.Verdict{Reason: msg + "; " + NotAwareAdvice}
		lastVerdict.Store(&verdict)
		return driver.Errorf(c.backend, "Open", c.rank, comm.ErrNotCUDAAware, "%s; %s", msg, NotAwareAdvice)
	}
	lastVerdict.Store(&verdict)
	return nil
}

// exchangeDeviceBuffers sends a device buffer to the right neighbour and
// receives one from the left, bounded in time, and checks the bytes. Every
// rank takes part. When the exchange does not finish, its buffers stay
// allocated: MPI may still write into them.
func (c *Comm) exchangeDeviceBuffers() (bool, string) {
	const n = 4096
	pattern := func(rank int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + rank*13 + 1)
		}
		return b
	}
	send, err := c.dev.Alloc(n)
	if err != nil {
		return false, err.Error()
	}
	recv, err := c.dev.Alloc(n)
	if err != nil {
		return false, errors.Join(err, send.Free()).Error()
	}
	if err := errors.Join(devmem.CopyFromHost(send, pattern(c.rank), nil), devmem.Memset(recv, 0, nil)); err != nil {
		return false, errors.Join(err, send.Free(), recv.Free()).Error()
	}
	right, left := (c.rank+1)%c.size, (c.rank+c.size-1)%c.size
	rr, err := c.ctl.Irecv(recv.Addr(), n, mpi.Byte, left, probeTag)
	if err != nil {
		return false, err.Error()
	}
	sr, err := c.ctl.Isend(send.Addr(), n, mpi.Byte, right, probeTag)
	if err != nil {
		return false, err.Error()
	}
	if err := mpi.WaitTimeout([]*mpi.Request{rr, sr}, probeTimeout); err != nil {
		return false, err.Error()
	}
	got := make([]byte, n)
	err = errors.Join(devmem.CopyToHost(got, recv, nil), send.Free(), recv.Free())
	switch {
	case err != nil:
		return false, err.Error()
	case !bytes.Equal(got, pattern(left)):
		return false, fmt.Sprintf("the %d bytes received from rank %d are not the ones it sent", n, left)
	}
	return true, ""
}

// mpiSaysCUDAAware reports whether the MPI library says it takes device
// pointers: then it makes CUDA calls of its own even under the host-staged
// backend.
func mpiSaysCUDAAware() bool {
	known, aware := mpi.CUDAAwareQuery()
	return known && aware
}
