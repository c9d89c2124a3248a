package comm

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/launcher"
)

// Option changes Options.
type Option func(*Options)

// WithDevice picks the device ("auto", "host", "cuda", "cuda:N").
func WithDevice(spec string) Option { return func(o *Options) { o.Device = spec } }

// WithTimeout bounds each operation.
func WithTimeout(d time.Duration) Option { return func(o *Options) { o.Timeout = d } }

// WithDebug turns signature checks across ranks on or off.
func WithDebug(on bool) Option { return func(o *Options) { o.Debug = on } }

// WithChunkBytes sets the pipelining chunk of host-staged transfers: 0 for
// the backend's default, else MinChunkBytes to MaxChunkBytes (Open refuses
// other sizes).
func WithChunkBytes(n int) Option { return func(o *Options) { o.ChunkBytes = n } }

// WithNodeBytes sets the size from which host-staged point-to-point
// messages within a node go through shared pinned memory: 0 for the
// default, -1 turns that off (Open refuses other negative sizes and sizes
// above MaxInt32).
func WithNodeBytes(n int) Option { return func(o *Options) { o.NodeBytes = n } }

// WithStageReduceBytes sets the size from which the cudaaware backend's
// reductions go through host staging: 0 for the default, -1 hands every
// reduction to MPI (Open refuses other negative sizes).
func WithStageReduceBytes(n int) Option { return func(o *Options) { o.StageReduceBytes = n } }

// DefaultOptions reads GPUCOMM_DEVICE, GPUCOMM_TIMEOUT, GPUCOMM_DEBUG,
// GPUCOMM_CHUNK_BYTES, GPUCOMM_NODE_BYTES and GPUCOMM_STAGE_REDUCE_BYTES,
// and checks GPUCOMM_IPC (devmem's). A malformed value is an error rather
// than ignored.
func DefaultOptions() (Options, error) {
	var o Options
	o.Device = os.Getenv("GPUCOMM_DEVICE")
	if err := devmem.CheckSpec(o.Device); err != nil {
		return o, fmt.Errorf("GPUCOMM_DEVICE=%q: want auto, host, cuda or cuda:N: %w", o.Device, ErrInvalidArgument)
	}
	// Not an option, but read by devmem when node-shared memory is first
	// allocated, which may be long after Open: refused here, up front.
	if err := devmem.CheckIPCModeEnv(); err != nil {
		return o, err
	}
	if v := os.Getenv("GPUCOMM_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			if secs, err2 := strconv.ParseFloat(v, 64); err2 == nil {
				d, err = time.Duration(secs*float64(time.Second)), nil
			}
		}
		if err != nil || d < 0 {
			return o, fmt.Errorf("GPUCOMM_TIMEOUT=%q: want a duration such as 30s: %w", v, ErrInvalidArgument)
		}
		o.Timeout = d
	}
	if v := os.Getenv("GPUCOMM_DEBUG"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return o, fmt.Errorf("GPUCOMM_DEBUG=%q: want 1 or 0: %w", v, ErrInvalidArgument)
		}
		o.Debug = on
	}
	if v := os.Getenv("GPUCOMM_CHUNK_BYTES"); v != "" {
		// 0 is refused here, unlike WithChunkBytes(0): the default is the
		// variable unset, and this refusal offers no 0.
		n, err := parseBytes(v)
		if err != nil || n < MinChunkBytes || n > MaxChunkBytes {
			return o, fmt.Errorf("GPUCOMM_CHUNK_BYTES=%q: a pipelining chunk: want %s bytes, such as 1048576, 512K or 4M (unset for the default): %w",
				v, chunkRange(), ErrInvalidArgument)
		}
		o.ChunkBytes = n
	}
	var err error
	if o.NodeBytes, err = threshold("GPUCOMM_NODE_BYTES"); err != nil {
		return o, err
	}
	if o.StageReduceBytes, err = threshold("GPUCOMM_STAGE_REDUCE_BYTES"); err != nil {
		return o, err
	}
	return o, nil
}

// chunkRange is the range of pipelining chunks taken: "512 to 1073741824 (1G)".
func chunkRange() string {
	return fmt.Sprintf("%d to %d (1G)", MinChunkBytes, MaxChunkBytes)
}

// checkChunk refuses a pipelining chunk that cannot be meant; 0 is the default.
func checkChunk(n int) error {
	if n != 0 && (n < MinChunkBytes || n > MaxChunkBytes) {
		return fmt.Errorf("a pipelining chunk of %d bytes: want %s, or 0 for the default: %w",
			n, chunkRange(), ErrInvalidArgument)
	}
	return nil
}

