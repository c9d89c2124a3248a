package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

func TestJudgeViewsNamesWhatTheRanksDisagreeOn(t *testing.T) {
	view := func(env map[string]string, envErr string, args ...string) rankView {
		if env == nil {
			env = map[string]string{}
		}
		return rankView{Args: args, Env: env, EnvErr: envErr}
	}
	same := view(nil, "", "-n", "64")
	for _, tc := range []struct {
		name  string
		views []rankView
		says  []string // "" for none: the ranks agree
	}{
		{"agreeing ranks", []rankView{same, same, same}, nil},
		{"one rank's other flag", []rankView{view(nil, "", "-n", "64", "-steps", "6"), same, same},
			[]string{"the ranks were given different arguments", "rank 0 -n 64 -steps 6, ranks 1-2 -n 64"}},
		{"ranks 0 and 2 alike", []rankView{same, view(nil, "", "-n", "65"), same},
			[]string{"ranks 0, 2 -n 64, rank 1 -n 65"}},
		{"no arguments on one, a spaced one on another", []rankView{view(nil, ""), view(nil, "", "-op", "all reduce")},
			[]string{"rank 0 (none), rank 1 -op 'all reduce'"}},
		{"an environment error on every rank", []rankView{view(nil, "GPUCOMM_TIMEOUT=\"abc\": bad"), view(nil, "GPUCOMM_TIMEOUT=\"abc\": bad")},
			[]string{"ranks 0-1: GPUCOMM_TIMEOUT=\"abc\": bad"}},
		{"a backend set on one rank", []rankView{view(map[string]string{"GPUCOMM_BACKEND": "mpi"}, "", "-n", "64"), same},
			[]string{"the ranks disagree on GPUCOMM_BACKEND", "rank 0 GPUCOMM_BACKEND=mpi, rank 1 unset"}},
		{"a backend on one rank and a bad variable on the other", []rankView{view(map[string]string{"GPUCOMM_BACKEND": "nccl"}, "", "-n", "64"), view(nil, "GPUCOMM_NODE_BYTES=\"0\": bad", "-n", "64")},
			[]string{"rank 1: GPUCOMM_NODE_BYTES=\"0\": bad", "the ranks disagree on GPUCOMM_BACKEND"}},
	} {
		got := judgeViews(tc.views)
		if tc.says == nil {
			if got != "" {
				t.Errorf("%s: %q; want the ranks to agree", tc.name, got)
			}
			continue
		}
		for _, w := range tc.says {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q does not say %q", tc.name, got, w)
			}
		}
	}
}

// Under a real launcher, ranks given different flags or a variable every
// rank must share set on one rank only all stop at once, rank 0 saying
// why; before, bench hung when one rank's flags were wrong (that rank
// waited in MPI_Finalize, the others in Open), and heat with one rank's
// other step count, or check with one rank's other tests, waited for ever.
func TestRanksThatDisagreeStopTogether(t *testing.T) {
	bin := launcherCommand(t)
	path, args, err := mpitest.Launcher(3)
	if err != nil {
		t.Skip(err)
	}
	// rank0 runs the command with rank 0's extra arguments and variable.
	rank0 := filepath.Join(t.TempDir(), "rank0.sh")
	script := `#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
if [ "$r" = 0 ]; then
  [ -n "$AGREE_RANK0_ENV" ] && export "$AGREE_RANK0_ENV"
  exec "$@" $AGREE_RANK0_ARGS
fi
exec "$@"
`
	if err := os.WriteFile(rank0, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, extra, env string
		argv             []string
		says             string
	}{
		{"bench with one rank's bad flag", "-n 0", "", []string{"bench", "-backend", "mpi", "-op", "allreduce", "-b", "8", "-e", "8", "-n", "5", "-nobaseline", "-noprogress"},
			"rank 0 -backend mpi -op allreduce -b 8 -e 8 -n 5 -nobaseline -noprogress -n 0, ranks 1-2 -backend mpi"},
		{"heat with one rank's step count", "-steps 6", "", []string{"heat", "-backend", "mpi", "-n", "64", "-steps", "5"},
			"the ranks were given different arguments"},
		{"check with one rank's tests", "-run AllReduce", "", []string{"check", "-backend", "mpi", "-short"},
			"the ranks were given different arguments"},
		{"bench with one rank's bad variable", "", "GPUCOMM_NODE_BYTES=0", []string{"bench", "-backend", "mpi", "-op", "allreduce", "-b", "8", "-e", "8", "-n", "5", "-nobaseline", "-noprogress"},
			`rank 0: GPUCOMM_NODE_BYTES="0"`},
		{"check with another backend on one rank", "", "GPUCOMM_BACKEND=local", []string{"check", "-backend", "mpi", "-short", "-run", "AllReduce"},
			"the ranks disagree on GPUCOMM_BACKEND, which every rank must share: rank 0 GPUCOMM_BACKEND=local, ranks 1-2 unset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, path, append(args, append([]string{rank0, bin}, tc.argv...)...)...)
			cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
				"GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND=", "GPUCOMM_DEBUG=", "GPUCOMM_NODE_BYTES=",
				"AGREE_RANK0_ARGS="+tc.extra, "AGREE_RANK0_ENV="+tc.env)
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the job still ran after 90 s:\n%s", out)
			}
			if err == nil {
				t.Fatalf("the job succeeded; want every rank to stop:\n%s", out)
			}
			if !strings.Contains(string(out), tc.says) {
				t.Fatalf("the output does not say %q:\n%s", tc.says, out)
			}
			for _, r := range []string{"rank 1 stops with the others", "rank 2 stops with the others"} {
				if !strings.Contains(string(out), r) {
					t.Errorf("the output does not say %q:\n%s", r, out)
				}
			}
		})
	}
}
