package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpucomm/gpucomm/bench"
	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

func init() {
	register(&command{name: "drill", summary: "rehearse a hung job: one rank skips, changes or dies in a collective, for gpucomm trace", run: runDrill})
}

const drillDescription = `Drill runs a few content-checked AllReduces in which one rank goes wrong at
collective -at, so that the diagnosis of a hung job can be rehearsed on a
new cluster before a real one needs it:

	skip   the rank never enters the collective: it writes its flight record
	       at once and waits to be ended
	wrong  the rank calls Barrier instead of the AllReduce
	kill   the rank kills itself (SIGKILL) in the collective (MPI backends)

The other ranks time out (-timeout) and write their records into
GPUCOMM_TRACE_DIR, or, unset, into ./gpucomm-drill, a directory of the
drill's own that it empties of earlier records before it starts (a record
left there by an earlier drill would be read as this one's); then

	gpucomm trace DIR

names the rank and the collective. Under MPI: mpirun -np 4 gpucomm drill
-backend mpi -mode skip. The exit status is 1 (the job failed, as it should).

In kill mode the launcher ends the other ranks when one dies, before they
time out: Open MPI's mpirun sends them TERM, and then KILL a second later,
so the drill sets GPUCOMM_TRACE_SIGNAL=TERM when it is unset (each rank
writes its record on the TERM); on a loaded node give them longer, with
mpirun --mca odls_base_sigkill_timeout 10. MPICH's Hydra kills every rank
of a node at once, and no rank there lives to write a record.

With the local backend every rank is a goroutine of this process (-np of
them). GPUCOMM_BACKEND, when set, overrides -backend.`

// drillFlags are drill's flags, parsed.
type drillFlags struct {
	backend string
	np      int
	mode    string
	rank    int
	at      int
	ops     int
	count   int
	timeout time.Duration
}

