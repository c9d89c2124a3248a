package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/cudaaware"
	gpumpi "github.com/gpucomm/gpucomm/comm/mpi"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/cuda"
	"github.com/gpucomm/gpucomm/internal/launcher"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm"
	"github.com/gpucomm/gpucomm/internal/nccl"
	"github.com/gpucomm/gpucomm/internal/nvrtc"
	"github.com/gpucomm/gpucomm/internal/pipeline"
)

func init() {
	register(&command{name: "info", summary: "show the backends, devices and settings this machine offers", run: runInfo})
}

// infoSections are printed by info after its own output, in order. Other
// files append to it from init (GPU topology, for one), so info grows without
// edits here. A section that returns an error makes info exit 1; with -json
// each section's text becomes one string of "sections".
var infoSections []func(w io.Writer) error

const infoDescription = `Info shows what gpucomm finds on this machine: every backend compiled into
this binary with its verdict (usable, or why not), the devices, and the
GPUCOMM_* environment variables in effect. The exit status is 1 when a
setting is malformed or a section cannot be gathered.

Whether MPI takes device pointers is known once MPI is up: with -mpi, info
first opens and closes the cudaaware backend, which asks MPI
(MPIX_Query_cuda_support) or, when MPI cannot say, exchanges device
buffers between the ranks, and its line then gives that verdict. Run it
under the launcher (mpirun -np 2 gpucomm info -mpi): every rank takes part
and rank 0 prints. With -mpi, info also opens the mpi backend and reports,
for every pair of ranks, which way a message of GPUCOMM_NODE_BYTES or more
goes (IPC: one device copy; the node's pinned ring; or host-staged MPI) and
why, and which way reductions and Broadcast go.`

// knobs are the environment variables gpucomm programs and scripts read
// (every one that Go code outside tests names, and every one that the
// scripts under scripts/ read: info_knobs_test.go holds the list to both),
// the first seven through comm.DefaultOptions, the others where they act;
// the test harness's and the simulated nodes' own are listed after them.
// trace.go adds the flight recorder's.
var knobs = []string{"GPUCOMM_BACKEND", "GPUCOMM_DEVICE", "GPUCOMM_TIMEOUT", "GPUCOMM_DEBUG", "GPUCOMM_CHUNK_BYTES", "GPUCOMM_NODE_BYTES", "GPUCOMM_STAGE_REDUCE_BYTES",
	"GPUCOMM_CUDA_AWARE", "GPUCOMM_MPI_THREAD_LEVEL", "GPUCOMM_MPI_FINALIZE_BOUND", "GPUCOMM_IPC", "GPUCOMM_TRACE_PIPELINE", "GPUCOMM_CACHE_DIR",
	"GPUCOMM_CUDA_LIB", "GPUCOMM_NVRTC_LIB", "GPUCOMM_NVRTC_DIR", "GPUCOMM_NCCL_LIB", "GPUCOMM_GPU_TESTS", "GPUCOMM_MPIRUN",
	"GPUCOMM_NODE_IPC", "GPUCOMM_NODE_IPC_EVENTS", "GPUCOMM_MULTINODE", "GPUCOMM_MULTINODE_DIR", "GPUCOMM_MULTINODE_SCRIPTS", "GPUCOMM_MULTINODE_PER_NODE",
	"GPUCOMM_MULTINODE_LAUNCHER_ARGS", "GPUCOMM_MULTINODE_ENV", "GPUCOMM_MULTINODE_MPIRUN", "GPUCOMM_MULTINODE_MPIEXEC",
	"GPUCOMM_MULTINODE_SHM_SIZE", "GPUCOMM_MULTINODE_REQUIRED"}

// onOffWord reports whether v is one of the words internal/mpicomm's on/off
// knobs take (GPUCOMM_NODE_IPC, GPUCOMM_NODE_IPC_EVENTS).
func onOffWord(v string) bool {
	return slices.Contains([]string{"", "on", "1", "true", "off", "0", "false"}, strings.ToLower(strings.TrimSpace(v)))
}

