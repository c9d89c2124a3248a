package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/internal/launcher"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// The ranks of one job must run one command. When they do not (a wrapper
// script that gives one rank other flags, a variable exported on one node
// only), check, bench and heat went their own ways: a rank whose flags were
// wrong stopped while the others waited for it in Open (bench then hung in
// MPI_Finalize), and ranks given different sizes, step counts or tests
// waited for each other in different collectives for ever, or compared
// results of different runs and called the backend wrong. So under a
// launcher that started several ranks, with MPI built in, these commands
// first exchange their arguments, the variables that every rank must share
// and what is wrong with each rank's environment, and all stop together,
// each naming the ranks that differ, before any of them waits for another.

// sharedEnv are the variables the ranks of a job must agree on: the
// backend. GPUCOMM_DEVICE may differ (a wrapper binds each rank to its
// GPU), and so may the timeouts; GPUCOMM_DEBUG and GPUCOMM_CHUNK_BYTES the
// backends' Open settles among the ranks itself.
var sharedEnv = []string{"GPUCOMM_BACKEND"}

// rankView is what a rank tells the others before a command runs.
type rankView struct {
	Args   []string          `json:"args"`
	Env    map[string]string `json:"env"`
	EnvErr string            `json:"env_err,omitempty"`
}

func ownView(args []string) rankView {
	v := rankView{Args: args, Env: map[string]string{}}
	if v.Args == nil {
		v.Args = []string{}
	}
	for _, k := range sharedEnv {
		if val := os.Getenv(k); val != "" {
			v.Env[k] = val
		}
	}
	if _, err := comm.DefaultOptions(); err != nil {
		v.EnvErr = err.Error()
	}
	return v
}

// agreeOnArgs exchanges the rank's view with the others of its job and
// returns why the job must stop, the same on every rank, or "" to go on
// (also when there is no job of several ranks, or no MPI to ask: the
// command then says what it says today).
func agreeOnArgs(args []string) string {
	job, launched := launcher.FromEnv()
	if !launched || !job.MultiRank() || !mpi.Built() || mpi.Init() != nil {
		return ""
	}
	if job.Size > 0 && mpi.World().Size() != job.Size {
		return "" // not this launcher's MPI: the command's Open says so
	}
	mine, err := json.Marshal(ownView(args))
	if err != nil {
		return ""
	}
	all, err := mpi.AllgatherBytes(mpi.World(), mine)
	if err != nil {
		return fmt.Sprintf("the ranks could not compare their arguments: %v", err)
	}
	views := make([]rankView, len(all))
	for r, b := range all {
		if err := json.Unmarshal(b, &views[r]); err != nil {
			return fmt.Sprintf("rank %d sent arguments this rank cannot read (%v): is every rank the same gpucomm?", r, err)
		}
	}
	return judgeViews(views)
}

// judgeViews says why ranks with these views cannot run one command
// together, or "".
func judgeViews(views []rankView) string {
	var why []string
	for _, g := range groupRanks(views, func(v rankView) string { return v.EnvErr }) {
		if g.value != "" {
			why = append(why, fmt.Sprintf("%s: %s", rankList(g.ranks), g.value))
		}
	}
	if groups := groupRanks(views, func(v rankView) string { return shellJoin(v.Args) }); len(groups) > 1 {
		why = append(why, "the ranks were given different arguments, and every rank of a job must run the same command: "+groups.describe(func(s string) string {
			if s == "" {
				return "(none)"
			}
			return s
		}))
	}
	for _, k := range sharedEnv {
		groups := groupRanks(views, func(v rankView) string {
			if val, ok := v.Env[k]; ok {
				return k + "=" + val
			}
			return ""
		})
		if len(groups) > 1 {
			why = append(why, fmt.Sprintf("the ranks disagree on %s, which every rank must share: %s", k, groups.describe(func(s string) string {
				if s == "" {
					return "unset"
				}
				return s
			})))
		}
	}
	return strings.Join(why, "; ")
}

// rankGroups are the distinct values of the ranks' views, each with its
// ranks, in the order of their first rank.
type rankGroups []rankGroup

type rankGroup struct {
	value string
	ranks []int
}

func groupRanks(views []rankView, key func(rankView) string) rankGroups {
	var gs rankGroups
	for r, v := range views {
		k := key(v)
		i := slices.IndexFunc(gs, func(g rankGroup) bool { return g.value == k })
		if i < 0 {
			gs = append(gs, rankGroup{value: k})
			i = len(gs) - 1
		}
		gs[i].ranks = append(gs[i].ranks, r)
	}
	return gs
}

func (gs rankGroups) describe(show func(string) string) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = fmt.Sprintf("%s %s", rankList(g.ranks), show(g.value))
	}
	return strings.Join(parts, ", ")
}

// shellJoin writes args as a shell would take them back, quoting where
// needed, so that an empty or spaced argument shows.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// stopDisagreeing prints why the job stops: the whole reason on rank 0,
// a pointer to it on the others.
func stopDisagreeing(name, why string, stderr io.Writer) int {
	if r := mpi.World().Rank(); r > 0 {
		fmt.Fprintf(stderr, "gpucomm %s: rank %d stops with the others before running (rank 0 says why)\n", name, r)
	} else {
		fmt.Fprintf(stderr, "gpucomm %s: %s\n", name, why)
	}
	return exitUsage
}
