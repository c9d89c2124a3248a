package comm

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm/driver"
)

type fakeComm struct {
	Communicator
	name string
	opts Options
}

// fakeOpenErr, when set, is what a fake backend's Open returns instead of
// a communicator; fakeOpened lists the fakes whose Open ran.
// fakeAutoOn makes the fake-auto-... backends usable, ahead of the others.
var (
	fakeOpenErr map[string]error
	fakeOpened  []string
	fakeAutoOn  bool
)

func registerFakes(t *testing.T) {
	t.Helper()
	onlyFakes(t)
	// The fakes leave with the test, so that "auto" in the examples, which
	// run in this binary after the tests, sees only the real backends.
	t.Cleanup(func() {
		regMu.Lock()
		defer regMu.Unlock()
		for name := range drivers {
			if strings.HasPrefix(name, "fake-") {
				delete(drivers, name)
			}
		}
	})
	for _, f := range []struct {
		name      string
		usable    bool
		rank      int
		tentative bool
	}{{"fake-good", true, 1, false}, {"fake-best-unusable", false, 99, false}, {"fake-worse", true, -1, false}, {"fake-tentative", true, 50, true},
		{"fake-auto-a", false, 200, false}, {"fake-auto-b", false, 199, false}, {"fake-auto-tentative", false, 198, true}} {
		if _, ok := drivers[f.name]; ok {
			continue
		}
		f := f
		Register(f.name, driver.Driver{
			Open: func(o Options) (driver.Conn, error) {
				fakeOpened = append(fakeOpened, f.name)
				if err := fakeOpenErr[f.name]; err != nil {
					return nil, err
				}
				return &fakeComm{name: f.name, opts: o}, nil
			},
			Probe: func() Verdict {
				usable := f.usable || (fakeAutoOn && strings.HasPrefix(f.name, "fake-auto-"))
				return Verdict{Usable: usable, Tentative: f.tentative, Reason: f.name + " says so"}
			},
			Rank: f.rank,
		})
	}
}

// onlyFakes sets the real backends this binary registers aside for the
// test (comm/all, imported by the examples, brings local, and mpi and
// cudaaware under the mpi tags, which outrank every fake and open as a
// singleton), so that "auto" and Backends see the fakes alone.
func onlyFakes(t *testing.T) {
	t.Helper()
	regMu.Lock()
	aside := map[string]driver.Driver{}
	for name, d := range drivers {
		if !strings.HasPrefix(name, "fake-") {
			aside[name] = d
			delete(drivers, name)
		}
	}
	regMu.Unlock()
	t.Cleanup(func() {
		regMu.Lock()
		defer regMu.Unlock()
		for name, d := range aside {
			drivers[name] = d
		}
	})
}

func TestOpenPicksBestUsableAndAppliesOptions(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	t.Setenv("GPUCOMM_TIMEOUT", "3s")
	t.Setenv("GPUCOMM_DEBUG", "1")
	c, err := Open("auto", WithDevice("host"), WithChunkBytes(4096))
	if err != nil {
		t.Fatal(err)
	}
	f := c.(*fakeComm)
	if f.name != "fake-good" {
		t.Fatalf("auto chose %s, want fake-good (best usable for certain, ahead of a tentative one)", f.name)
	}
	want := Options{Device: "host", Timeout: 3 * time.Second, Debug: true, ChunkBytes: 4096}
	if f.opts != want {
		t.Fatalf("options %+v, want %+v", f.opts, want)
	}
}

func TestEnvironmentOverridesBackend(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "fake-worse")
	c, err := Open("fake-good")
	if err != nil {
		t.Fatal(err)
	}
	if c.(*fakeComm).name != "fake-worse" {
		t.Fatalf("GPUCOMM_BACKEND ignored: opened %s", c.(*fakeComm).name)
	}
}

