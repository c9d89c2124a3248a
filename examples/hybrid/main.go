// Hybrid is the first program of the CUDA+MPI tutorials, written with
// gpucomm: each rank binds the GPU of its local rank, fills its vector with
// rank+1 and scales it by 2 on the device, the ranks sum their vectors with
// AllReduce, and rank 0 prints the global sum and whether it matches
// n·P·(P+1), the value it must have. Run it under mpirun, one process a GPU:
//
//	mpirun -np 4 env GPUCOMM_BACKEND=nccl ./hybrid
//
// Built without MPI (no -tags mpi or mpich) it runs as one rank on the
// local backend, and under mpirun it refuses to start, saying how to
// rebuild, rather than run one-rank jobs that print a wrong sum. It takes no
// arguments: one is a usage error (exit 2).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/all"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/kernels"
)

// n is the length of each rank's vector.
const n = 1 << 20

func main() {
	if code, ok := checkArgs(os.Args[1:], os.Stderr); !ok {
		os.Exit(code)
	}
	// "auto" picks the best backend; the communicator binds this process to
	// the GPU of its local rank (or a host device where there is none).
	c, err := comm.Open("auto")
	if err != nil {
		fmt.Fprintln(os.Stderr, "hybrid:", err)
		os.Exit(1)
	}
	defer c.Close()
	if err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hybrid:", err)
		os.Exit(1)
	}
}

// checkArgs refuses any argument, since the program takes none. When ok is
// false the caller exits with code: 0 after -h, 2 for a usage error.
func checkArgs(args []string, stderr io.Writer) (code int, ok bool) {
	fs := flag.NewFlagSet("hybrid", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hybrid (no arguments; GPUCOMM_BACKEND names the backend, the best usable one when unset; run it under mpirun for more ranks)")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h asked for the usage: that is no failure
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hybrid: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2, false
	}
	return 0, true
}

// run is one rank's program; every rank calls it.
func run(c comm.Communicator, w io.Writer) error {
	dev := c.Device()
	s, err := dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Destroy()
	x, err := devmem.AllocSlice[float64](dev, n)
	if err != nil {
		return err
	}
	defer x.Free()

	// Fill, scale and sum, all queued on one stream: each starts after the
	// one before, without the host waiting in between.
	if err := kernels.Fill(s, x, float64(c.Rank()+1)); err != nil {
		return err
	}
	if err := kernels.Scale(s, x, 2.0); err != nil {
		return err
	}
	if err := comm.AllReduce(c, x, x, comm.Sum, s); err != nil {
		return err
	}
	host, err := x.ToHost(s)
	if err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}

	// Element i is Σ 2(r+1) over the ranks: P(P+1), exact in float64.
	p := float64(c.Size())
	each, sum, bad := p*(p+1), 0.0, -1
	for i, v := range host {
		sum += v
		if v != each && bad < 0 {
			bad = i
		}
	}
	want := float64(n) * each
	if c.Rank() == 0 {
		fmt.Fprintf(w, "%d ranks on %s, rank 0 on %s, %d elements each\n", c.Size(), c.Backend(), dev, n)
		verdict := "matches"
		if sum != want || bad >= 0 {
			verdict = "DOES NOT match"
		}
		fmt.Fprintf(w, "global sum %.0f, expected %.0f: %s\n", sum, want, verdict)
	}
	if bad >= 0 {
		return fmt.Errorf("rank %d: element %d is %v, want %v", c.Rank(), bad, host[bad], each)
	}
	return nil
}
