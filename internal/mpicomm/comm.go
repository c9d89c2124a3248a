package mpicomm

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/nodepath"
	"github.com/gpucomm/gpucomm/internal/pipeline"
)

// Mode says how data reaches MPI.
type Mode int

const (
	// Staged copies device data through pinned host buffers, chunk by
	// chunk, and hands MPI host memory only.
	Staged Mode = iota + 1
	// Direct hands MPI device pointers, for an MPI built with CUDA support;
	// the few calls MPI cannot do on device memory are staged.
	Direct
)

// tagSpace bounds the tags this package uses: MPI guarantees MPI_TAG_UB of
// at least 32767, and a tag only has to tell apart messages in flight.
const tagSpace = 32768

// Config is what a backend asks of Open.
type Config struct {
	Backend string // the name errors carry: "mpi" or "cudaaware"
	Mode    Mode
	Options comm.Options
}

// Comm is one rank of a communicator over MPI. It implements
// comm.Communicator.
type Comm struct {
	driver.Front
	backend   string
	strat     strategy // staged or direct, from the Mode at Open
	rank      int
	size      int
	localRank int
	localSize int
	dev       *devmem.Device

	// Three MPI communicators with the same ranks, so that traffic of one
	// kind never matches another's: collectives (and the point-to-point
	// messages of the collectives built from them), the user's Send, Recv
	// and GroupP2P (and Split), and the control messages of Debug and
	// Timeout.
	coll, p2p, ctl *mpi.Comm

	chunk    int
	timeout  time.Duration
	debug    bool
	announce bool // some rank has a timeout: every rank announces each collective
	multiple bool // MPI_THREAD_MULTIPLE: goroutines may block in MPI at once
	// blockSmall: no rank has a timeout and every rank's MPI is at
	// MPI_THREAD_MULTIPLE, as the ranks agreed: a staged collective of one
	// small chunk is then MPI's blocking call on its slot (smallBlocking),
	// which every rank must choose alike, since MPI matches no blocking
	// collective with a nonblocking one.
	blockSmall bool
	// smallBlocking counts the staged collectives that went so.
	smallBlocking atomic.Int64
	// MPI's 8-bit sums saturate instead of wrapping (Open MPI 4.1.4's AVX
	// ops do, on vectors): such sums then run widened to int32 on the host.
	widenBytes bool
	// stageReduce is the size from which Direct mode's reductions go
	// through the host-staged pipeline (0: never), as the ranks agreed;
	// stagedReductions counts those that did.
	stageReduce      int
	stagedReductions atomic.Int64

	// The chunk pipeline (internal/pipeline): its slot pool, the backend's
	// own copy streams (also the node path's), and its tracer.
	eng    pipeline.Engine
	ctlBuf devmem.Buffer // pinned: announcement cells and the debug digest
	ann    *announcer

	tickets atomic.Uint64 // collective tickets handed out, in call order
	current op            // the op of the collective whose turn it is (turnOp)
	// smallSlot is the slot of the staged collectives that go as MPI's
	// blocking call (onSmallSlot), taken from the pool at the first, used
	// only by the collective whose turn it is (one at a time, and done with
	// it when its call returns) and given back at teardown: a small
	// collective takes no lock of the pool's.
	smallSlot *pipeline.Slot

	mu      sync.Mutex
	cond    *sync.Cond
	turn    uint64 // the last ticket whose collective has finished
	running int    // operations between begin and end
	closed  bool
	broken  error // why the communicator can no longer be used, if it cannot
	// unusable is set (under mu) once closed or broken is: usable's check
	// before the arguments then takes no lock while neither is (collectiveNow
	// and runTicket look again under mu).
	unusable atomic.Bool

	peerMu  sync.Mutex
	sendSeq []uint64 // messages sent to each peer, for their tags
	recvSeq []uint64 // messages received from each peer

	// The node path (node.go): the smallest message it takes (0: off, as
	// the ranks agreed), which ranks share this rank's node, and the links
	// made so far (under peerMu).
	nodeMin           int
	onNode            []bool
	nodes             nodepath.Table // the links made so far, under peerMu
	nodeSent, nodeGot atomic.Int64   // messages that went the node path (ring or IPC)
	// The IPC path (ipcpath.go): which pairs of the node it serves, and
	// what it needs (nil cache: it serves none here).
	ipc    ipcPath
	ipcAll bool // every rank is on this node and every pair reaches: collectives may take the IPC path
}