func TestUnknownBackendListsKnownOnes(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	_, err := Open("nosuch")
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "fake-good") {
		t.Fatalf("Open(nosuch) = %v; want ErrInvalidArgument listing registered backends", err)
	}
	if _, err := Probe("nosuch"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Probe(nosuch) = %v", err)
	}
	if v, err := Probe("fake-best-unusable"); err != nil || v.Usable || v.Reason == "" {
		t.Fatalf("Probe = %+v, %v", v, err)
	}
	names := Backends()
	if names[0] != "fake-auto-a" || names[len(names)-1] != "fake-worse" {
		t.Fatalf("Backends() not ordered best first: %v", names)
	}
}

func TestMalformedEnvironmentIsAnError(t *testing.T) {
	for _, kv := range [][2]string{{"GPUCOMM_TIMEOUT", "soon"}, {"GPUCOMM_TIMEOUT", "-1s"}, {"GPUCOMM_DEBUG", "maybe"}, {"GPUCOMM_CHUNK_BYTES", "0"}, {"GPUCOMM_CHUNK_BYTES", "4X"}, {"GPUCOMM_CHUNK_BYTES", "-1K"}, {"GPUCOMM_CHUNK_BYTES", "3G"},
		{"GPUCOMM_NODE_BYTES", "0"}, {"GPUCOMM_NODE_BYTES", "-2"}, {"GPUCOMM_STAGE_REDUCE_BYTES", "0"}, {"GPUCOMM_STAGE_REDUCE_BYTES", "big"},
		{"GPUCOMM_IPC", "bogus"}} {
		t.Run(kv[0]+"="+kv[1], func(t *testing.T) {
			t.Setenv(kv[0], kv[1])
			if _, err := DefaultOptions(); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), kv[0]) {
				t.Fatalf("DefaultOptions() = %v, want ErrInvalidArgument naming %s", err, kv[0])
			}
		})
	}
	t.Setenv("GPUCOMM_TIMEOUT", "2.5")
	if o, err := DefaultOptions(); err != nil || o.Timeout != 2500*time.Millisecond {
		t.Fatalf("GPUCOMM_TIMEOUT=2.5 gave %v, %v", o.Timeout, err)
	}
}

func TestRegisterRefusesDuplicatesAndIncompleteDrivers(t *testing.T) {
	registerFakes(t)
	for name, d := range map[string]driver.Driver{
		"fake-good": {Open: func(Options) (driver.Conn, error) { return nil, nil }, Probe: func() Verdict { return Verdict{} }},
		"auto":      {Open: func(Options) (driver.Conn, error) { return nil, nil }, Probe: func() Verdict { return Verdict{} }},
		"fake-nil":  {},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", name)
				}
			}()
			Register(name, d)
		}()
	}
}

func TestErrorWrapsSentinelAndNamesRank(t *testing.T) {
	err := driver.Errorf("mpi", "AllReduce", 3, ErrTimeout, "waited %v", time.Second)
	var e *Error
	if !errors.As(err, &e) || e.Rank != 3 || !errors.Is(err, ErrTimeout) {
		t.Fatalf("Errorf gave %#v", err)
	}
	if s := err.Error(); !strings.Contains(s, "mpi rank 3: AllReduce") {
		t.Fatalf("message %q", s)
	}
	if driver.Wrap("x", "y", 0, err) != err || driver.Wrap("x", "y", 0, nil) != nil {
		t.Fatal("Wrap must keep an *Error and nil as they are")
	}
}

func TestChunkBytesFromTheEnvironmentTakesSuffixes(t *testing.T) {
	for v, want := range map[string]int{"65536": 65536, "512K": 512 << 10, "4M": 4 << 20, "4MiB": 4 << 20, "1g": 1 << 30, " 4k ": 4096} {
		t.Setenv("GPUCOMM_CHUNK_BYTES", v)
		o, err := DefaultOptions()
		if err != nil || o.ChunkBytes != want {
			t.Errorf("GPUCOMM_CHUNK_BYTES=%q: %d, %v; want %d", v, o.ChunkBytes, err, want)
		}
	}
}