// checkThresholds refuses a node-path or staged-reduction threshold that
// cannot be meant: each is a positive size, 0 for the default or -1 for
// off, and the node path's at most MaxInt32 (the MPI backends' rule and
// words, which they applied alone before).
func checkThresholds(o Options) error {
	switch {
	case o.NodeBytes < -1:
		return fmt.Errorf("node path from %d bytes: want a positive size, 0 for the default or -1 for off: %w", o.NodeBytes, ErrInvalidArgument)
	case o.NodeBytes > math.MaxInt32:
		return fmt.Errorf("node path from %d bytes: want at most %d: %w", o.NodeBytes, math.MaxInt32, ErrInvalidArgument)
	case o.StageReduceBytes < -1:
		return fmt.Errorf("staged reductions from %d bytes: want a positive size, 0 for the default or -1 for off: %w", o.StageReduceBytes, ErrInvalidArgument)
	}
	return nil
}

// CheckOptions says what is wrong with options on their own (a device spec
// that names no device, a negative timeout, a chunk size out of range, a
// node-path or staged-reduction threshold below -1 or, the node path's,
// above MaxInt32), as an error wrapping ErrInvalidArgument; nil when
// nothing is. Open checks them so, for every backend, and so do
// constructors of communicators that take Options without Open
// (local.NewGroup): a local group takes no option a job's Open refuses.
func CheckOptions(o Options) error {
	err := devmem.CheckSpec(o.Device)
	if err == nil && o.Timeout < 0 {
		err = fmt.Errorf("timeout %v: want 0 (none) or more: %w", o.Timeout, ErrInvalidArgument)
	}
	if err == nil {
		err = checkChunk(o.ChunkBytes)
	}
	if err == nil {
		err = checkThresholds(o)
	}
	return err
}

// validate checks what the options say on their own, after opts applied;
// a failure is backend's *Error of Open, as the backend's own check would be.
func validate(o Options, backend string) error {
	return driver.Wrap(backend, "Open", -1, CheckOptions(o))
}

// threshold reads a size from the environment variable name: unset is 0
// (the default), "off" or -1 is -1.
func threshold(name string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	if t := strings.ToLower(strings.TrimSpace(v)); t == "off" || t == "-1" {
		return -1, nil
	}
	if n, err := parseBytes(v); err == nil && n > 0 {
		return n, nil
	}
	return 0, fmt.Errorf("%s=%q: want a positive byte count such as 65536 or 64K, or off: %w", name, v, ErrInvalidArgument)
}

var (
	regMu   sync.RWMutex
	drivers = map[string]driver.Driver{}
)

// Register makes a backend available by name; backends call it from init
// with what package driver describes. It panics if the name is
// taken or the driver incomplete, as database/sql.Register does: both are
// programming errors found at init.
func Register(name string, d driver.Driver) {
	regMu.Lock()
	defer regMu.Unlock()
	if d.Open == nil || d.Probe == nil {
		panic("comm: Register of backend " + name + " without Open or Probe")
	}
	if _, dup := drivers[name]; dup || name == "auto" || name == "" {
		panic("comm: Register called twice for backend " + name)
	}
	drivers[name] = d
}

// Backends lists the registered backends, best first.
func Backends() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(drivers))
	for n := range drivers {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := drivers[names[i]], drivers[names[j]]
		if a.Rank != b.Rank {
			return a.Rank > b.Rank
		}
		return names[i] < names[j]
	})
	return names
}

// Probe asks the named backend whether it can run here; for "auto" or "",
// the backend Open("auto") would try first (Auto; GPUCOMM_BACKEND, which
// Open honours, aside), or why there is none. Probe reads no
// GPUCOMM_BACKEND. Under a launcher that started several ranks an
// in-process backend is not usable (CheckLauncher's reason), as Open
// refuses it.
func Probe(name string) (Verdict, error) {
	if name == "" || name == "auto" {
		n, err := Auto()
		if err != nil {
			return Verdict{}, err
		}
		name = n
	}
	regMu.RLock()
	d, ok := drivers[name]
	regMu.RUnlock()
	if !ok {
		return Verdict{}, unknown(name)
	}
	// Under a launcher that started several ranks, Open refuses an
	// in-process backend whatever it could do on its own: so does Probe.
	if err := CheckLauncher(name); err != nil {
		return Verdict{Usable: false, Reason: err.Error()}, nil
	}
	return d.Probe(), nil
}

func unknown(name string) error {
	registered := Backends()
	hint := ""
	for _, b := range knownBackends {
		if !slices.Contains(registered, b) {
			hint = " (import gpucomm/comm/all to register every backend)"
			break
		}
	}
	return fmt.Errorf("comm: unknown backend %q; registered: %s, or auto%s: %w",
		name, strings.Join(registered, ", "), hint, ErrInvalidArgument)
}