var _ comm.Communicator = (*Comm)(nil)
var _ comm.Aborter = (*Comm)(nil)

func (c *Comm) Rank() int              { return c.rank }
func (c *Comm) Size() int              { return c.size }
func (c *Comm) LocalRank() int         { return c.localRank }
func (c *Comm) LocalSize() int         { return c.localSize }
func (c *Comm) Backend() string        { return c.backend }
func (c *Comm) Device() *devmem.Device { return c.dev }

// ChunkBytes is the pipelining chunk the ranks agreed on.
func (c *Comm) ChunkBytes() int { return c.chunk }

// ThreadMultiple reports whether MPI provided MPI_THREAD_MULTIPLE.
func (c *Comm) ThreadMultiple() bool { return c.multiple }

// BlocksSmallCollectives reports whether a staged collective of one small
// chunk goes as MPI's blocking call on one slot, as the ranks agreed (no
// rank has a timeout and every rank's MPI is at MPI_THREAD_MULTIPLE).
func (c *Comm) BlocksSmallCollectives() bool { return c.blockSmall }

// SmallBlockingCollectives counts the staged collectives of this rank that
// went as MPI's blocking call on one slot.
func (c *Comm) SmallBlockingCollectives() int64 { return c.smallBlocking.Load() }

// Open makes this process's communicator over every rank of the job. Every
// rank calls it. It holds a reference to MPI (internal/mpi Acquire) until
// Close; when it fails, MPI stays up for another Open.
func Open(cfg Config) (*Comm, error) {
	o := cfg.Options
	if err := comm.CheckOptions(o); err != nil { // also for a backend Open called without comm.Open
		return nil, driver.Wrap(cfg.Backend, "Open", mpi.World().Rank(), err)
	}
	if err := mpi.Acquire(); err != nil {
		return nil, driver.Wrap(cfg.Backend, "Open", mpi.World().Rank(), err)
	}
	base, err := mpi.World().Dup()
	if err != nil {
		return nil, driver.Wrap(cfg.Backend, "Open", mpi.World().Rank(), errors.Join(err, mpi.ReleaseKeepingUp()))
	}
	c, err := build(cfg, base, nil, "Open")
	if err != nil {
		return nil, err
	}
	if c.strat.deviceMemory() {
		if err := c.admitDeviceMemory(); err != nil {
			return nil, errors.Join(err, c.teardown(true))
		}
	}
	return c, nil
}