// otherKnobs describes the knobs comm.DefaultOptions does not read: what
// unset means, what a value does (%s is the value), and, for those read as
// one of a few words, the words and whether value is one, as the code that
// reads it judges.
var otherKnobs = map[string]struct {
	unset, set string
	want       string
	ok         func(v string) bool
}{
	"GPUCOMM_CUDA_AWARE": {"cudaaware asks MPI whether it takes device pointers", "cudaaware: %s (1 trust MPI with device pointers, 0 refuse, probe exchange device buffers at Open)",
		"1, 0 or probe", func(v string) bool {
			v = strings.ToLower(strings.TrimSpace(v))
			_, err := strconv.ParseBool(v)
			return v == "probe" || err == nil
		}},
	"GPUCOMM_MPI_THREAD_LEVEL": {"MPI is started at MPI_THREAD_MULTIPLE", "MPI is started at thread level %s",
		"single, funneled, serialized or multiple", func(v string) bool {
			return slices.Contains([]string{"single", "funneled", "serialized", "multiple"}, v)
		}},
	"GPUCOMM_NODE_IPC": {"mpi: messages of GPUCOMM_NODE_BYTES or more between ranks of a node whose devices reach each other move in one device copy through CUDA IPC (shared memory on the host device)",
		"mpi's IPC path between the ranks of a node: %s (off: this rank's pairs use the shared pinned ring instead)",
		"on or off", onOffWord},
	"GPUCOMM_NODE_IPC_EVENTS": {"mpi: on orders messages (Send, Recv, small GroupP2Ps) and reductions on a stream through the IPC path, on a GPU, on the GPU with IPC events; unset, only the reductions of communicators of 2 ranks on GPUs of their own (on the host elsewhere; measure before setting it on: under MPS it helped a ping-pong and slowed a halo exchange)",
		"mpi's messages and reductions on a stream through the IPC path, on a GPU: %s (on: ordered on the GPU with IPC events, no host wait; off: on the host)",
		"on or off", onOffWord},
	"GPUCOMM_MULTINODE":          {"the simulated-node tests skip", "the simulated-node tests run when this is 1 (now %s; as root, scripts/multinode)", "", nil},
	"GPUCOMM_MULTINODE_DIR":      {"simulated nodes keep their state in /run/gpucomm-multinode", "simulated nodes keep their state in %s", "", nil},
	"GPUCOMM_MULTINODE_SCRIPTS":  {"the simulated-node tests use scripts/multinode", "the simulated-node tests use the scripts in %s", "", nil},
	"GPUCOMM_MULTINODE_PER_NODE": {"set by the simulated-node tests for their ranks", "simulated-node test ranks: %s a node", "", nil},
	"GPUCOMM_MULTINODE_LAUNCHER_ARGS": {"scripts/multinode/nodes.sh gives the launcher no options of yours",
		"scripts/multinode/nodes.sh gives the launcher these options too, split at blanks: %s", "", nil},
	"GPUCOMM_MULTINODE_ENV": {"nodes.sh forwards GPUCOMM_*, GO*, CGO_*, CUDA_*, NCCL_*, UCX_*, XDG_*, TMPDIR and LD_LIBRARY_PATH to Open MPI's ranks on other nodes",
		"nodes.sh forwards %s to Open MPI's ranks on other nodes too", "", nil},
	"GPUCOMM_MULTINODE_MPIRUN":   {"nodes.sh launches Open MPI jobs with mpirun.openmpi (or mpirun)", "nodes.sh launches Open MPI jobs with %s", "", nil},
	"GPUCOMM_MULTINODE_MPIEXEC":  {"nodes.sh launches MPICH jobs with mpiexec.hydra (or mpiexec.mpich)", "nodes.sh launches MPICH jobs with %s", "", nil},
	"GPUCOMM_MULTINODE_SHM_SIZE": {"each simulated node's /dev/shm holds up to 2g", "each simulated node's /dev/shm holds up to %s", "", nil},
	"GPUCOMM_MULTINODE_REQUIRED": {"scripts/multinode/ci.sh skips where simulated nodes cannot run", "scripts/multinode/ci.sh fails where simulated nodes cannot run when this is 1 (now %s)", "", nil},
	"GPUCOMM_IPC": {"node-shared GPU memory is VMM where the GPU supports it, else legacy CUDA IPC", "node-shared GPU memory: %s",
		"auto, vmm or legacy", func(v string) bool {
			return slices.Contains([]string{"auto", "vmm", "legacy"}, strings.ToLower(strings.TrimSpace(v)))
		}},
	"GPUCOMM_TRACE_PIPELINE": {"no pipeline timeline", "host-staged transfers' timeline (SKIP,COUNT %s) on standard error",
		"SKIP,COUNT, e.g. 20,2", func(v string) bool {
			// The mpi backend's own parser, which refuses to open on a value it rejects.
			_, err := pipeline.NewTracer(v)
			return err == nil
		}},
	"GPUCOMM_CACHE_DIR": {"compiled kernels cached under the user cache directory", "compiled kernels cached in %s", "", nil},
	// GPUCOMM_CUDA_LIB, GPUCOMM_NVRTC_LIB and GPUCOMM_NCCL_LIB, set, are
	// judged by loading the library (libLoaders, libKnobEffect): no set text.
	"GPUCOMM_CUDA_LIB":  {"libcuda.so.1 from the loader's path", "", "", nil},
	"GPUCOMM_NVRTC_LIB": {"libnvrtc from the loader's path", "", "", nil},
	"GPUCOMM_NVRTC_DIR": {"test.sh has no NVRTC phase (its race phase still compiles every kernel where an NVRTC is on the loader's path)", "test.sh compiles every kernel with the NVRTC in %s (scripts/nvrtc-debian.sh)", "", nil},
	"GPUCOMM_NCCL_LIB":  {"libnccl.so.2 from the loader's path", "", "", nil},
	"GPUCOMM_GPU_TESTS": {"tests skip what needs a GPU", "tests that need a GPU run when this is 1 (now %s)", "", nil},
	"GPUCOMM_MPIRUN":    {"MPI tests launch with the mpirun beside their libmpi, else the family's on PATH", "MPI tests launch their ranks with %s", "", nil},
}

