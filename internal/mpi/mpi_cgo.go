//go:build (mpi || mpich) && !(mpi && mpich) && cgo

package mpi

/*
#cgo LDFLAGS: -ldl
#include "gpucomm_mpi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gpucomm/gpucomm/internal/errs"
)

const (
	stateDown int32 = iota
	stateUp
	stateFinalized
)

var (
	lifeMu        sync.Mutex   // serialises Init, Acquire, Release and Finalize
	state         atomic.Int32 // read by every call without lifeMu
	acquired      int          // Acquire calls not yet Released
	programRef    bool         // the reference Init takes and Finalize drops
	owned         bool         // this package called MPI_Init_thread, so it finalizes
	provided      ThreadSupport
	tagUB         int
	finalizeCalls int           // MPI_Finalize calls made here; the tests check it ends at 1
	joinErr       error         // MPI_Init did not join the launcher's job (sizeMismatch)
	initThread    *osThread     // the thread that ran MPI_Init_thread, kept for MPI_Finalize
	finalizeBound time.Duration // FinalizeBoundEnv, read by bringUpLocked
	// finalizeLeft: the bound passed with MPI_Finalize still running.
	finalizeLeft bool
	// stallFinalize, in this package's tests, holds a rank this long
	// between the final barrier and MPI_Finalize, as the MPICH hang does.
	stallFinalize time.Duration

	// MPICH before 4.2 crashes in MPI_Reduce with MPI_IN_PLACE at a root
	// other than 0 (pmodels/mpich#6540); Reduce then runs on a copy of the
	// communicator whose rank 0 is the root.
	rotateReduceRoot bool

	// Below MPI_THREAD_MULTIPLE, MPI may be entered by one thread at a time.
	serialize atomic.Bool
	callMu    sync.Mutex

	world = &Comm{world: true, rank: -1}
)

// Built reports whether this binary was built with MPI (tag mpi or mpich).
func Built() bool { return true }

// Family is "openmpi" or "mpich": the ABI this binary was built against.
func Family() string { return family }

// osThread runs functions on one locked OS thread. MPI wants MPI_Finalize on
// the thread that called MPI_Init_thread; goroutines move between threads.
type osThread struct{ work chan func() }

func startOSThread() *osThread {
	t := &osThread{work: make(chan func())}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		for f := range t.work {
			f()
		}
	}()
	return t
}

func (t *osThread) run(f func()) {
	done := make(chan struct{})
	t.work <- func() { f(); close(done) }
	<-done
}

func (t *osThread) stop() { close(t.work) }

func requestedLevel() (ThreadSupport, error) {
	v := os.Getenv(ThreadLevelEnv)
	for l := ThreadSingle; l <= ThreadMultiple; l++ {
		if v == l.String() {
			return l, nil
		}
	}
	if v == "" {
		return ThreadMultiple, nil
	}
	return 0, fmt.Errorf("mpi: %s=%q: want single, funneled, serialized or multiple: %w", ThreadLevelEnv, v, errs.ErrInvalidArgument)
}

// Init makes MPI usable and takes the program's reference to it. It is
// idempotent: later calls do nothing until Finalize. If MPI was initialised
// by someone else, Init uses it and never finalizes it. MPI can be
// initialised once per process: after Finalize, Init fails with an error
// wrapping errs.ErrClosed.
//
// Init asks for MPI_THREAD_MULTIPLE (see ThreadLevelEnv). When MPI provides
// less, every call of this package is serialised behind one lock; a blocking
// call then holds it, so goroutines that need each other's messages must use
// nonblocking calls and WaitTimeout.
func Init() error {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	if programRef {
		return nil
	}
	if err := bringUpLocked(); err != nil {
		return err
	}
	programRef = true
	return nil
}

// Finalize drops the reference Init took. MPI_Finalize runs when no
// reference is left (Init's and every Acquire's), exactly once, and only if
// this package initialised MPI. Without Init, Finalize ends MPI left up by
// ReleaseKeepingUp when nothing holds it, and otherwise does nothing.
func Finalize() error {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	programRef = false
	return shutDownLocked()
}

// Acquire takes a counted reference to MPI, initialising it if needed, for
// code (a backend) that must keep MPI up while it lives. Pair each Acquire
// with a Release.
func Acquire() error {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	if err := bringUpLocked(); err != nil {
		return err
	}
	acquired++
	return nil
}

// Release drops a reference taken by Acquire; the last reference to go
// finalizes MPI as Finalize describes.
func Release() error {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	if err := dropLocked(); err != nil {
		return err
	}
	return shutDownLocked()
}

// dropLocked drops one Acquire reference.
func dropLocked() error {
	if acquired == 0 {
		return fmt.Errorf("mpi: Release without a matching Acquire: %w", errs.ErrInvalidArgument)
	}
	acquired--
	return nil
}

// ReleaseKeepingUp drops a reference taken by Acquire, like Release, but
// leaves MPI up even when it was the last: for a communicator whose Open
// failed, so that the program can still open another (MPI cannot be
// initialised twice in a process). MPI then ends with the last Release of a
// later Acquire, or with Finalize.
func ReleaseKeepingUp() error {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	return dropLocked()
}

// Initialized reports whether MPI is up and usable by this package.
func Initialized() bool { return state.Load() == stateUp }

func bringUpLocked() error {
	switch state.Load() {
	case stateUp:
		if !owned && C.gc_is_finalized() != 0 { // its owner finalized it
			state.Store(stateFinalized)
			return errFinalized
		}
		return nil
	case stateFinalized:
		if joinErr != nil {
			return joinErr
		}
		return errFinalized
	}
	if C.gc_is_finalized() != 0 {
		state.Store(stateFinalized)
		return errFinalized
	}
	level, err := requestedLevel()
	if err != nil {
		return err
	}
	if err := launcherConflict(family, os.LookupEnv); err != nil {
		return err
	}
	bound, boundIgnored, err := finalizeBoundIn(family, os.Getenv(FinalizeBoundEnv))
	if err != nil {
		return err
	}
	var rc, prov, own C.int
	t := startOSThread()
	t.run(func() { rc = C.gc_init(C.int(level), &prov, &own) })
	if own == 0 {
		t.stop() // MPI belongs to someone else, who finalizes it
		t = nil
	}
	if err := check("MPI_Init_thread", rc); err != nil {
		if t != nil {
			t.stop()
		}
		return err
	}
	catchLauncherNotice()
	var rank, size, ub C.int
	if err := check("MPI_Comm_rank", C.gc_comm_rank_size(C.gc_comm_world(), &rank, &size)); err != nil {
		return err
	}
	if err := check("MPI_Comm_get_attr", C.gc_tag_ub(&ub)); err != nil {
		return err
	}
	if err := sizeMismatch(family, int(size), os.LookupEnv); err != nil {
		// Not this launcher's job: MPI ends here (if it is ours), and every
		// later Init or Acquire gives the same reason.
		joinErr = err
		state.Store(stateFinalized)
		if own != 0 {
			var called C.int
			t.run(func() { C.gc_finalize(&called) })
			t.stop()
			finalizeCalls += int(called)
		}
		return err
	}
	world.h, world.rank, world.size = C.gc_comm_world(), int(rank), int(size)
	owned, initThread, provided, tagUB = own != 0, t, ThreadSupport(prov), int(ub)
	finalizeBound = bound
	if boundIgnored != "" && rank == 0 {
		fmt.Fprint(os.Stderr, boundIgnored)
	}
	rotateReduceRoot = hasReduceRootBug(Version())
	serialize.Store(provided < ThreadMultiple)
	state.Store(stateUp) // last: a call that sees stateUp sees the fields above
	return nil
}

// launcherNotice takes SIGUSR1 for the Go runtime, and nobody reads it.
var launcherNotice = make(chan os.Signal, 1)

// catchLauncherNotice makes SIGUSR1, a launcher's notice, harmless on every
// thread of a rank. Hydra (-disable-auto-cleanup) sends it to every rank
// when one dies, and Open MPI's mpirun passes on the one it gets. Go takes
// no action on a signal nobody asked for when it arrives on a thread of
// Go's, but on a thread that Go did not make (UCX's async thread, Open MPI's
// progress threads) it raises it again with the default action, and the
// rank dies of SIGUSR1. Asked for here (the channel keeps one and drops the
// rest, os/signal never blocks on it), it is caught on every thread, MPI's
// handler (MPICH counts the notices) still seeing it first. gc_init gave
// that handler SA_ONSTACK, without which a notice that landed on a thread
// running Go code stopped the Go runtime. GPUCOMM_TRACE_SIGNAL=USR1 still
// writes the flight records on the notice; FinalizeBoundEnv's bound still
// ignores it from the barrier on. A program that ignored SIGUSR1 before
// MPI started keeps it ignored (MPICH's handler then passes it on to
// nothing). From here on the rank owns SIGUSR1: a program that resets it
// (signal.Reset) lets a notice on one of MPI's threads end the rank again.
func catchLauncherNotice() {
	if !signal.Ignored(syscall.SIGUSR1) {
		signal.Notify(launcherNotice, syscall.SIGUSR1)
	}
}

func shutDownLocked() error {
	if acquired > 0 || programRef || state.Load() != stateUp || !owned {
		return nil
	}
	state.Store(stateFinalized) // first: no new call starts
	if finalizeBound > 0 {
		return finalizeWithin(finalizeBound)
	}
	var rc, called C.int
	initThread.run(func() {
		defer setupLeave(setupEnter()) // a CUDA-aware MPI closes its IPC handles here
		rc = C.gc_finalize(&called)
	})
	initThread.stop()
	initThread = nil
	finalizeCalls += int(called)
	return check("MPI_Finalize", rc)
}

// finalizeWithin is MPI_Finalize bounded as FinalizeBoundEnv says: a
// barrier on MPI_COMM_WORLD, then MPI_Finalize, given bound from the moment
// every rank has passed the barrier. When the bound passes first, the call
// is left running on the thread that made it, and finalizeWithin says so on
// stderr and returns nil, so that the program ends with its own status. A
// failed barrier is returned, and MPI_Finalize then runs unbounded: a rank
// is missing, and the launcher's bound is the one for that.
func finalizeWithin(bound time.Duration) error {
	t := initThread
	initThread = nil
	finalizeCalls++
	stall := stallFinalize
	var barrierRC, rc C.int
	var tid int
	passed, done := make(chan struct{}), make(chan struct{})
	go func() {
		t.run(func() {
			defer setupLeave(setupEnter()) // a CUDA-aware MPI closes its IPC handles here
			tid = syscall.Gettid()
			barrierRC = C.gc_barrier(C.gc_comm_world())
			close(passed)
			time.Sleep(stall)
			var called C.int
			rc = C.gc_finalize(&called)
		})
		t.stop()
		close(done)
	}()
	<-passed
	if err := check("MPI_Barrier before MPI_Finalize", barrierRC); err != nil {
		<-done
		return errors.Join(err, check("MPI_Finalize", rc))
	}
	// From here on a rank may end with MPI_Finalize unfinished, and Hydra
	// (-disable-auto-cleanup) sends SIGUSR1 to every other rank when one
	// ends so: ignored, it reaches no handler at all while MPI winds down
	// (catchLauncherNotice makes it harmless before that).
	signal.Ignore(syscall.SIGUSR1)
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-done:
		return check("MPI_Finalize", rc)
	case <-timer.C:
	}
	// In MPICH's hang one rank spins in UCX's progress loop while the
	// others sleep in the launcher's PMI barrier. A sleeper that left
	// first would let the spinner through (its peer's connection closes),
	// the barrier would complete, and Hydra's proxy, answering a process
	// that is gone, would fail the job (exit 255). So a sleeper gives the
	// spinner finalizeStagger to leave first, and still returns normally
	// if MPI_Finalize completes meanwhile.
	how := "spinning"
	if threadSleeps(tid) {
		how = "waiting"
		timer.Reset(finalizeStagger)
		select {
		case <-done:
			return check("MPI_Finalize", rc)
		case <-timer.C:
		}
	}
	finalizeLeft = true
	fmt.Fprintf(os.Stderr, "gpucomm: rank %d: %s %v after every rank passed the barrier before it (%s); "+
		"left running (%s, for the MPICH 4.0.2 + UCX finalize hang), the program goes on to end with its own exit status\n",
		world.rank, FinalizeLeftLine, bound, how, FinalizeBoundEnv)
	return nil
}

// finalizeStagger is how much longer than the bound a rank whose
// MPI_Finalize sleeps gives one whose MPI_Finalize spins.
const finalizeStagger = 2 * time.Second

// threadSleeps reports whether thread tid of this process stayed asleep
// (not running, "R" in /proc) over ten looks 20 ms apart.
func threadSleeps(tid int) bool {
	path := fmt.Sprintf("/proc/self/task/%d/stat", tid)
	for i := range 10 {
		if i > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		// "tid (comm) S ...": the state follows the last ')'.
		st := string(b)
		if j := strings.LastIndexByte(st, ')'); j < 0 || j+2 >= len(st) || st[j+2] == 'R' {
			return false
		}
	}
	return true
}

// hasReduceRootBug reports whether the library is an MPICH older than 4.2,
// from its MPI_Get_library_version ("MPICH Version: 4.0.2 ...").
func hasReduceRootBug(version string) bool {
	const marker = "MPICH Version:"
	i := strings.Index(version, marker)
	if i < 0 {
		return false
	}
	var major, minor int
	if n, _ := fmt.Sscanf(strings.TrimSpace(version[i+len(marker):]), "%d.%d", &major, &minor); n != 2 {
		return false
	}
	return major < 4 || (major == 4 && minor < 2)
}

// ThreadLevel is the thread support MPI provided (ThreadSingle before Init).
func ThreadLevel() ThreadSupport {
	if state.Load() != stateUp {
		return ThreadSingle
	}
	return provided
}

// Version is MPI_Get_library_version: the library's name, version and build,
// possibly several lines. It works before Init.
func Version() string {
	buf := make([]byte, C.MPI_MAX_LIBRARY_VERSION_STRING)
	var n C.int
	if C.gc_library_version((*C.char)(unsafe.Pointer(&buf[0])), &n) != C.MPI_SUCCESS {
		return ""
	}
	return strings.TrimSpace(strings.TrimRight(string(buf[:min(int(n), len(buf))]), "\x00"))
}

// LibraryFile is the path of the MPI shared library this process loaded
// (the one LD_LIBRARY_PATH picked), or "" when it cannot be told.
func LibraryFile() string {
	p := C.gc_library_file()
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// CUDAAwareQuery asks the library whether it can take CUDA device pointers:
// Open MPI through MPIX_Query_cuda_support, MPICH through
// MPIX_GPU_query_support. known is false when the library has no way to say
// or MPI is not up (the answers are only valid after MPI_Init).
func CUDAAwareQuery() (known bool, aware bool) {
	if state.Load() != stateUp {
		return false, false
	}
	var k, a C.int
	b := enter()
	C.gc_cuda_aware(&k, &a)
	leave(b)
	return k != 0, a != 0
}

// setupEnter runs the thread setup, if any, and returns what setupLeave
// needs: no allocation, so the calls that allocate nothing stay so.
func setupEnter() *setupBox {
	b := threadSetup.Load()
	if b != nil {
		b.s.Enter()
	}
	return b
}

func setupLeave(b *setupBox) {
	if b != nil {
		b.s.Leave()
	}
}

// enter prepares for one MPI call: the thread setup (SetThreadSetup), then
// the lock when MPI is not thread-multiple. Use as defer leave(enter()).
func enter() *setupBox {
	b := setupEnter()
	if serialize.Load() {
		callMu.Lock()
	}
	return b
}

func leave(b *setupBox) {
	if serialize.Load() {
		callMu.Unlock()
	}
	setupLeave(b)
}

// call runs one MPI call, under the lock when MPI is not thread-multiple,
// and turns its return code into an error.
func call(name string, f func() C.int) error {
	defer leave(enter())
	return check(name, f())
}

// check turns an MPI return code into nil or an *Error. Callers that
// serialise hold the lock: MPI_Error_string is an MPI call too.
func check(name string, rc C.int) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	buf := make([]byte, C.MPI_MAX_ERROR_STRING)
	var n C.int
	cls := C.int(-1)
	msg := "unknown MPI error"
	if C.gc_error_string(rc, (*C.char)(unsafe.Pointer(&buf[0])), &n, &cls) == C.MPI_SUCCESS {
		msg = strings.TrimSpace(strings.TrimRight(string(buf[:min(int(n), len(buf))]), "\x00"))
	}
	e := &Error{Call: name, Code: int(rc), Class: int(cls), Msg: msg, truncated: C.gc_class_is_truncate(cls) != 0}
	if C.gc_class_is_argument(cls) != 0 {
		e.kind = errs.ErrInvalidArgument
	}
	return e
}

var (
	errNotInitialized = fmt.Errorf("mpi: MPI is not initialised (call Init or Acquire first): %w", errs.ErrClosed)
	errFinalized      = fmt.Errorf("mpi: MPI has been finalized and cannot be initialised again: %w", errs.ErrClosed)
)

func argError(name, format string, args ...any) error {
	return fmt.Errorf("mpi: %s: %s: %w", name, fmt.Sprintf(format, args...), errs.ErrInvalidArgument)
}

// upError says why MPI cannot be called now (nil when it is up); name is
// the Go call's, without the package prefix, so that the hot path builds
// no string.
func upError(name string) error {
	switch state.Load() {
	case stateUp:
		return nil
	case stateFinalized:
		return fmt.Errorf("mpi: %s: %w", name, errFinalized)
	}
	return fmt.Errorf("mpi: %s: %w", name, errNotInitialized)
}

// Comm is a communicator. The zero value is not usable: get one from World,
// Dup, Split or SplitShared. A Comm may be used by several goroutines at once
// (each collective on one Comm must still be called in the same order on
// every rank, so concurrent collectives want one Comm per goroutine).
type Comm struct {
	h     C.MPI_Comm
	rank  int
	size  int
	world bool
	freed atomic.Bool

	rootMu sync.Mutex
	rooted map[int]*Comm // see rotateReduceRoot: root -> c with root as rank 0
}

// World is MPI_COMM_WORLD, with MPI_ERRORS_RETURN set. Before Init its Rank
// is -1 and its calls fail.
func World() *Comm { return world }

// Rank is this process's rank in c, -1 for a nil Comm.
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.rank
}

// Size is the number of ranks in c, 0 for a nil Comm.
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.size
}

func (c *Comm) ready(name string) error {
	if c == nil {
		return argError(name, "nil communicator")
	}
	if err := upError(name); err != nil {
		return err
	}
	if c.freed.Load() {
		return fmt.Errorf("mpi: %s: the communicator was freed: %w", name, errs.ErrClosed)
	}
	return nil
}

func adopt(h C.MPI_Comm) (*Comm, error) {
	var rank, size C.int
	if err := call("MPI_Comm_rank", func() C.int { return C.gc_comm_rank_size(h, &rank, &size) }); err != nil {
		_ = call("MPI_Comm_free", func() C.int { return C.gc_comm_free(&h) })
		return nil, err
	}
	return &Comm{h: h, rank: int(rank), size: int(size)}, nil
}

// Dup is MPI_Comm_dup: a communicator with the same ranks whose messages
// never match c's. Collective: every rank of c calls it. Free it when done.
func (c *Comm) Dup() (*Comm, error) {
	if err := c.ready("Dup"); err != nil {
		return nil, err
	}
	var h C.MPI_Comm
	if err := call("MPI_Comm_dup", func() C.int { return C.gc_comm_dup(c.h, &h) }); err != nil {
		return nil, err
	}
	return adopt(h)
}

// Split is MPI_Comm_split: ranks with the same color form one communicator,
// ordered by key, then by rank in c. A negative color (MPI_UNDEFINED) takes no
// part and gets nil, nil. Collective over c.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if err := c.ready("Split"); err != nil {
		return nil, err
	}
	if color > math.MaxInt32 || key > math.MaxInt32 || key < math.MinInt32 {
		return nil, argError("Split", "color %d or key %d does not fit a C int", color, key)
	}
	if color < 0 {
		color = -1
	}
	var h C.MPI_Comm
	var isNull C.int
	if err := call("MPI_Comm_split", func() C.int { return C.gc_comm_split(c.h, C.int(color), C.int(key), &h, &isNull) }); err != nil {
		return nil, err
	}
	if isNull != 0 {
		return nil, nil
	}
	return adopt(h)
}

// SplitShared is MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) with key = rank:
// the ranks that share this node's memory, in c's order. Its Rank is the
// local rank that picks a GPU. Collective over c.
func (c *Comm) SplitShared() (*Comm, error) {
	if err := c.ready("SplitShared"); err != nil {
		return nil, err
	}
	var h C.MPI_Comm
	var isNull C.int
	if err := call("MPI_Comm_split_type", func() C.int { return C.gc_comm_split_shared(c.h, C.int(c.rank), &h, &isNull) }); err != nil {
		return nil, err
	}
	if isNull != 0 {
		return nil, fmt.Errorf("mpi: SplitShared: MPI returned no communicator: %w", errs.ErrUnsupported)
	}
	return adopt(h)
}

// Free is MPI_Comm_free. Collective over c. World cannot be freed; a freed
// Comm's calls fail with an error wrapping errs.ErrClosed.
func (c *Comm) Free() error {
	if c != nil && c.world {
		return argError("Free", "World cannot be freed")
	}
	if err := c.ready("Free"); err != nil {
		return err
	}
	if !c.freed.CompareAndSwap(false, true) {
		return fmt.Errorf("mpi: Free: the communicator was freed: %w", errs.ErrClosed)
	}
	c.rootMu.Lock()
	defer c.rootMu.Unlock()
	for root, r := range c.rooted { // every rank made the same ones, in step
		if err := r.Free(); err != nil {
			return err
		}
		delete(c.rooted, root)
	}
	h := c.h
	return call("MPI_Comm_free", func() C.int { return C.gc_comm_free(&h) })
}

// reduceTarget is where a Reduce to root runs: c itself, or with
// rotateReduceRoot a cached copy of c in which root is rank 0. Every rank
// calls Reduce with the same root, so every rank creates the copy together.
func (c *Comm) reduceTarget(root int) (*Comm, int, error) {
	if !rotateReduceRoot || root == 0 {
		return c, root, nil
	}
	c.rootMu.Lock()
	defer c.rootMu.Unlock()
	if r := c.rooted[root]; r != nil {
		return r, 0, nil
	}
	key := (c.rank - root + c.size) % c.size
	var h C.MPI_Comm
	var isNull C.int
	if err := call("MPI_Comm_split", func() C.int { return C.gc_comm_split(c.h, 0, C.int(key), &h, &isNull) }); err != nil {
		return nil, 0, err
	}
	r, err := adopt(h)
	if err != nil {
		return nil, 0, err
	}
	if c.rooted == nil {
		c.rooted = make(map[int]*Comm)
	}
	c.rooted[root] = r
	return r, 0, nil
}

// Abort is MPI_Abort: it ends every process of c's job with code, and this
// one with os.Exit if MPI returns or is not up. It takes no lock, so it
// works while another goroutine is stuck in MPI.
func (c *Comm) Abort(code int) {
	if c != nil && state.Load() == stateUp && !c.freed.Load() {
		setupEnter() // never left: MPI_Abort does not return
		C.gc_abort(c.h, C.int(code))
	}
	os.Exit(code)
}

// mpiTypeInfo is what MPI says of dt's MPI datatype: its name and size. The
// tests use it to check the one table in gpucomm_mpi.c.
func mpiTypeInfo(dt Datatype) (name string, size int, err error) {
	if !dt.Valid() {
		return "", 0, argError("mpiTypeInfo", "invalid datatype %v", dt)
	}
	if err := upError("mpiTypeInfo"); err != nil {
		return "", 0, err
	}
	buf := make([]byte, C.MPI_MAX_OBJECT_NAME)
	var n C.int
	err = call("MPI_Type_get_name", func() C.int { return C.gc_type_info(C.int(dt), (*C.char)(unsafe.Pointer(&buf[0])), &n) })
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), int(n), err
}

// onstackFixed is how many signal handlers, MPI's, gc_init gave SA_ONSTACK.
func onstackFixed() int { return int(C.gc_onstack_fixed_count()) }

// replacedOps is a bit mask of the built-in unsigned min/max ops that
// gc_init found wrong and replaced (bit 2*t+o: t = uint8, uint32, uint64;
// o = min, max), for the tests to report.
func replacedOps() int { return int(C.gc_replaced_ops()) }

// foreignInit and foreignFinalize play another library that owns MPI, for
// the tests of Init on an MPI that someone else initialised.
func foreignInit() error     { return check("MPI_Init_thread", C.gc_foreign_init()) }
func foreignFinalize() error { return check("MPI_Finalize", C.gc_foreign_finalize()) }

// libraryFinalized is MPI_Finalized, for the tests.
func libraryFinalized() bool { return C.gc_is_finalized() != 0 }