func TestThresholdsFromTheEnvironmentTakeSizesAndOff(t *testing.T) {
	for _, name := range []string{"GPUCOMM_NODE_BYTES", "GPUCOMM_STAGE_REDUCE_BYTES"} {
		for v, want := range map[string]int{"": 0, "65536": 65536, "64K": 64 << 10, "off": -1, " OFF ": -1, "-1": -1} {
			t.Setenv(name, v)
			o, err := DefaultOptions()
			got := o.NodeBytes
			if name == "GPUCOMM_STAGE_REDUCE_BYTES" {
				got = o.StageReduceBytes
			}
			if err != nil || got != want {
				t.Errorf("%s=%q: %d, %v; want %d", name, v, got, err, want)
			}
		}
	}
}

// A backend that refuses the job as a whole (not CUDA-aware, ranks sharing a
// GPU) hands "auto" over to the next candidate, those usable for certain
// first; any other failure ends the search with that error.
func TestAutoFallsBackPastABackendThatRefusesTheJob(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	fakeAutoOn = true
	defer func() { fakeOpenErr, fakeOpened, fakeAutoOn = nil, nil, false }()
	notAware := driver.Errorf("fake-auto-a", "Open", 0, ErrNotCUDAAware, "MPI here is not CUDA-aware; use another backend")
	shared := driver.Errorf("fake-auto-b", "Open", 0, ErrDuplicateGPU, "ranks 0 and 1 share GPU 0")
	cases := []struct {
		name   string
		errs   map[string]error
		opened string   // the backend auto ends on, "" for none
		tried  []string // in order
		want   error    // of a failure
	}{
		{"first refuses", map[string]error{"fake-auto-a": notAware}, "fake-auto-b", []string{"fake-auto-a", "fake-auto-b"}, nil},
		{"both refuse: certain before tentative", map[string]error{"fake-auto-a": notAware, "fake-auto-b": shared}, "fake-good",
			[]string{"fake-auto-a", "fake-auto-b", "fake-good"}, nil},
		{"another failure ends it", map[string]error{"fake-auto-a": driver.Errorf("fake-auto-a", "Open", 0, ErrInvalidArgument, "bad chunk")}, "",
			[]string{"fake-auto-a"}, ErrInvalidArgument},
		{"a failure after a refusal", map[string]error{"fake-auto-a": notAware, "fake-auto-b": driver.Errorf("fake-auto-b", "Open", 0, ErrTimeout, "slow")}, "",
			[]string{"fake-auto-a", "fake-auto-b"}, ErrTimeout},
	}
	for _, tc := range cases {
		fakeOpenErr, fakeOpened = tc.errs, nil
		c, err := Open("auto")
		if strings.Join(fakeOpened, ",") != strings.Join(tc.tried, ",") {
			t.Errorf("%s: auto tried %v, want %v", tc.name, fakeOpened, tc.tried)
		}
		if tc.opened != "" {
			if f, ok := c.(*fakeComm); err != nil || !ok || f.name != tc.opened {
				t.Errorf("%s: Open(auto) = %v, %v; want %s", tc.name, c, err, tc.opened)
			}
			continue
		}
		if c != nil || !errors.Is(err, tc.want) || errors.Is(err, ErrNotCUDAAware) {
			t.Errorf("%s: Open(auto) = %v, %v; want an error wrapping %v (and not an earlier refusal)", tc.name, c, err, tc.want)
			continue
		}
		for _, e := range tc.errs {
			if !strings.Contains(err.Error(), e.Error()) {
				t.Errorf("%s: %v does not say %q", tc.name, err, e)
			}
		}
	}
	// Every candidate refusing is ErrUnsupported, saying each refusal.
	fakeOpenErr = map[string]error{"fake-auto-a": notAware, "fake-auto-b": shared}
	c, err := openFirst(Options{}, []string{"fake-auto-a", "fake-auto-b"})
	if c != nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), notAware.Error()) || !strings.Contains(err.Error(), shared.Error()) {
		t.Errorf("every candidate refusing: %v, %v; want ErrUnsupported naming both refusals", c, err)
	}
}

