// Heat is the smallest program that runs gpucomm's distributed heat solver:
// it opens the backend GPUCOMM_BACKEND names (the best usable one when it is
// unset), takes 200 steps on a 256×256 grid, and rank 0 prints the residual
// and the temperature at the centre. Run it alone, or under mpirun with an
// MPI backend:
//
//	go run ./examples/heat
//	go build -tags mpi ./examples/heat && mpirun -np 4 env GPUCOMM_BACKEND=mpi ./heat
//
// The binary run under mpirun must be built with -tags mpi (Open MPI) or
// -tags mpich; built without, it refuses to start there and says so. It
// takes no arguments: one is a usage error (exit 2).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/all"
	"github.com/gpucomm/gpucomm/solver"
)

// config is the run: a 256×256 plate, hot along its top edge, starting from
// random temperatures.
var config = solver.Config{N: 256, M: 256, ResidualEvery: 50, Seed: 1, Boundary: solver.Boundary{Top: 1}}

const steps = 200

func main() {
	if code, ok := checkArgs(os.Args[1:], os.Stderr); !ok {
		os.Exit(code)
	}
	c, err := comm.Open("auto")
	if err != nil {
		fmt.Fprintln(os.Stderr, "heat:", err)
		os.Exit(1)
	}
	defer c.Close()
	if err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "heat:", err)
		os.Exit(1)
	}
}

// checkArgs refuses any argument, since the program takes none. When ok is
// false the caller exits with code: 0 after -h, 2 for a usage error.
func checkArgs(args []string, stderr io.Writer) (code int, ok bool) {
	fs := flag.NewFlagSet("heat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: heat (no arguments; GPUCOMM_BACKEND names the backend, the best usable one when unset)")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h asked for the usage: that is no failure
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "heat: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2, false
	}
	return 0, true
}

// run is one rank's program; every rank calls it.
func run(c comm.Communicator, w io.Writer) error {
	s, err := solver.New(c, config)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Step(steps); err != nil {
		return err
	}
	field, err := s.Gather(0)
	if err != nil {
		return err
	}
	if c.Rank() == 0 {
		n, m := config.N, config.M
		fmt.Fprintf(w, "%d ranks on %s: after %d steps the residual is %.6e and the centre is at %.6f\n",
			c.Size(), c.Backend(), steps, s.Residual(), field[n/2*m+m/2])
	}
	return nil
}