// build makes a Comm around base, which it owns from here on (freed on
// failure). parent, for Split, lends its device and agreed settings.
// Every rank of base calls it; a failure on any rank fails every rank.
// MPI has been acquired once for the new Comm, and build releases that
// reference when it fails.
func build(cfg Config, base *mpi.Comm, parent *Comm, opName string) (c *Comm, err error) {
	c = &Comm{backend: cfg.Backend, strat: strategyOf(cfg.Mode), coll: base, rank: base.Rank(), size: base.Size()}
	c.cond = sync.NewCond(&c.mu)
	c.sendSeq, c.recvSeq = make([]uint64, c.size), make([]uint64, c.size)
	c.multiple = mpi.ThreadLevel() == mpi.ThreadMultiple
	defer func() {
		if err != nil {
			err = driver.Wrap(c.backend, opName, c.rank, errors.Join(err, c.teardown(true)))
			c = nil
		}
	}()
	if c.p2p, err = base.Dup(); err != nil {
		return c, err
	}
	if c.ctl, err = base.Dup(); err != nil {
		return c, err
	}
	node, err := base.SplitShared()
	if err != nil {
		return c, err
	}
	c.localRank, c.localSize = node.Rank(), node.Size()
	mates, err := mpi.AllgatherValues(node, []int64{int64(c.rank)})
	if err != nil {
		return c, errors.Join(err, node.Free())
	}
	c.onNode = make([]bool, c.size)
	for _, r := range mates {
		c.onNode[r] = true
	}

	o := cfg.Options
	localErr := c.setUpLocal(o, parent)
	if localErr == nil && c.dev.Kind() == devmem.CUDA && (c.strat.deviceMemory() || mpiSaysCUDAAware()) {
		// MPI will see device memory, or could: its own CUDA calls need
		// the device's context on the threads that call it.
		UseDeviceForMPI(c.dev)
	}
	nodeMin := o.NodeBytes
	if nodeMin == 0 {
		nodeMin = nodepath.DefaultBytes
	}
	if parent != nil {
		nodeMin = parent.nodeMin
	}
	// Whether the ranks of the node can map each other's pinned memory:
	// every rank of the node takes part (the condition is the same on all
	// of them), set up or not, node path wanted or not.
	var reach []bool // the ranks this rank reaches through the IPC path
	alone := false   // no other rank on this node: no vote on the node path
	if c.strat.nodePath() && c.localSize > 1 && (parent == nil || parent.nodeMin > 0) {
		if err := c.probeNode(node, localErr == nil && nodeMin > 0); err != nil {
			nodeMin = 0
		}
		ipcOn, envErr := ipcWanted()
		if envErr == nil {
			// Read here, where a bad value fails every rank's Open
			// together; setUpOrder reads it again, valid by then.
			_, envErr = ipcEventsWanted(c.size, false)
		}
		if envErr != nil && localErr == nil {
			localErr = envErr
		}
		// Every rank of the node takes part, wanted or not.
		if reach, err = c.probeIPC(node, mates, localErr == nil && nodeMin > 0 && ipcOn); err != nil {
			reach = nil
			c.ipc.why = fmt.Sprintf("the probe of the node's devices failed (%v)", err)
		} else if !ipcOn {
			c.ipc.why = IPCEnv + "=off on this rank"
		}
	} else {
		// A rank alone on its node has no pair to take the node path with:
		// it abstains, where a vote to turn it off would turn it off for
		// the nodes that do have several ranks (2 nodes with 2 and 1 ranks).
		alone = c.strat.nodePath() && c.localSize <= 1 && (parent == nil || parent.nodeMin > 0) && nodeMin > 0
		nodeMin = 0
	}
	if err := node.Free(); err != nil {
		return c, errors.Join(localErr, err)
	}
	chunk := o.ChunkBytes
	if chunk == 0 {
		chunk = pipeline.DefaultChunkBytes
	}
	stage := o.StageReduceBytes
	switch {
	case parent != nil:
		stage = parent.stageReduce
	case !c.strat.stagesLarge():
		stage = 0 // every reduction is staged anyway
	case stage == 0 && localErr == nil && c.dev.Kind() == devmem.CUDA && strings.HasPrefix(mpi.Version(), "Open MPI v4."):
		stage = defaultStageReduceBytes // measured there only
	}
	// The ranks must agree on the chunk (message boundaries), on Debug
	// (collectives on ctl) and on announcing (messages on ctl), and on
	// whether every rank is ready, and on the node path and on staged
	// reductions (each off on every rank if off on one, else the largest
	// threshold); one Allreduce(max) settles them all (agreement).
	want := agreement{failed: localErr != nil, debug: o.Debug, announce: o.Timeout > 0, chunk: chunk,
		nodeOff: nodeMin <= 0 && !alone, nodeMin: max(nodeMin, 0), stageOff: stage <= 0, stage: max(stage, 0), ipc: reach != nil,
		ipcPartial: !reachesAll(reach, c.rank), serialised: !c.multiple}
	if parent != nil {
		want.debug, want.announce, want.chunk = parent.debug, parent.announce, parent.chunk
	}
	got, err := want.settle(c.ctl)
	if err != nil {
		return c, errors.Join(localErr, err)
	}
	if localErr != nil {
		return c, localErr
	}
	if got.failed {
		return c, fmt.Errorf("another rank failed to set up its side of the communicator: %w", comm.ErrUnsupported)
	}
	c.debug, c.announce, c.chunk = got.debug, got.announce, got.chunk
	c.blockSmall = !got.announce && !got.serialised
	// Without Debug a collective of nothing needs no meeting: Front skips it.
	c.Front = driver.NewFront(driver.FrontConfig{Backend: c.backend, Rank: c.rank, Size: c.size, Device: c.dev, SkipEmpty: !c.debug}, frontEngine{c})
	if !got.nodeOff {
		c.nodeMin = got.nodeMin
	}
	if !got.stageOff {
		c.stageReduce = got.stage
	}
	if c.nodeMin > 0 && got.ipc {
		// Some pair has the IPC path: every rank makes its communicators.
		ipcErr := c.setUpIPC(reach)
		// Every rank learns whether any failed (its streams, its cache),
		// so that none goes on to the collectives of Open that a failed
		// rank would skip.
		v := []int64{b2i(ipcErr != nil)}
		if err := mpi.AllreduceInt64s(c.ctl, v, mpi.Max); err != nil {
			return c, errors.Join(ipcErr, err)
		}
		if ipcErr != nil {
			return c, ipcErr
		}
		if v[0] != 0 {
			return c, fmt.Errorf("another rank failed to set up the node's IPC path: %w", comm.ErrUnsupported)
		}
		if err := c.setUpP2POrder(); err != nil {
			return c, err
		}
		c.ipcAll = !got.ipcPartial
		if c.ipcAll {
			if err := c.setUpOrder(); err != nil {
				return c, err
			}
		}
	}
	c.eng.Pool = pipeline.NewPool(c.dev, c.policy().PoolBase())
	c.timeout = o.Timeout
	if parent != nil {
		c.timeout = parent.timeout
	}
	if parent != nil {
		c.widenBytes = parent.widenBytes
	} else if c.widenBytes, err = saturatingByteSums(c.ctl); err != nil {
		return c, err
	}
	if c.announce {
		c.ann = newAnnouncer(c)
		if err := c.ann.start(); err != nil {
			return c, err
		}
	}
	live.add(c)
	return c, nil
}