func runDrill(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("drill", "drill [-backend NAME|auto] [-np N] [-mode skip|wrong|kill] [-rank R] [-at S] [-timeout D]", drillDescription, stderr)
	var f drillFlags
	fs.StringVar(&f.backend, "backend", local.Name, "backend `NAME`: "+strings.Join(comm.Backends(), ", ")+" or auto")
	fs.IntVar(&f.np, "np", 4, "in-process ranks `N` (local backend only; under MPI mpirun sets it)")
	fs.StringVar(&f.mode, "mode", "skip", "what the rank does wrong, `MODE`: skip, wrong or kill")
	fs.IntVar(&f.rank, "rank", 1, "the rank `R` that goes wrong")
	fs.IntVar(&f.at, "at", 3, "the collective `S` (from 1) where it goes wrong")
	fs.IntVar(&f.ops, "ops", 5, "collectives `N` in the drill")
	fs.IntVar(&f.count, "count", 1024, "float32 elements `N` per AllReduce")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Second, "the timeout `D` of every operation")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	// note ends each error that the choice of backend causes.
	var note string
	f.backend, note = bench.BackendFromEnv("gpucomm drill", f.backend, set["backend"], stderr)
	switch {
	case f.mode != "skip" && f.mode != "wrong" && f.mode != "kill":
		return usageError(fs, "-mode %q: want skip, wrong or kill", f.mode)
	case f.ops < 1:
		return usageError(fs, "-ops %d: want 1 or more", f.ops)
	case f.at < 1 || f.at > f.ops:
		return usageError(fs, "-at %d: want 1 to -ops %d", f.at, f.ops)
	case f.timeout <= 0:
		return usageError(fs, "-timeout %v: a drill needs a timeout, or the ranks wait forever", f.timeout)
	case f.count < 1:
		return usageError(fs, "-count %d: want 1 or more", f.count)
	}
	// auto is resolved here, so that what it picks meets the checks below
	// (a kill on local would take every rank with it, unrecorded).
	name, err := resolveBackend(f.backend)
	if err != nil {
		fmt.Fprintf(stderr, "gpucomm drill: %v%s\n", err, note)
		if errors.Is(err, comm.ErrInvalidArgument) {
			return exitUsage
		}
		return exitFail
	}
	picked := "" // says what auto chose, where it chose
	if name != f.backend {
		picked = fmt.Sprintf(" (-backend %s picked %s)", f.backend, name)
	}
	f.backend = name
	switch {
	case name == local.Name && f.np < 1:
		return usageError(fs, "-np %d: want 1 or more ranks", f.np)
	case name != local.Name && set["np"] && f.np != 1:
		return usageError(fs, "-np applies to the local backend only; %s takes one rank a process, so set the rank count with mpirun -np%s", name, note)
	case name == local.Name && f.mode == "kill":
		return usageError(fs, "-mode kill needs one process a rank (an MPI backend): the local backend's ranks share this process%s%s", picked, note)
	}
	if name == local.Name {
		// Under a launcher of several ranks each process would drill a
		// group of its own, and their records would overwrite each other.
		if err := localReady(""); err != nil {
			fmt.Fprintf(stderr, "gpucomm drill: %v%s\n", err, note)
			return exitFail
		}
	}
	dir, err := drillTraceDir(f.mode, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "gpucomm drill: %v\n", err)
		return exitFail
	}
	var cs []comm.Communicator
	if f.backend == local.Name {
		cs, err = local.NewGroup(f.np, comm.WithTimeout(f.timeout))
	} else {
		var c comm.Communicator
		c, err = comm.Open(f.backend, comm.WithTimeout(f.timeout))
		cs = []comm.Communicator{c}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpucomm drill: %v%s\n", err, note)
		if errors.Is(err, comm.ErrInvalidArgument) {
			return exitUsage
		}
		return exitFail
	}
	if f.rank < 0 || f.rank >= cs[0].Size() {
		size := cs[0].Size()
		for _, c := range cs {
			c.Close()
		}
		return usageError(fs, "-rank %d is not a rank of a %d-rank job", f.rank, size)
	}
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { errs[i] = drillRank(c, f) })
	}
	wg.Wait()
	failed := false
	for i, err := range errs {
		if err != nil {
			failed = true
			fmt.Fprintf(stderr, "gpucomm drill: rank %d: %v\n", cs[i].Rank(), err)
		}
	}
	if paths, err := driver.WriteTraces("drill ended"); err != nil {
		fmt.Fprintf(stderr, "gpucomm drill: %v\n", err)
	} else if len(paths) > 0 && cs[0].Rank() == 0 {
		fmt.Fprintf(stdout, "flight records in %s; run: gpucomm trace %s\n", dir, dir)
	}
	for _, c := range cs {
		c.Close()
	}
	if failed {
		return exitFail
	}
	fmt.Fprintln(stderr, "gpucomm drill: every collective passed: the rank that was to go wrong did not")
	return exitFail
}

// drillDefaultDir is where a drill records when GPUCOMM_TRACE_DIR is unset:
// a directory of its own, not the recorder's default (./gpucomm-trace,
// where a real job's records may lie), so that emptying it loses nothing.
const drillDefaultDir = "gpucomm-drill"