// ApplyOptions applies opts to o in order, as Open does (a backend's own
// Open uses it too); a nil one is an error wrapping ErrInvalidArgument,
// and o is then left as it was; so is a nil o.
func ApplyOptions(o *Options, opts ...Option) error {
	if o == nil {
		return fmt.Errorf("comm: ApplyOptions to nil Options: %w", ErrInvalidArgument)
	}
	for i, opt := range opts {
		if opt == nil {
			return fmt.Errorf("comm: option %d of %d is nil: %w", i+1, len(opts), ErrInvalidArgument)
		}
	}
	for _, opt := range opts {
		opt(o)
	}
	return nil
}

// knownBackends are the backends gpucomm/comm/all registers: an unknown
// name's error advises importing it only while one of them is missing.
var knownBackends = []string{"local", "mpi", "cudaaware", "nccl"}

// Open opens this process's communicator on the named backend, or on the
// best usable one for "auto" or "". GPUCOMM_BACKEND, when set, overrides
// name. Options from the environment apply first, then opts; a malformed
// one (an unknown device, a chunk size outside MinChunkBytes..MaxChunkBytes)
// is an error wrapping ErrInvalidArgument.
//
// Under a launcher that started several ranks (mpirun -np 4, mpiexec, srun),
// an in-process backend (local) is refused, and "auto" never falls back to
// it: every process would otherwise be rank 0 of a job of its own and
// compute a wrong answer without a word. The error names the launcher, the
// job's size, the MPI this binary was built with and the fix.
func Open(name string, opts ...Option) (Communicator, error) {
	if env := os.Getenv("GPUCOMM_BACKEND"); env != "" {
		name = env
	}
	o, err := DefaultOptions()
	if err != nil {
		return nil, err
	}
	if err := ApplyOptions(&o, opts...); err != nil {
		return nil, err
	}
	if err := validate(o, cmp.Or(name, "auto")); err != nil {
		return nil, err
	}
	if name == "" || name == "auto" {
		names, err := candidates()
		if err != nil {
			return nil, err
		}
		c, err := openFirst(o, names)
		if err != nil && errors.Is(err, ErrUnsupported) {
			// The backend auto chose cannot do what was asked (local and a
			// GPU, say): the others, and why they were no choice, are what
			// the user needs to know next.
			if others := unusable(names); others != "" {
				err = fmt.Errorf("%w (auto chose %s; not usable here: %s)", err, strings.Join(names, ", "), others)
			}
		}
		return c, err
	}
	regMu.RLock()
	d, ok := drivers[name]
	regMu.RUnlock()
	if !ok {
		return nil, unknown(name)
	}
	if err := CheckLauncher(name); err != nil {
		return nil, err
	}
	return open(name, d, o)
}

// open opens d and hands its connection to the program as a Communicator,
// which every backend's connection must implement.
func open(name string, d driver.Driver, o Options) (Communicator, error) {
	conn, err := d.Open(o)
	if err != nil {
		return nil, err
	}
	c, ok := conn.(Communicator)
	if !ok {
		cerr := conn.Close()
		return nil, driver.Errorf(name, "Open", -1, ErrUnsupported,
			"backend %s opened a %T, which does not implement comm.Communicator (close: %v)", name, conn, cerr)
	}
	return c, nil
}

// CheckLauncher reports whether the named backend can serve the job this
// process was launched into: an error, wrapping ErrNotBuilt when this binary
// has no MPI and ErrUnsupported otherwise, when the backend runs in-process
// (local) and a launcher (Open MPI's mpirun, MPICH's mpiexec, srun, PMIx)
// started several ranks; nil otherwise, and for names not registered.
// Programs that make in-process groups themselves (local.NewGroup) under a
// launcher call it first, as the gpucomm command does.
func CheckLauncher(name string) error {
	regMu.RLock()
	d, ok := drivers[name]
	regMu.RUnlock()
	if !ok || !d.InProcess {
		return nil
	}
	job, ok := launcher.FromEnv()
	if !ok || !job.MultiRank() {
		return nil
	}
	return launcherRefusal(name, job)
}

// launcherRefusal says why the in-process backend name cannot serve job, and
// what to do.
func launcherRefusal(name string, job launcher.Job) error {
	head := fmt.Sprintf("comm: backend %s keeps every rank in one process, but %s", name, startedAs(job))
	if builtMPI == "" {
		tag := "-tags mpi (Open MPI) or -tags mpich (MPICH)"
		switch job.Family {
		case launcher.FamilyOpenMPI:
			tag = "-tags mpi (Open MPI, whose mpirun this is)"
		case launcher.FamilyMPICH:
			tag = "-tags mpich (MPICH, whose mpiexec this is)"
		}
		return fmt.Errorf("%s; this binary was built without MPI (neither -tags mpi nor -tags mpich), so each process would run alone: "+
			"rebuild it with %s and open backend mpi, cudaaware, nccl or auto: %w", head, tag, ErrNotBuilt)
	}
	return fmt.Errorf("%s; this binary was built with %s: open backend mpi, cudaaware, nccl or auto (-backend or GPUCOMM_BACKEND) instead of %s: %w",
		head, builtMPI, name, ErrUnsupported)
}