// agreement is what the ranks of a new communicator settle together: each
// flag is true on every rank if it is on any, the sizes are the largest any
// rank asks for, and the chunk the smallest.
type agreement struct {
	failed   bool // some rank could not set up its side
	debug    bool
	announce bool // some rank has a timeout
	chunk    int
	nodeOff  bool // some rank has the node path off
	nodeMin  int
	stageOff bool // some rank has staged reductions off
	stage    int
	ipc      bool // some rank reaches a peer through the IPC path
	// some rank does not reach every other (or is on another node)
	ipcPartial bool
	serialised bool // some rank's MPI is below MPI_THREAD_MULTIPLE
}

// settle is one Allreduce(max) of the agreement over ctl.
func (a agreement) settle(ctl *mpi.Comm) (agreement, error) {
	v := []int64{b2i(a.failed), b2i(a.debug), b2i(a.announce), -int64(a.chunk),
		b2i(a.nodeOff), int64(a.nodeMin), b2i(a.stageOff), int64(a.stage), b2i(a.ipc), b2i(a.ipcPartial), b2i(a.serialised)}
	if err := mpi.AllreduceInt64s(ctl, v, mpi.Max); err != nil {
		return agreement{}, err
	}
	return agreement{failed: v[0] != 0, debug: v[1] != 0, announce: v[2] != 0, chunk: int(-v[3]),
		nodeOff: v[4] != 0, nodeMin: int(v[5]), stageOff: v[6] != 0, stage: int(v[7]), ipc: v[8] != 0, ipcPartial: v[9] != 0, serialised: v[10] != 0}, nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// setUpLocal picks the device and makes what this rank alone needs: the copy
// streams, the staging pool and the pinned control cells.
func (c *Comm) setUpLocal(o comm.Options, parent *Comm) error {
	if parent != nil {
		c.dev, c.eng.Trace = parent.dev, parent.eng.Trace
	} else {
		t, err := pipeline.NewTracer(os.Getenv(pipeline.TraceEnv))
		if err != nil {
			return err
		}
		c.eng.Trace = t
		dev, err := devmem.Open(o.Device, c.localRank)
		if err != nil {
			return err
		}
		c.dev = dev
	}
	var err error
	c.eng.Rank = c.rank
	if c.eng.D2H, err = c.dev.NewStream(); err != nil {
		return err
	}
	if c.eng.H2D, err = c.dev.NewStream(); err != nil {
		return err
	}
	// 8 bytes a rank for incoming announcements, a ring for outgoing ones,
	// and two words for the debug digest.
	if c.ctlBuf, err = c.dev.AllocPinned(8 * (c.size + annRing + 2)); err != nil {
		return err
	}
	return nil
}

// teardown releases whatever build and the operations made, in any state
// of completion, and MPI's reference. After a failed Open or Split
// (failed), MPI stays up even if this was its last user: the program may
// open another communicator, and MPI cannot be initialised twice.
func (c *Comm) teardown(failed bool) error {
	live.remove(c)
	var errs []error
	if c.ann != nil {
		errs = append(errs, c.ann.stop())
	}
	errs = append(errs, c.nodes.Close())
	errs = append(errs, c.closeIPC())
	if c.eng.Pool != nil {
		if c.smallSlot != nil {
			c.eng.Pool.Give(c.smallSlot)
			c.smallSlot = nil
		}
		errs = append(errs, c.eng.Pool.Close())
	}
	if !c.ctlBuf.IsZero() {
		errs = append(errs, c.ctlBuf.Free())
	}
	for _, s := range []*devmem.Stream{c.eng.D2H, c.eng.H2D} {
		if s != nil {
			errs = append(errs, s.Destroy())
		}
	}
	for _, m := range []*mpi.Comm{c.ctl, c.p2p, c.coll} {
		if m != nil {
			errs = append(errs, m.Free())
		}
	}
	if failed {
		errs = append(errs, mpi.ReleaseKeepingUp())
	} else {
		errs = append(errs, mpi.Release())
	}
	return errors.Join(errs...)
}

// Close waits for the operations already running, and for the peers to
// take the messages this rank sent them through the node path (which live
// in this process's memory; with a timeout, at most that long, then Close
// fails with ErrTimeout naming them), then releases the communicator. On a communicator broken by a timeout (or by an operation
// that failed half way, leaving MPI requests pending), it writes why to
// standard error and calls MPI_Abort, which ends every process of the job:
// the ranks are out of step, and MPI_Finalize could wait for them forever.
// With a timeout, Close is also a barrier: the ranks meet before they
// release anything, so that a rank that closes while another is stuck waits
// there, not in MPI_Finalize (where Open MPI 4.1.4's mpirun can deadlock on
// its own when the stuck rank then ends the job).
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return driver.Errorf(c.backend, "Close", c.rank, comm.ErrClosed, "closed twice")
	}
	c.closed = true
	c.unusable.Store(true)
	c.cond.Broadcast()
	for c.running > 0 {
		c.cond.Wait()
	}
	broken := c.broken
	c.mu.Unlock()
	var undelivered error
	if broken == nil {
		undelivered = c.awaitTaken(c.timeout)
	}
	if broken == nil && c.announce {
		broken = c.closeTogether()
	}
	if broken != nil {
		c.abortJob(fmt.Sprintf("Close of a broken communicator (%v): calling MPI_Abort so that no rank hangs in MPI_Finalize", broken),
			"Close of a broken communicator: "+broken.Error())
	}
	if err := errors.Join(undelivered, c.teardown(false)); err != nil {
		return driver.Wrap(c.backend, "Close", c.rank, err)
	}
	return nil
}

