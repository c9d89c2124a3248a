package main

import (
	"bytes"
	"strings"
	"testing"
)

// runWithBackendEnv runs the program in-process with GPUCOMM_BACKEND set to
// env, as a shell that still holds it from an earlier session would.
func runWithBackendEnv(t *testing.T, env string, args ...string) (code int, stderr string) {
	t.Helper()
	t.Setenv("GPUCOMM_BACKEND", env)
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, errOut.String()
}

// A GPUCOMM_BACKEND left in the environment chose the backend, and the
// error that choice causes says so: the README's quick start (check -np 4)
// in a shell that holds GPUCOMM_BACKEND=mpi, with or without -backend.
func TestAnErrorOfTheBackendChoiceSaysGPUCOMMBackendMadeIt(t *testing.T) {
	for _, c := range []struct {
		name string
		env  string
		args []string
		code int
		says []string
	}{
		{"check -np", "mpi", []string{"check", "-np", "4"}, exitUsage,
			[]string{"-np applies to the local backend only", "the backend came from GPUCOMM_BACKEND=mpi in the environment", "whose default is local"}},
		{"heat -np", "mpi", []string{"heat", "-np", "4"}, exitUsage,
			[]string{"-np applies to the local backend only", "the backend came from GPUCOMM_BACKEND=mpi in the environment", "whose default is local"}},
		{"bench -np", "mpi", []string{"bench", "-np", "4"}, exitUsage,
			[]string{"-np applies to the local backend only", "the backend came from GPUCOMM_BACKEND=mpi in the environment", "whose default is local"}},
		{"check -backend local -np", "mpi", []string{"check", "-backend", "local", "-np", "4"}, exitUsage,
			[]string{"-np applies to the local backend only", "GPUCOMM_BACKEND=mpi in the environment, which overrides -backend local"}},
		{"check -device", "local", []string{"check", "-backend", singleBackend, "-device", "cuda"}, exitUsage,
			[]string{"the local backend runs on simulated host devices only", "GPUCOMM_BACKEND=local in the environment, which overrides -backend " + singleBackend}},
		{"check unknown", "nosuch", []string{"check"}, exitUsage,
			[]string{`unknown backend "nosuch"`, "the backend came from GPUCOMM_BACKEND=nosuch"}},
		{"heat unknown", "nosuch", []string{"heat"}, exitUsage,
			[]string{`unknown backend "nosuch"`, "the backend came from GPUCOMM_BACKEND=nosuch"}},
		{"check unusable", unusableBackend, []string{"check"}, exitFail,
			[]string{"cannot run here: " + unusableReason, "the backend came from GPUCOMM_BACKEND=" + unusableBackend}},
		{"check cannot open", brokenBackend, []string{"check", "-probe=false", "-run", "^Identity$"}, exitFail,
			[]string{"did not open: no case ran", "the backend came from GPUCOMM_BACKEND=" + brokenBackend}},
		{"heat cannot open", brokenBackend, []string{"heat", "-n", "8", "-steps", "1"}, exitFail,
			[]string{brokenReason, "the backend came from GPUCOMM_BACKEND=" + brokenBackend}},
		{"bench cannot open", brokenBackend, []string{"bench", "-n", "1"}, exitFail,
			[]string{brokenReason, "the backend came from GPUCOMM_BACKEND=" + brokenBackend}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"} {
				t.Setenv(k, "") // this process is rank 0, whoever launched the test
			}
			code, errOut := runWithBackendEnv(t, c.env, c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d\nstderr:\n%s", code, c.code, errOut)
			}
			for _, want := range c.says {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr does not say %q:\n%s", want, errOut)
				}
			}
		})
	}
}

// The note is for a backend the variable chose: none when it is unset, or
// when it names the backend -backend gave.
func TestNoGPUCOMMBackendNoteWhenTheFlagChose(t *testing.T) {
	for _, env := range []string{"", "mpi"} {
		for _, cmd := range []string{"check", "heat", "bench"} {
			code, errOut := runWithBackendEnv(t, env, cmd, "-backend", "mpi", "-np", "4")
			if code != exitUsage || !strings.Contains(errOut, "-np applies to the local backend only") || strings.Contains(errOut, "GPUCOMM_BACKEND") {
				t.Errorf("GPUCOMM_BACKEND=%q %s -backend mpi -np 4: exit %d, stderr:\n%s", env, cmd, code, errOut)
			}
		}
	}
}