// startedAs says how job started this process: "Open MPI's mpirun started
// this process as rank 1 of 4 ranks (OMPI_COMM_WORLD_RANK)".
func startedAs(job launcher.Job) string {
	size := "several ranks"
	if job.Size > 0 {
		size = fmt.Sprintf("%d ranks", job.Size)
	}
	return fmt.Sprintf("%s started this process as rank %d of %s (%s)", job.Launcher, job.Rank, size, job.From)
}

// Auto names the backend "auto" tries first: the best backend usable for
// certain, else the best tentatively usable one (see Verdict.Tentative).
func Auto() (string, error) {
	names, err := candidates()
	if err != nil {
		return "", err
	}
	return names[0], nil
}

// candidates lists the usable backends in the order "auto" tries them: those
// usable for certain, best first, then the tentative ones. Under a launcher
// of several ranks in-process backends are left out, and when nothing else
// is usable the error is the launcher's refusal of the best in-process one.
func candidates() ([]string, error) {
	var why, certain, tentative []string
	job, launched := launcher.FromEnv()
	launched = launched && job.MultiRank()
	var refusal error
	for _, n := range Backends() {
		regMu.RLock()
		d := drivers[n]
		regMu.RUnlock()
		if d.InProcess && launched {
			if refusal == nil {
				refusal = launcherRefusal(n, job)
			}
			continue
		}
		switch v := d.Probe(); {
		case v.Usable && !v.Tentative:
			certain = append(certain, n)
		case v.Usable:
			tentative = append(tentative, n)
		default:
			why = append(why, n+": "+v.Reason)
		}
	}
	if all := append(certain, tentative...); len(all) > 0 {
		return all, nil
	}
	if refusal != nil && why != nil && builtMPI != "" {
		// MPI is built in: why its backends refused is the cause (another
		// family's launcher, say); local was never a choice here.
		return nil, fmt.Errorf("comm: auto found no backend for this job (%s): %s; "+
			"the in-process backends cannot serve a launched job: %w",
			startedAs(job), strings.Join(why, "; "), ErrUnsupported)
	} else if refusal != nil && why != nil {
		return nil, fmt.Errorf("%w (auto found no backend for a launched job: %s)", refusal, strings.Join(why, "; "))
	} else if refusal != nil {
		return nil, refusal
	}
	return nil, fmt.Errorf("comm: no usable backend (%s): %w", strings.Join(why, "; "), ErrUnsupported)
}

// unusable says why each registered backend not among chosen is not
// usable here (its Probe's reason), or "" when every one was chosen.
func unusable(chosen []string) string {
	var why []string
	for _, n := range Backends() {
		if slices.Contains(chosen, n) {
			continue
		}
		regMu.RLock()
		d := drivers[n]
		regMu.RUnlock()
		if v := d.Probe(); !v.Usable {
			why = append(why, n+": "+v.Reason)
		}
	}
	return strings.Join(why, "; ")
}

// openFirst opens the first of names (the candidates of "auto") that
// accepts this job. A backend that
// refuses it as a whole, in agreement across the ranks (ErrNotCUDAAware: MPI
// cannot take device pointers; ErrDuplicateGPU: ranks share a GPU the
// backend needs alone), hands over to the next, which the refusal's own
// advice names; any other failure is returned as it is. A failed Open keeps
// MPI up, so the next backend can still use it.
func openFirst(o Options, names []string) (Communicator, error) {
	var refused []string
	var refusals []error
	for _, n := range names {
		regMu.RLock()
		d := drivers[n]
		regMu.RUnlock()
		c, err := open(n, d, o)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, ErrNotCUDAAware) && !errors.Is(err, ErrDuplicateGPU) {
			if refused != nil {
				return nil, fmt.Errorf("%w (auto tried it after: %s)", err, strings.Join(refused, "; "))
			}
			return nil, err
		}
		refused = append(refused, err.Error())
		refusals = append(refusals, err)
	}
	return nil, fmt.Errorf("comm: every usable backend refused this job (%w): %w", ErrUnsupported, errors.Join(refusals...))
}

// parseBytes reads a whole byte count, optionally with a binary suffix K, M
// or G (KiB, MiB, GiB also read).
func parseBytes(v string) (int, error) {
	s := strings.ToUpper(strings.TrimSpace(v))
	s = strings.TrimSuffix(s, "IB")
	shift := 0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		}
		if shift > 0 {
			s = s[:n-1]
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, err
	}
	if n < 0 || n > math.MaxInt32>>shift {
		return 0, fmt.Errorf("byte count %q out of range", v)
	}
	return n << shift, nil
}