// abortGrace is how long Close and Abort wait between saying why they
// abort and MPI_Abort.
const abortGrace = 200 * time.Millisecond

// Abort gives up on the job of a rank that cannot go on (comm.Aborter): it
// says why on standard error (and writes the flight records, with
// recording on), then calls MPI_Abort, which ends every process of the
// job, this one included, so that no rank waits for this one for ever. It
// does not return, and takes no lock: it works while another goroutine of
// this rank is stuck in MPI or in an operation of this communicator.
func (c *Comm) Abort(reason error) {
	if c == nil {
		return
	}
	if reason == nil {
		reason = errors.New("no reason given")
	}
	c.abortJob(fmt.Sprintf("Abort: %v: calling MPI_Abort, which ends every process of the job", reason), "Abort: "+reason.Error())
}

// abortJob says line on standard error as this rank's, writes the flight
// records with trace as their reason, and ends the job with MPI_Abort.
func (c *Comm) abortJob(line, trace string) {
	fmt.Fprintf(os.Stderr, "gpucomm %s rank %d: %s\n", c.backend, c.rank, line)
	// The flight records (with recording on) would die with the process:
	// a collective that MPI failed at once, unlike a timeout, wrote none.
	driver.ReportTraces(trace)
	// The launcher forwards output asynchronously, and MPICH's stops
	// forwarding once a rank aborts: give it a moment to pass on why.
	time.Sleep(abortGrace)
	mpi.World().Abort(1)
}