// infoReport is what info gathers; the text and JSON outputs both render it,
// so they cannot disagree.
type infoReport struct {
	Backends    []infoBackend `json:"backends"`
	Devices     []infoDevice  `json:"devices"`
	Environment []infoKnob    `json:"environment"`
	Problems    []string      `json:"problems"`           // malformed settings
	Routes      []string      `json:"routes,omitempty"`   // with -mpi: the mpi backend's route of each pair of ranks
	Sections    []string      `json:"sections,omitempty"` // the text of infoSections, for -json
}

type infoBackend struct {
	Name   string `json:"name"`
	Usable bool   `json:"usable"`
	Reason string `json:"reason"`
}

type infoDevice struct {
	Kind   string `json:"kind"` // host or cuda
	Count  int    `json:"count"`
	Detail string `json:"detail"`
}

type infoKnob struct {
	Name   string `json:"name"`
	Set    bool   `json:"set"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

func runInfo(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("info", "info [-json] [-mpi]", infoDescription, stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout")
	withMPI := fs.Bool("mpi", false, "start MPI and open the cudaaware backend first, so that its line gives MPI's own verdict (every rank of the job takes part; rank 0 prints)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	code := exitOK
	// Under mpirun -np 4 every process would print the whole report: only
	// the launcher's rank 0 does (with -mpi, MPI's rank 0, below).
	if job, ok := launcher.FromEnv(); ok && job.Rank != 0 && !*withMPI {
		return code
	}
	var routes []string
	if *withMPI {
		// The mpi backend first: MPI stays up while it is open (the
		// cudaaware backend's Close would finalize it otherwise).
		mc, openErr := openForRoutes()
		rank, err := settleCUDAAware()
		if err != nil {
			fmt.Fprintf(stderr, "gpucomm info: %v\n", err)
			code = exitFail
		}
		rank = reportingRank(rank) // while MPI is up, if it came up
		routes, err = nodeRoutes(mc, openErr)
		if err != nil {
			fmt.Fprintf(stderr, "gpucomm info: routes: %v\n", err)
			code = exitFail
		}
		if rank != 0 {
			return code
		}
	}
	rep := gatherInfo()
	rep.Routes = routes
	for _, p := range rep.Problems {
		fmt.Fprintf(stderr, "gpucomm info: %s\n", p)
		code = exitFail
	}
	if *asJSON {
		for _, section := range infoSections {
			var b bytes.Buffer
			if err := section(&b); err != nil {
				fmt.Fprintf(stderr, "gpucomm info: %v\n", err)
				code = exitFail
			}
			if b.Len() > 0 {
				rep.Sections = append(rep.Sections, b.String())
			}
		}
		if err := writeJSON(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "gpucomm info: %v\n", err)
			return exitFail
		}
		return code
	}
	writeInfoText(stdout, rep)
	for _, section := range infoSections {
		fmt.Fprintln(stdout)
		if err := section(stdout); err != nil {
			fmt.Fprintf(stderr, "gpucomm info: %v\n", err)
			code = exitFail
		}
	}
	return code
}

// reportingRank is the rank that decides whether this process prints info
// -mpi's report, from the rank that settleCUDAAware gives: MPI's, where MPI
// came up as the launcher's job; else the launcher's (launcher.FromEnv),
// for where MPI did not start (a binary without MPI, a malformed variable,
// the other family's launcher) or made a world of its own, and every
// process was "rank 0" and printed the whole report.
func reportingRank(mpiRank int) int {
	job, under := launcher.FromEnv()
	if !under {
		return mpiRank
	}
	if mpi.Initialized() && (job.Size <= 0 || mpi.World().Size() == job.Size) {
		return mpiRank
	}
	return job.Rank
}

// settleCUDAAware opens and closes the cudaaware backend: MPI starts, and
// the ranks decide together whether MPI takes device pointers, which the
// backend's Probe reports from then on. It returns this rank. A refusal
// (ErrNotCUDAAware) is the verdict, not an error; so is a binary without
// MPI, whose line already says so.
func settleCUDAAware() (rank int, err error) {
	o, err := comm.DefaultOptions()
	if err != nil {
		return 0, err // the environment's problem, which info reports too
	}
	// The backend itself, not comm.Open: GPUCOMM_BACKEND must not swap it.
	c, err := cudaaware.Open(o)
	if err != nil {
		if mpi.Initialized() {
			rank = max(mpi.World().Rank(), 0)
		}
		if errors.Is(err, comm.ErrNotCUDAAware) || errors.Is(err, comm.ErrNotBuilt) {
			return rank, nil
		}
		return rank, err
	}
	return c.Rank(), c.Close()
}

// openForRoutes opens the mpi backend (every rank of the job takes part);
// nil without MPI.
func openForRoutes() (*mpicomm.Comm, error) {
	if !mpi.Built() {
		return nil, nil
	}
	o, err := comm.DefaultOptions()
	if err != nil {
		return nil, err
	}
	c, err := gpumpi.Open(o)
	if err != nil {
		return nil, fmt.Errorf("opening the mpi backend: %w", err)
	}
	mc, ok := c.(*mpicomm.Comm)
	if !ok {
		return nil, errors.Join(fmt.Errorf("the mpi backend opened a %T", c), c.Close())
	}
	return mc, nil
}

// nodeRoutes gathers every rank's routes through c (openForRoutes's, which
// it closes): "rank R -> rank Q: how", R's to every other rank in rank
// order, then each rank's route of reductions and Broadcast. A binary
// without MPI has one line saying so.
func nodeRoutes(c *mpicomm.Comm, openErr error) ([]string, error) {
	switch {
	case openErr != nil:
		return nil, openErr
	case c == nil:
		return []string{"not built: " + mpiBuildAdvice()}, nil
	}
	mc := c
	var mine []string
	for _, r := range mc.NodeRoutes() {
		mine = append(mine, fmt.Sprintf("rank %d -> %s", c.Rank(), r))
	}
	coll := mc.CollectiveRoute()
	if c.Size() == 1 {
		// The backend says "the node path is off" for a communicator of
		// one rank, which reads as GPUCOMM_NODE_BYTES=off: there is no
		// peer to take any path to.
		coll = "reductions and Broadcast: one rank: no peer, so no node path (MPI, host-staged)"
	}
	mine = append(mine, fmt.Sprintf("rank %d: %s", c.Rank(), coll))
	all, err := mpi.AllgatherBytes(mpi.World(), []byte(strings.Join(mine, "\n")))
	err = errors.Join(err, c.Close())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range all {
		out = append(out, strings.Split(string(b), "\n")...)
	}
	return out, nil
}

// mpiBuildAdvice says how to build MPI into a binary that lacks it: with a
// tag, or, where the tag was given but cgo was off (the build then takes the
// MPI stub without a word), with cgo.
func mpiBuildAdvice() string { return mpi.NotBuiltReason() }

func gatherInfo() infoReport {
	rep := infoReport{Problems: []string{}}
	for _, name := range comm.Backends() {
		v, err := comm.Probe(name)
		if err != nil {
			v.Reason = err.Error()
		}
		rep.Backends = append(rep.Backends, infoBackend{Name: name, Usable: v.Usable, Reason: shortReason(v.Reason)})
	}

	rep.Devices = append(rep.Devices, infoDevice{Kind: devmem.Host.String(), Count: 1,
		Detail: "simulated device in host memory; always available"})
	cuda := infoDevice{Kind: devmem.CUDA.String()}
	if n, err := devmem.CUDADeviceCount(); err != nil {
		cuda.Detail = shortReason(err.Error())
	} else {
		cuda.Count = n
		cuda.Detail = fmt.Sprintf("%d GPU(s) visible", n)
	}
	rep.Devices = append(rep.Devices, cuda)

	opts, optsErr := comm.DefaultOptions()
	if optsErr != nil {
		rep.Problems = append(rep.Problems, optsErr.Error())
	}
	for _, name := range knobs {
		value, set := os.LookupEnv(name)
		set = set && value != "" // an empty variable means unset, as comm reads it
		effect, problem := knobEffect(name, value, opts, optsErr)
		if problem != "" {
			rep.Problems = append(rep.Problems, problem)
		}
		rep.Environment = append(rep.Environment, infoKnob{Name: name, Set: set, Value: value, Effect: effect})
	}
	return rep
}

// knobEffect says what the variable's value does, or what is wrong with it.
// The parsed options are trusted only when DefaultOptions read them all.
func knobEffect(name, value string, opts comm.Options, optsErr error) (effect, problem string) {
	switch name {
	case "GPUCOMM_BACKEND":
		switch {
		case value == "":
			return "each program picks its backend", ""
		case value == "auto":
			return "the best usable backend, overriding each program's choice", ""
		case slices.Contains(comm.Backends(), value):
			return "backend " + value + ", overriding each program's choice", ""
		}
		p := fmt.Sprintf("GPUCOMM_BACKEND=%q: unknown backend; registered: %s, or auto", value, strings.Join(comm.Backends(), ", "))
		return "invalid", p
	case "GPUCOMM_DEVICE":
		spec := strings.ToLower(strings.TrimSpace(value))
		switch {
		case !validDeviceSpec(value):
			return "invalid", fmt.Sprintf("GPUCOMM_DEVICE=%q: want auto, host, cuda or cuda:N", value)
		case spec == "" || spec == "auto":
			return "a GPU when one is usable, else the host device", ""
		case spec == "host":
			return "the simulated host device", ""
		case spec == "cuda":
			return "GPU (local rank mod GPU count)", ""
		}
		return "GPU " + strings.TrimPrefix(spec, "cuda:") + " for every rank", ""
	}
	if name == mpi.FinalizeBoundEnv {
		return finalizeBoundEffect(value)
	}
	if l, ok := libLoaders[name]; ok && value != "" {
		return libKnobEffect(name, value, l.what, l.load()), ""
	}
	if name == "GPUCOMM_TRACE_DIR" && value == "" {
		if effect, on := traceDirDefault(); on {
			return effect, ""
		}
	}
	if k, ok := otherKnobs[name]; ok {
		switch {
		case value == "":
			return k.unset, ""
		case k.ok != nil && !k.ok(value):
			return "invalid", fmt.Sprintf("%s=%q: want %s", name, value, k.want)
		}
		return fmt.Sprintf(k.set, value), ""
	}
	if optsErr != nil {
		if strings.Contains(optsErr.Error(), name) {
			return "invalid", ""
		}
		return "not read: another setting is invalid", ""
	}
	switch name {
	case "GPUCOMM_TIMEOUT":
		if opts.Timeout == 0 {
			return "operations wait forever", ""
		}
		return "each operation fails after " + opts.Timeout.String(), ""
	case "GPUCOMM_DEBUG":
		if opts.Debug {
			return "collectives' signatures checked across ranks", ""
		}
		return "no cross-rank signature checks", ""
	case "GPUCOMM_CHUNK_BYTES":
		if opts.ChunkBytes == 0 {
			return "each backend's default pipelining chunk", ""
		}
		return fmt.Sprintf("host-staged transfers move %d-byte chunks", opts.ChunkBytes), ""
	case "GPUCOMM_NODE_BYTES":
		return sizeEffect(opts.NodeBytes, "host-staged point-to-point messages all go through MPI",
			"host-staged point-to-point messages within a node from the default size go through shared pinned memory",
			"host-staged point-to-point messages within a node from %d bytes go through shared pinned memory"), ""
	case "GPUCOMM_STAGE_REDUCE_BYTES":
		return sizeEffect(opts.StageReduceBytes, "cudaaware hands every reduction to MPI on device pointers",
			"cudaaware reductions from 64 KiB go through host staging with Open MPI 4 on a GPU, else to MPI",
			"cudaaware reductions from %d bytes go through host staging"), ""
	}
	return "", ""
}

// libLoaders are the libraries that a variable points gpucomm at: what
// each is, and its loader, the one the code that uses it calls (loading
// again is nothing once loaded; a failure is tried again).
var libLoaders = map[string]struct {
	what string
	load func() error
}{
	cuda.EnvLib:  {"the CUDA driver", cuda.Load},
	nvrtc.EnvLib: {"NVRTC", nvrtc.Load},
	nccl.EnvLib:  {"NCCL", nccl.Load},
}

// libKnobEffect says what became of the library (what) that the variable
// name set to value points gpucomm at, from loadErr, its loader's error:
// "NCCL loaded from /x/libnccl.so.2", or "NCCL could not be loaded from
// /etc/passwd: invalid ELF header" with the loader's reason, short (as
// shortReason says it), or, where the driver loaded but cuInit failed,
// that.
func libKnobEffect(name, value, what string, loadErr error) string {
	if loadErr == nil {
		return fmt.Sprintf("%s loaded from %s", what, value)
	}
	var ce *cuda.Error
	if errors.As(loadErr, &ce) {
		return fmt.Sprintf("%s in %s loaded but did not start: %v", what, value, loadErr)
	}
	why := shortReason(loadErr.Error())
	// shortReason names the file as NAME=VALUE; this line has both already.
	if rest, ok := strings.CutPrefix(why, name+"="+value+" "); ok {
		why = strings.TrimPrefix(rest, "cannot be loaded: ")
	}
	return fmt.Sprintf("%s could not be loaded from %s: %s", what, value, why)
}

// finalizeBoundEffect reads GPUCOMM_MPI_FINALIZE_BOUND as internal/mpi
// does when MPI starts (finalizeBoundIn there) in this binary's MPI family.
func finalizeBoundEffect(value string) (effect, problem string) {
	return finalizeBoundEffectIn(mpi.Family(), value)
}

// finalizeBoundEffectIn is finalizeBoundEffect in MPI family fam: unset,
// "0" or "off" is no bound, else a duration of 0 or more, which Open MPI
// ignores.
func finalizeBoundEffectIn(fam, value string) (effect, problem string) {
	d, err := time.ParseDuration(value)
	switch {
	case value == "" || value == "0" || value == "off" || err == nil && d == 0:
		return "MPI_Finalize unbounded, with no barrier before it", ""
	case err != nil || d < 0:
		return "invalid", fmt.Sprintf("%s=%q: want a positive duration such as 10s, or 0 or off for none", mpi.FinalizeBoundEnv, value)
	}
	if fam == "openmpi" {
		return fmt.Sprintf("ignored: this binary's MPI is Open MPI, whose mpirun fails a job whose rank leaves MPI_Finalize running (the bound of %v is for MPICH)", d), ""
	}
	return fmt.Sprintf("MPICH: a rank whose MPI_Finalize has not returned %v after the barrier before it leaves it running and ends with its own status "+
		"(launch with Hydra's -disable-auto-cleanup; ignored under Open MPI)", d), ""
}

func writeInfoText(w io.Writer, rep infoReport) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Backends (best first):")
	for _, b := range rep.Backends {
		status := "usable"
		if !b.Usable {
			status = "not usable"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", b.Name, status, b.Reason)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "Devices:")
	for _, d := range rep.Devices {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", d.Kind, d.Count, d.Detail)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "Environment:")
	for _, k := range rep.Environment {
		v := k.Value
		if !k.Set {
			v = "(unset)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.Name, v, k.Effect)
	}
	tw.Flush()
	if len(rep.Routes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Routes of the mpi backend (messages of GPUCOMM_NODE_BYTES or more):")
		for _, r := range rep.Routes {
			fmt.Fprintf(w, "  %s\n", r)
		}
	}
}

// sizeEffect describes a size setting: off (negative), the default (0), or
// from n bytes (atFormat's %d).
func sizeEffect(n int, off, byDefault, atFormat string) string {
	switch {
	case n < 0:
		return off
	case n == 0:
		return byDefault
	}
	return fmt.Sprintf(atFormat, n)
}

// loaderError matches a dynamic loader's failure with the layers that
// wrapped it ("nccl: load NCCL: dl: cannot open libnccl.so.2, libnccl.so
// (...): library not found (set GPUCOMM_NCCL_LIB to its path)"): the names
// tried (1), dlerror's reason for each, joined by "; " (2: a reason may hold
// one level of parentheses, as glibc's "(required by ...)"), then "library
// not found", or "NAME exists but could not be loaded" where a file was
// there (internal/dl says which; shortReason tells them apart from the
// reasons itself), and the
// variable that points gpucomm at the library, unset (3) or set (4), as
// internal/dl's EnvHint words it.
var loaderError = regexp.MustCompile(`(?:(?:nccl|nvrtc|cuda|devmem|cuda driver|load [A-Za-z -]+): )*` +
	`dl: cannot open ([^()]+?) \(((?:[^()]|\([^()]*\))*)\): (?:library not found|[^()]+? exists but could not be loaded)` +
	`(?: \((?:set (\w+) to its path|named by (\w+))\))?`)

// libKnobs names the variable that points gpucomm at each library, for a
// loader's error that does not name it.
var libKnobs = map[string]string{"libnccl": "GPUCOMM_NCCL_LIB", "libcuda": "GPUCOMM_CUDA_LIB", "libnvrtc": "GPUCOMM_NVRTC_LIB"}

// noSuchFile is dlerror's reason for a name it found no file for.
const noSuchFile = ": cannot open shared object file: No such file or directory"

// shortReason turns each loader failure in a verdict into one short phrase
// instead of every path the loader tried and why: "LIB not found (set VAR
// to its path)" when no file of any name tried exists; otherwise, for the
// first name whose file would not load, "LIB cannot be loaded: " and the
// loader's reason (an ELF header it cannot read, a library it needs that is
// missing, a symbol it cannot resolve). A variable that named the file is
// said as VAR=FILE.
func shortReason(s string) string {
	return loaderError.ReplaceAllStringFunc(s, func(m string) string {
		g := loaderError.FindStringSubmatch(m)
		names, whys := strings.Split(g[1], ", "), strings.Split(g[2], "; ")
		if len(whys) != len(names) { // a "; " inside a reason: keep it whole
			names, whys = names[:1], []string{g[2]}
		}
		knob, named := g[3], g[4] != ""
		if named {
			knob = g[4]
		}
		if knob == "" {
			for prefix, k := range libKnobs {
				if strings.HasPrefix(filepath.Base(names[0]), prefix) {
					knob = k
				}
			}
		}
		return loadFailure(names, whys, knob, named)
	})
}

// loadFailure is shortReason's phrase for the names tried and dlerror's
// reason for each; knob is the variable that points gpucomm at the library
// ("" when unknown), named whether it named the one file tried.
func loadFailure(names, whys []string, knob string, named bool) string {
	lib, why := names[0], ""
	for i, w := range whys {
		if w != names[i]+noSuchFile {
			lib, why = names[i], strings.TrimPrefix(w, names[i]+": ")
			break
		}
	}
	if named && knob != "" {
		lib = knob + "=" + lib
	}
	if why == "" {
		if named || knob == "" {
			return lib + " not found"
		}
		return lib + " not found (set " + knob + " to its path)"
	}
	if dep, ok := strings.CutSuffix(why, noSuchFile); ok && !strings.Contains(dep, ": ") {
		// The file is there, but a library it needs is not: dlerror names
		// only the missing one.
		why = "it needs " + dep + ", which is not found"
	}
	if named || knob == "" {
		return lib + " cannot be loaded: " + why
	}
	return lib + " cannot be loaded: " + why + " (" + knob + " can name another copy)"
}
