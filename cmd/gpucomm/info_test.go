package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/pipeline"
)

// withSections makes infoSections exactly ss for one test.
func withSections(t *testing.T, ss ...func(io.Writer) error) {
	t.Helper()
	saved := infoSections
	infoSections = ss
	t.Cleanup(func() { infoSections = saved })
}

func TestInfoShowsLocalUsableAndTheKnobs(t *testing.T) {
	withSections(t)
	t.Setenv("GPUCOMM_TIMEOUT", "45s")
	code, out, errOut := runCLI(t, "info")
	if code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
	}
	var localLine string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "local" {
			localLine = line
		}
	}
	if f := strings.Fields(localLine); len(f) < 2 || f[1] != "usable" {
		t.Errorf("want a line saying local is usable, got %q in:\n%s", localLine, out)
	}
	for _, want := range []string{`host\s+1\s+.*always available`, `cuda\s+\d+`, `GPUCOMM_BACKEND\s+\(unset\)`, "GPUCOMM_DEVICE", "GPUCOMM_DEBUG",
		`GPUCOMM_TIMEOUT\s+45s\s+.*after 45s`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("info lacks %q:\n%s", want, out)
		}
	}
}

func TestInfoJSONAgreesWithTheRegistry(t *testing.T) {
	withSections(t, func(w io.Writer) error { _, err := fmt.Fprint(w, "Topology: none"); return err })
	code, out, errOut := runCLI(t, "info", "-json")
	if code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
	}
	var rep infoReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	usable := map[string]bool{}
	for _, b := range rep.Backends {
		usable[b.Name] = b.Usable
	}
	if !usable["local"] || usable[unusableBackend] {
		t.Errorf("backends %+v: want local usable and %s not", rep.Backends, unusableBackend)
	}
	if len(rep.Environment) != len(knobs) || len(rep.Devices) != 2 || len(rep.Problems) != 0 {
		t.Errorf("report %+v: want every knob, host and cuda, no problems", rep)
	}
	if len(rep.Sections) != 1 || rep.Sections[0] != "Topology: none" {
		t.Errorf("sections %q: want the hooked section's text", rep.Sections)
	}
}

func TestInfoSectionsFollowItsOwnOutputAndTheirErrorsFail(t *testing.T) {
	withSections(t,
		func(w io.Writer) error { _, err := fmt.Fprintln(w, "GPU topology"); return err },
		func(io.Writer) error { return errors.New("nvml: library not found") },
	)
	code, out, errOut := runCLI(t, "info")
	if code != exitFail || !strings.Contains(errOut, "nvml: library not found") {
		t.Errorf("exit %d, stderr %q; want 1 and the section's error", code, errOut)
	}
	if env, topo := strings.Index(out, "Environment:"), strings.Index(out, "GPU topology"); env < 0 || topo < env {
		t.Errorf("the hooked section should follow info's own output:\n%s", out)
	}
}

func TestInfoFlagsMalformedSettings(t *testing.T) {
	withSections(t)
	for knob, value := range map[string]string{
		"GPUCOMM_TIMEOUT": "soon",
		"GPUCOMM_DEBUG":   "maybe",
		"GPUCOMM_DEVICE":  "gpu0",
	} {
		t.Run(knob, func(t *testing.T) {
			t.Setenv(knob, value)
			code, out, errOut := runCLI(t, "info")
			if code != exitFail || !strings.Contains(errOut, knob) {
				t.Errorf("exit %d, stderr %q; want 1 naming %s", code, errOut, knob)
			}
			if !strings.Contains(out, "invalid") {
				t.Errorf("the table should mark the setting invalid:\n%s", out)
			}
		})
	}
	// info reads GPUCOMM_BACKEND rather than obeying it, so it cannot use
	// runCLI, which clears it.
	t.Setenv("GPUCOMM_BACKEND", "nosuch")
	var out, errOut strings.Builder
	if code := run([]string{"info"}, &out, &errOut); code != exitFail || !strings.Contains(errOut.String(), "local") {
		t.Errorf("GPUCOMM_BACKEND=nosuch: exit %d, stderr %q; want 1 listing the registered backends", code, errOut.String())
	}
}

// Without MPI in the binary, -mpi has nothing to start: the cudaaware line
// says how to rebuild and info succeeds. (With MPI, mpitest's InfoCommand
// runs it under the launcher: here it would end MPI for the test process.)
// The routes line, and check's probe, say how to get MPI in: the tag, or,
// where the tag was given but cgo was off (the build then takes the MPI
// stub without a word), cgo; never "rebuild with -tags mpi" to a binary
// built with it. This binary's case is checked here; the other runs under
// CGO_ENABLED=0 go test -tags mpi, and in the binaries that
// TestABinaryTaggedMPIWithoutCgoSaysCgoWasOff builds.
func TestInfoMPIWithoutMPIBuiltSaysSo(t *testing.T) {
	if mpiBuiltForTest {
		t.Skip("MPI is built in: internal/mpicomm/mpitest runs info -mpi under the launcher")
	}
	withSections(t)
	code, out, errOut := runCLI(t, "info", "-mpi")
	if code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
	}
	if !regexp.MustCompile(`cudaaware\s+not usable\s+not built`).MatchString(out) {
		t.Errorf("info -mpi without MPI built:\n%s", out)
	}
	m := routesLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("info -mpi prints no routes line:\n%s", out)
	}
	checkBuildAdvice(t, m[1], mpi.TaggedWithoutCgo())
	code, out, errOut = runCLI(t, "check", "-probe-only", "-np", "1")
	if code != exitOK {
		t.Fatalf("check -probe-only: exit %d\nstderr:\n%s", code, errOut)
	}
	if m = probeMPILine.FindStringSubmatch(out); m == nil {
		t.Fatalf("check -probe-only prints no mpi line:\n%s", out)
	}
	checkBuildAdvice(t, m[1], mpi.TaggedWithoutCgo())
}

// info judges GPUCOMM_TRACE_PIPELINE with the parser the mpi backend opens
// with: a value the backend would refuse on every rank is flagged invalid
// with exit 1, a value it takes is described, never the other way round.
func TestInfoJudgesTheTraceSettingAsTheBackendDoes(t *testing.T) {
	withSections(t)
	for _, value := range []string{"abc", "20", "20,0", "-1,2", "1,2,3", "20,x", "20,2", " 3 , 4 ", "0,1"} {
		t.Run(value, func(t *testing.T) {
			t.Setenv(pipeline.TraceEnv, value)
			_, backendErr := pipeline.NewTracer(value)
			code, out, errOut := runCLI(t, "info")
			line := regexp.MustCompile(`(?m)^  ` + pipeline.TraceEnv + `\s.*$`).FindString(out)
			if backendErr != nil {
				if code != exitFail || !strings.Contains(errOut, fmt.Sprintf("%s=%q: want SKIP,COUNT", pipeline.TraceEnv, value)) {
					t.Errorf("the backend refuses it (%v), but info exits %d, stderr %q", backendErr, code, errOut)
				}
				if !strings.HasSuffix(line, "invalid") {
					t.Errorf("the table should mark the setting invalid: %q", line)
				}
				return
			}
			if code != exitOK || strings.Contains(errOut, pipeline.TraceEnv) {
				t.Errorf("the backend takes it, but info exits %d, stderr %q", code, errOut)
			}
			if !strings.Contains(line, "timeline") {
				t.Errorf("the table should describe the timeline: %q", line)
			}
		})
	}
}