// A chunk of a few bytes turns one transfer into thousands of MPI messages
// (8 bytes made an 8 MiB AllGather take 40 s): sizes outside 512..1G are
// refused, from the environment and from WithChunkBytes alike.
func TestChunkBytesOutsideTheSaneRangeAreRefused(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	for _, v := range []string{"8", "511", "2G", "1025M"} {
		t.Setenv("GPUCOMM_CHUNK_BYTES", v)
		_, err := DefaultOptions()
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "GPUCOMM_CHUNK_BYTES") || !strings.Contains(err.Error(), "512 to 1") {
			t.Errorf("GPUCOMM_CHUNK_BYTES=%s: %v; want ErrInvalidArgument naming the variable and the range", v, err)
		}
	}
	for v, want := range map[string]int{"512": MinChunkBytes, "1000": 1000, "1G": MaxChunkBytes} {
		t.Setenv("GPUCOMM_CHUNK_BYTES", v)
		if o, err := DefaultOptions(); err != nil || o.ChunkBytes != want {
			t.Errorf("GPUCOMM_CHUNK_BYTES=%s: %d, %v; want %d", v, o.ChunkBytes, err, want)
		}
	}
	t.Setenv("GPUCOMM_CHUNK_BYTES", "")
	fakeOpened = nil
	for _, n := range []int{8, MinChunkBytes - 1, MaxChunkBytes + 1, -4096} {
		c, err := Open("fake-good", WithChunkBytes(n))
		var e *Error
		if c != nil || !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || e.Backend != "fake-good" || e.Op != "Open" {
			t.Errorf("WithChunkBytes(%d): %v, %v; want fake-good's Open *Error wrapping ErrInvalidArgument", n, c, err)
		}
	}
	if len(fakeOpened) != 0 {
		t.Errorf("a backend opened with a refused chunk: %v", fakeOpened)
	}
	if c, err := Open("fake-good", WithChunkBytes(0)); err != nil || c.(*fakeComm).opts.ChunkBytes != 0 {
		t.Errorf("WithChunkBytes(0) (the default): %v, %v", c, err)
	}
}

// GPUCOMM_DEVICE=bogus used to reach a backend that never looked at it; an
// unknown device is an error from DefaultOptions and from Open.
func TestUnknownDeviceIsAnError(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	for _, v := range []string{"bogus", "cuda:", "cuda:-1", "gpu0", "cuda:x"} {
		t.Setenv("GPUCOMM_DEVICE", v)
		if _, err := DefaultOptions(); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "GPUCOMM_DEVICE") {
			t.Errorf("GPUCOMM_DEVICE=%s: %v; want ErrInvalidArgument naming the variable", v, err)
		}
		if c, err := Open("fake-good"); c != nil || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Open with GPUCOMM_DEVICE=%s: %v, %v", v, c, err)
		}
	}
	for _, v := range []string{"", "auto", "host", "cuda", "CUDA:7", " cuda:0 "} {
		t.Setenv("GPUCOMM_DEVICE", v)
		if o, err := DefaultOptions(); err != nil || o.Device != v {
			t.Errorf("GPUCOMM_DEVICE=%q: %+v, %v", v, o, err)
		}
	}
	t.Setenv("GPUCOMM_DEVICE", "")
	if c, err := Open("fake-good", WithDevice("bogus")); c != nil || !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("WithDevice(bogus): %v, %v; want ErrInvalidArgument", c, err)
	}
}

