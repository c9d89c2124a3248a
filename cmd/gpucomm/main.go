// Command gpucomm checks and measures a cluster for gpucomm programs.
//
// Usage:
//
//	gpucomm <command> [flags]
//
// Run "gpucomm help" for the list of commands and "gpucomm <command> -h" for
// a command's flags. The first thing to run on a new machine is
//
//	gpucomm check -np 4 -short
//
// and then, under mpirun, "gpucomm check -backend mpi" (or cudaaware, nccl).
//
// Exit status: 0 when everything passed, 1 when something failed, 2 for a
// usage error.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm"
	gpumpi "github.com/gpucomm/gpucomm/comm/mpi"
	"github.com/gpucomm/gpucomm/internal/launcher"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// Exit statuses, the same for every subcommand.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns the exit status.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands holds the subcommands by name; each subcommand's file adds itself
// from init with register, so adding one never edits this file.
var commands = map[string]*command{}

// register adds c to commands. A nil, unnamed, run-less or duplicate command is
// a programming error found at start-up, so it panics as comm.Register does.
func register(c *command) {
	if c == nil || c.name == "" || c.run == nil {
		panic("gpucomm: register of an incomplete command")
	}
	if _, dup := commands[c.name]; dup || c.name == "help" {
		panic("gpucomm: command " + c.name + " registered twice")
	}
	commands[c.name] = c
}

func main() {
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	if code == exitUsage && usageOut(os.Stderr) == io.Discard && !mpi.Initialized() {
		// A rank that said nothing of its usage error leaves the saying to
		// rank 0, but Open MPI's mpirun kills the job's other ranks as
		// soon as one exits with a failure: rank 0, if slower to start,
		// died before it could print. Where no MPI_Finalize holds this
		// rank until rank 0 is done (agree.go starts MPI for check, bench
		// and heat), it gives rank 0 that time.
		time.Sleep(usageGrace)
	}
	// A failed Open leaves MPI up for another backend; end it before exit,
	// so that mpirun does not report a process that skipped MPI_Finalize.
	if err := gpumpi.Finalize(); err != nil && !errors.Is(err, comm.ErrNotBuilt) {
		fmt.Fprintf(os.Stderr, "gpucomm: %v\n", err)
		code = max(code, exitFail)
	}
	os.Exit(code)
}

// run is the whole program, minus os.Exit, so tests can call it.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			return help(rest, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(usageOut(stderr), "gpucomm: unknown command %q\nRun 'gpucomm help' for usage.\n", name)
		return exitUsage
	}
	if name == "check" || name == "bench" || name == "heat" {
		// Before any rank waits for another (agree.go).
		if why := agreeOnArgs(rest); why != "" {
			return stopDisagreeing(name, why, stderr)
		}
		if name == "bench" {
			if code := benchArgsOnRank0(rest, stderr); code != exitOK {
				return code
			}
		}
		warnPlacement(name, stderr)
	}
	// Ctrl-C cancels the context, so a command can stop and still report.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return c.run(ctx, rest, stdout, stderr)
}

// help serves "gpucomm help CMD" by running CMD -h with its usage on stdout.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: gpucomm help [command]")
		return exitUsage
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gpucomm help: unknown command %q\nRun 'gpucomm help' for usage.\n", args[0])
		return exitUsage
	}
	return c.run(context.Background(), []string{"-h"}, stdout, stdout)
}

// usage lists the registered commands, sorted by name.
func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprint(w, "gpucomm checks and measures a cluster for gpucomm programs.\n\n")
	fmt.Fprint(w, "Usage:\n\n\tgpucomm <command> [flags]\n\nThe commands are:\n\n")
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	for _, n := range names {
		fmt.Fprintf(tw, "\t%s\t%s\n", n, commands[n].summary)
	}
	tw.Flush()
	fmt.Fprint(w, "\nRun 'gpucomm help <command>' or 'gpucomm <command> -h' for a command's flags.\n")
	fmt.Fprint(w, "Exit status: 0 success, 1 failures, 2 usage error.\n")
}

// Under a launcher every rank runs the command with the same arguments
// (check, bench and heat agree on them first: agree.go), so every rank
// found the same usage error and printed it, with its "Run ... -h" line:
// N copies under mpirun -np N. Usage errors and -h output are printed by
// the launcher's rank 0 only; the other ranks exit with the same status
// without a word. The launcher's rank, not MPI's: a usage error comes
// before MPI starts, or where it never does.

// usageGrace is how long a quiet rank waits before it exits with a usage
// error (main): rank 0 of the same launch, started at the same moment,
// has long printed it by then.
const usageGrace = 2 * time.Second

// usageOut is where usage and usage errors go: stderr, or nowhere on a
// rank other than 0 of a launcher's job of several ranks.
func usageOut(stderr io.Writer) io.Writer {
	if rankFromEnv() > 0 {
		return io.Discard
	}
	return stderr
}

// benchArgsOnRank0 holds bench's arguments, under a launcher of several
// ranks, to what bench.CheckArgs refuses before bench runs (its flags, its
// sweep, the variables), so that rank 0 alone says what is wrong: bench's
// flag set is its own package's, whose output newFlagSet does not make.
// Every rank stops with the status (the ranks agreed on the arguments and
// on what is wrong with their variables, so none goes on alone to wait
// for the others). Elsewhere, or for -h, bench says it itself.
func benchArgsOnRank0(args []string, stderr io.Writer) int {
	job, ok := launcher.FromEnv()
	if !ok || !job.MultiRank() || benchWantsHelp(args) {
		return exitOK
	}
	_, _, rest, err := takePairsFlag(args)
	if err != nil {
		return exitOK // runBench says what is wrong with -pairs
	}
	var msg bytes.Buffer
	code := bench.CheckArgs(rest, &msg)
	if code != exitOK {
		io.Copy(usageOut(stderr), &msg)
	}
	return code
}

// newFlagSet makes a subcommand's flag set: errors and -h output go to
// stderr (usageOut: on a launcher's rank 0 only), headed by the given
// usage line and description.
func newFlagSet(name, usageLine, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gpucomm "+name, flag.ContinueOnError)
	fs.SetOutput(usageOut(stderr))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gpucomm %s\n\n%s\n\nFlags:\n", usageLine, description)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs, allowing no positional arguments. When ok
// is false the caller returns code: 0 after -h, 2 for a usage error (whose
// message fs has already printed).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return exitUsage, false
	}
	return exitOK, true
}

// usageError prints a bad flag combination the way flag prints a bad flag,
// and gives the status to return.
func usageError(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fmt.Fprintf(fs.Output(), "Run '%s -h' for usage.\n", fs.Name())
	return exitUsage
}