// drillTraceDir turns the flight recorder on for the drill and returns the
// directory the records go to. Unset, GPUCOMM_TRACE_DIR becomes
// drillDefaultDir, emptied of earlier records first: each rank removes
// them before its Open, and no rank writes before every rank has opened,
// so no rank removes another's new record. A directory the user named is
// left as it is, with a note where it holds records already (trace leaves
// out those it can tell are an earlier job's). In kill mode the other
// ranks are ended by the launcher before they time out, so the drill sets
// GPUCOMM_TRACE_SIGNAL=TERM, where unset, for them to write on the TERM,
// and says beforehand where to look, as no rank may live to say it after.
func drillTraceDir(mode string, stdout io.Writer) (string, error) {
	rank0 := rankFromEnv() == 0
	dir := strings.TrimSpace(os.Getenv("GPUCOMM_TRACE_DIR"))
	if dir == "" {
		dir = drillDefaultDir
		os.Setenv("GPUCOMM_TRACE_DIR", dir)
		if err := removeTraces(dir); err != nil {
			return "", fmt.Errorf("emptying %s of the records of an earlier drill: %w", dir, err)
		}
	} else if rank0 && holdsTraces(dir) {
		fmt.Fprintf(stdout, "note: GPUCOMM_TRACE_DIR=%s already holds flight records; gpucomm trace leaves out those it can tell an earlier job wrote, and an empty directory leaves no doubt\n", dir)
	}
	if mode == "kill" {
		if os.Getenv("GPUCOMM_TRACE_SIGNAL") == "" {
			os.Setenv("GPUCOMM_TRACE_SIGNAL", "TERM")
		}
		if rank0 {
			fmt.Fprintf(stdout, "the ranks that live write their flight records into %s when they time out or get the trace signal (%s); when the job has ended, run: gpucomm trace %s\n",
				dir, os.Getenv("GPUCOMM_TRACE_SIGNAL"), dir)
		}
	}
	return dir, nil
}

// removeTraces removes the flight records (traceFilePattern) in dir, if
// any; the ranks of a job on one file system remove the same files, so a
// file already gone is no error.
func removeTraces(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if ok, _ := filepath.Match(traceFilePattern, e.Name()); ok && !e.IsDir() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// holdsTraces reports whether dir holds a flight record.
func holdsTraces(dir string) bool {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if ok, _ := filepath.Match(traceFilePattern, e.Name()); ok && !e.IsDir() {
			return true
		}
	}
	return false
}

// drillRank is one rank's part: -ops AllReduces of random float32 values
// (small integers, so that any order of summing is exact), each checked.
func drillRank(c comm.Communicator, f drillFlags) error {
	dev := c.Device()
	n := f.count
	send, err := devmem.AllocSlice[float32](dev, n)
	if err != nil {
		return err
	}
	defer send.Free()
	recv, err := devmem.AllocSlice[float32](dev, n)
	if err != nil {
		return err
	}
	defer recv.Free()
	me, size := c.Rank(), c.Size()
	for s := 1; s <= f.ops; s++ {
		// Every rank can compute every rank's input: the seed is the
		// collective's and the rank's.
		input := func(r int) []float32 {
			rng := rand.New(rand.NewPCG(uint64(s), uint64(r)))
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(rng.IntN(1000))
			}
			return v
		}
		if err := send.CopyFrom(input(me), nil); err != nil {
			return err
		}
		poison := make([]float32, n)
		for i := range poison {
			poison[i] = -1
		}
		if err := recv.CopyFrom(poison, nil); err != nil {
			return err
		}
		if me == f.rank && s == f.at {
			switch f.mode {
			case "skip":
				if _, err := driver.WriteTraces(fmt.Sprintf("drill: rank %d skipped collective %d", me, s)); err != nil {
					return err
				}
				if f.backend == local.Name {
					return fmt.Errorf("skipped collective %d on purpose", s)
				}
				time.Sleep(3 * f.timeout) // the others time out; MPI_Abort of one of them ends this one
				return fmt.Errorf("skipped collective %d on purpose", s)
			case "wrong":
				if err := c.Barrier(nil); err != nil {
					return fmt.Errorf("called Barrier instead of collective %d on purpose: %w", s, err)
				}
				continue
			case "kill":
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
		if err := comm.AllReduce(c, send, recv, comm.Sum, nil); err != nil {
			return err
		}
		got, err := recv.ToHost(nil)
		if err != nil {
			return err
		}
		want := make([]float32, n)
		for r := range size {
			for i, v := range input(r) {
				want[i] += v
			}
		}
		for i := range want {
			if got[i] != want[i] {
				return fmt.Errorf("collective %d: element %d is %v, want %v", s, i, got[i], want[i])
			}
		}
	}
	return nil
}
