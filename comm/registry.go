package comm

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure Open. Zero values mean the defaults; DefaultOptions fills
// them from the environment.
type Options struct {
	// Device names the device: "auto", "host", "cuda" or "cuda:N"
	// (GPUCOMM_DEVICE).
	Device string
	// Timeout bounds each operation; 0 waits forever (GPUCOMM_TIMEOUT,
	// a Go duration such as "30s").
	Timeout time.Duration
	// Debug checks each collective's signature across the ranks before
	// running it (GPUCOMM_DEBUG=1).
	Debug bool
	// ChunkBytes is the pipelining chunk of host-staged transfers; 0 picks
	// the backend's default (GPUCOMM_CHUNK_BYTES).
	ChunkBytes int
	// NodeBytes is the size from which the host-staged backend moves a
	// point-to-point message between two ranks of one node through pinned
	// memory the two processes share, instead of through MPI; 0 picks the
	// backend's default and -1 sends every message through MPI
	// (GPUCOMM_NODE_BYTES: a size such as 64K, or "off").
	NodeBytes int
	// StageReduceBytes is the size (the whole array's bytes) from which the
	// cudaaware backend runs a reduction (AllReduce, Reduce, ReduceScatter)
	// through its host-staged pipeline instead of handing device pointers to
	// MPI; 0 picks the backend's default (64 KiB with Open MPI 4 on a GPU,
	// whose reductions of device memory were 1.5-7 times slower than the
	// pipeline on an H200; else off) and -1 hands every reduction to MPI
	// (GPUCOMM_STAGE_REDUCE_BYTES: a size such as 64K, or "off"). The ranks
	// use the largest size any asks for, and none when any rank's setting
	// (its default included) is off.
	StageReduceBytes int
}

// Option changes Options.
type Option func(*Options)

// WithDevice picks the device ("auto", "host", "cuda", "cuda:N").
func WithDevice(spec string) Option { return func(o *Options) { o.Device = spec } }

// WithTimeout bounds each operation.
func WithTimeout(d time.Duration) Option { return func(o *Options) { o.Timeout = d } }

// WithDebug turns signature checks across ranks on or off.
func WithDebug(on bool) Option { return func(o *Options) { o.Debug = on } }

// WithChunkBytes sets the pipelining chunk of host-staged transfers.
func WithChunkBytes(n int) Option { return func(o *Options) { o.ChunkBytes = n } }

// WithNodeBytes sets the size from which host-staged point-to-point
// messages within a node go through shared pinned memory; -1 turns that off.
func WithNodeBytes(n int) Option { return func(o *Options) { o.NodeBytes = n } }

// WithStageReduceBytes sets the size from which the cudaaware backend's
// reductions go through host staging; -1 hands every reduction to MPI.
func WithStageReduceBytes(n int) Option { return func(o *Options) { o.StageReduceBytes = n } }

// DefaultOptions reads GPUCOMM_DEVICE, GPUCOMM_TIMEOUT, GPUCOMM_DEBUG,
// GPUCOMM_CHUNK_BYTES, GPUCOMM_NODE_BYTES and GPUCOMM_STAGE_REDUCE_BYTES. A
// malformed value is an error rather than ignored.
func DefaultOptions() (Options, error) {
	var o Options
	o.Device = os.Getenv("GPUCOMM_DEVICE")
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
		n, err := parseBytes(v)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("GPUCOMM_CHUNK_BYTES=%q: want a positive byte count such as 1048576, 512K or 4M: %w", v, ErrInvalidArgument)
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

// Verdict is a backend's answer to "can you run here?".
type Verdict struct {
	Usable bool
	Reason string // why not, or what it will use
	// Tentative marks a Usable verdict that only starting the backend can
	// confirm (CUDA-awareness before MPI is up); auto tries such a backend
	// after every backend usable for certain.
	Tentative bool
}

// Driver is what a backend registers.
type Driver struct {
	// Open makes this process's communicator over all ranks of the job.
	Open func(Options) (Communicator, error)
	// Probe says whether Open can work here, without starting anything
	// expensive.
	Probe func() Verdict
	// Rank orders backends for "auto": higher is preferred.
	Rank int
}

var (
	regMu   sync.RWMutex
	drivers = map[string]Driver{}
)

// Register makes a backend available by name. It panics if the name is
// taken or the driver incomplete, as database/sql.Register does: both are
// programming errors found at init.
func Register(name string, d Driver) {
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

// Probe asks the named backend whether it can run here.
func Probe(name string) (Verdict, error) {
	regMu.RLock()
	d, ok := drivers[name]
	regMu.RUnlock()
	if !ok {
		return Verdict{}, unknown(name)
	}
	return d.Probe(), nil
}

func unknown(name string) error {
	return fmt.Errorf("comm: unknown backend %q; registered: %s, or auto (import gpucomm/comm/all to register every backend): %w",
		name, strings.Join(Backends(), ", "), ErrInvalidArgument)
}

// Open opens this process's communicator on the named backend, or on the
// best usable one for "auto" or "". GPUCOMM_BACKEND, when set, overrides
// name. Options from the environment apply first, then opts.
func Open(name string, opts ...Option) (Communicator, error) {
	if env := os.Getenv("GPUCOMM_BACKEND"); env != "" {
		name = env
	}
	o, err := DefaultOptions()
	if err != nil {
		return nil, err
	}
	for _, opt := range opts {
		opt(&o)
	}
	if name == "" || name == "auto" {
		names, err := candidates()
		if err != nil {
			return nil, err
		}
		return openFirst(o, names)
	}
	regMu.RLock()
	d, ok := drivers[name]
	regMu.RUnlock()
	if !ok {
		return nil, unknown(name)
	}
	return d.Open(o)
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
// usable for certain, best first, then the tentative ones.
func candidates() ([]string, error) {
	var why, certain, tentative []string
	for _, n := range Backends() {
		regMu.RLock()
		d := drivers[n]
		regMu.RUnlock()
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
	return nil, fmt.Errorf("comm: no usable backend (%s): %w", strings.Join(why, "; "), ErrUnsupported)
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
		c, err := d.Open(o)
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