// closeTogether is the barrier of Close under a timeout: it returns once
// every rank has reached it, or with why MPI failed. It never gives up by
// itself: ranks stuck in an operation end the job when their own timeout
// passes, and a healthy rank that is merely late to Close arrives. Past
// twice the timeout it says once on standard error whom it waits for, so
// that ranks closing communicators in different orders (which MPI forbids)
// do not wait in silence. It polls, so that below MPI_THREAD_MULTIPLE the
// other communicators of the process keep running meanwhile.
func (c *Comm) closeTogether() error {
	r, err := c.ctl.Ibarrier()
	if err != nil {
		return fmt.Errorf("the barrier of Close: %w", err)
	}
	reqs := []*mpi.Request{r}
	warn := 2 * c.timeout
	if warn == 0 { // this rank has no timeout; another rank has one
		warn = time.Minute
	}
	for said := false; ; said = true {
		err := mpi.WaitTimeout(reqs, warn)
		if !errors.Is(err, comm.ErrTimeout) {
			if err != nil {
				return fmt.Errorf("the barrier of Close: %w", err)
			}
			return nil
		}
		if !said {
			fmt.Fprintf(os.Stderr, "gpucomm %s rank %d: Close has waited %v for the other ranks to close this communicator too (every rank closes its communicators in the same order)\n",
				c.backend, c.rank, warn)
		}
	}
}

// Split makes a communicator of the ranks giving the same color: MPI_Comm_split
// on the point-to-point communicator (which carries no other collective, so
// Split need not wait for collectives queued on streams), then the same
// set-up as Open on the device of c.
func (c *Comm) Split(color, key int) (comm.Communicator, error) {
	call := driver.Call{Operation: driver.OpSplit}
	if err := c.Check(call); err != nil {
		return nil, err
	}
	bad := driver.SplitRefusal(color, key)
	if err := c.begin(); err != nil {
		return nil, c.wrap(driver.OpSplit, err)
	}
	defer c.end()
	o := c.newOp(call, 0)
	var nc *mpi.Comm
	err := c.block(o, func() error {
		// The ranks first tell each other whether each can split, so that
		// a bad color on one rank fails every rank, where the others would
		// wait in MPI_Comm_split for it.
		if err := agreeToSplit(c.p2p, bad); err != nil {
			return err
		}
		var err error
		nc, err = c.p2p.Split(color, key)
		return err
	})
	if err != nil {
		if errors.Is(err, comm.ErrTimeout) {
			err = fmt.Errorf("Split(color=%d key=%d): no progress after %v; some rank never called it: %w", color, key, c.timeout, err)
			c.setBroken(err)
		}
		return nil, c.wrap(driver.OpSplit, err)
	}
	if nc == nil {
		return nil, nil
	}
	if err := mpi.Acquire(); err != nil {
		return nil, c.wrap(driver.OpSplit, errors.Join(err, nc.Free()))
	}
	sub, err := build(Config{Backend: c.backend, Mode: c.strat.mode()}, nc, c, "Split")
	if err != nil {
		return nil, err
	}
	return sub, nil
}

// agreeToSplit tells every rank of pc why each rank cannot split (bad:
// this rank's driver.SplitRefusal): nil when every rank can, else
// driver.SplitRefusals's error.
func agreeToSplit(pc *mpi.Comm, bad string) error {
	all, err := mpi.AllgatherBytes(pc, []byte(bad))
	if err != nil {
		return fmt.Errorf("telling the ranks whether each can split: %w", err)
	}
	return driver.SplitRefusals(all)
}

// saturatingByteSums asks MPI to sum 8-bit vectors that overflow and reports
// whether the result saturated. Collective over c.
func saturatingByteSums(c *mpi.Comm) (bool, error) {
	if c.Size() < 2 {
		return false, nil // nothing is ever combined
	}
	u, s := make([]uint8, 256), make([]int8, 256)
	for i := range u {
		u[i], s[i] = 200, 100
	}
	if err := mpi.AllreduceValues(c, u, mpi.Sum); err != nil {
		return false, err
	}
	if err := mpi.AllreduceValues(c, s, mpi.Sum); err != nil {
		return false, err
	}
	wantU, wantS := uint8(200*c.Size()), int8(100*c.Size())
	for i := range u {
		if u[i] != wantU || s[i] != wantS {
			return true, nil
		}
	}
	return false, nil
}

// The extras programs find by type assertion (comm/extras.go).
var (
	_ comm.Staging    = (*Comm)(nil)
	_ comm.NodePath   = (*Comm)(nil)
	_ comm.MPIThreads = (*Comm)(nil)
)