// Errors read once: no sentinel text twice, no "rank -1".
func TestErrorMessagesSayEachThingOnce(t *testing.T) {
	for _, tc := range []struct {
		err      error
		sentinel error
		want     string
	}{
		{driver.Errorf("local", "AllReduce", 0, ErrClosed, "communicator is closed"), ErrClosed,
			"gpucomm local rank 0: AllReduce: communicator is closed"},
		{driver.Errorf("mpi", "Open", -1, ErrNotBuilt, "MPI is missing"), ErrNotBuilt,
			"gpucomm mpi: Open: MPI is missing: backend not built into this binary"},
		{driver.Errorf("nccl", "Open", 2, ErrTimeout, "after 3s: operation timed out"), ErrTimeout,
			"gpucomm nccl rank 2: Open: after 3s: operation timed out"},
		{driver.Wrap("mpi", "Open", -1, ErrNotBuilt), ErrNotBuilt, "gpucomm mpi: Open: backend not built into this binary"},
		{&Error{Backend: "x", Rank: 1, Err: ErrClosed}, ErrClosed, "gpucomm x rank 1: communicator is closed"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("message %q, want %q", got, tc.want)
		}
		if !errors.Is(tc.err, tc.sentinel) {
			t.Errorf("%v does not wrap %v", tc.err, tc.sentinel)
		}
		if s := tc.err.Error(); strings.Count(s, tc.sentinel.Error()) > 1 || strings.Contains(s, "rank -1") {
			t.Errorf("%q repeats itself or prints rank -1", s)
		}
	}
}

// A nil option is an error, not a panic, and nothing is opened.
func TestNilOptionIsAnError(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	fakeOpened = nil
	c, err := Open("fake-good", WithTimeout(time.Second), nil)
	if c != nil || !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "option 2 of 2 is nil") {
		t.Errorf("Open with a nil option = %v, %v; want ErrInvalidArgument naming option 2", c, err)
	}
	if len(fakeOpened) != 0 {
		t.Errorf("the backend opened (%v) despite the nil option", fakeOpened)
	}
}

// Probe("auto") answers for the backend auto would try first.
func TestProbeAutoAnswersForAutosChoice(t *testing.T) {
	registerFakes(t)
	t.Setenv("GPUCOMM_BACKEND", "")
	first, err := Auto() // fake-good, or a real backend registered beside the fakes (-tags mpi)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Probe(first)
	if err != nil || !want.Usable {
		t.Fatalf("Probe(%s) = %+v, %v; want auto's first choice usable", first, want, err)
	}
	for _, name := range []string{"auto", ""} {
		v, err := Probe(name)
		if err != nil || v != want {
			t.Errorf("Probe(%q) = %+v, %v; want %s's verdict %+v", name, v, err, first, want)
		}
	}
}

// knownBackends repeats what comm/all imports (comm cannot import it: all
// imports the backends, which import comm); the two lists must agree, or
// an unknown name's error advises the import wrongly.
func TestKnownBackendsAreWhatAllImports(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("all", "all.go"), nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var imported []string
	for _, im := range f.Imports {
		p, err := strconv.Unquote(im.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		imported = append(imported, path.Base(p))
	}
	known := slices.Clone(knownBackends)
	slices.Sort(imported)
	slices.Sort(known)
	if !slices.Equal(imported, known) {
		t.Fatalf("comm/all imports %v, knownBackends says %v", imported, known)
	}
}

// When the backend auto chose cannot do what was asked (ErrUnsupported: the
// in-process backend and a GPU, where the MPI backends are not built), the
// error goes on to name the backends that were no choice and why, where it
// named only the chosen one's refusal; another failure is left as it is.
func TestAutoNamesTheUnusableBackendsWhenItsChoiceCannotServe(t *testing.T) {
	registerFakes(t)
	fakeOpenErr = map[string]error{"fake-good": fmt.Errorf("fake-good cannot use that device: %w", ErrUnsupported)}
	t.Cleanup(func() { fakeOpenErr = nil })
	_, err := Open("auto")
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "fake-good cannot use that device") ||
		!strings.Contains(err.Error(), "not usable here: ") || !strings.Contains(err.Error(), "fake-best-unusable: fake-best-unusable says so") ||
		strings.Contains(err.Error(), "fake-worse:") {
		t.Errorf("Open(auto) = %v; want the choice's refusal, then each unusable backend with its reason (and no usable one)", err)
	}
	fakeOpenErr = map[string]error{"fake-good": fmt.Errorf("fake-good broke: %w", ErrInvalidArgument)}
	if _, err := Open("auto"); err == nil || strings.Contains(err.Error(), "not usable here") {
		t.Errorf("Open(auto) with another failure = %v; want it as it is", err)
	}
}
