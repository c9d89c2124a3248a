// Command ipcshare shows the reliable way for the ranks of one node to fill
// one GPU input buffer: each rank writes its own slice of two vectors, u and
// v, straight into buffers on the node root's device (devmem.NodeShared,
// through IPC handles), and the root computes u·v over all of it and checks
// it against the value the formula gives.
//
//	go run ./examples/ipcshare            # comm.Open("auto"), GPUCOMM_BACKEND picks
//	go run ./examples/ipcshare -np 4      # 4 in-process ranks (local backend)
//	mpirun -np 4 ./ipcshare               # one rank a process, once an MPI backend is in
//
// Rank r contributes n+37r elements, so every rank's part has another size.
// It prints one line and exits 0 when the product matches, 1 otherwise.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/all" // every backend compiled in
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ipcshare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	np := fs.Int("np", 0, "run this many in-process ranks (local backend) instead of comm.Open(\"auto\")")
	n := fs.Int("n", 1000, "elements rank 0 contributes; rank r adds 37r more")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h asked for the usage: that is no failure
			return 0
		}
		return 2
	}
	if *n < 0 || *np < 0 {
		fmt.Fprintln(stderr, "ipcshare: -n and -np must not be negative")
		return 2
	}
	var comms []comm.Communicator
	var err error
	if *np > 0 {
		comms, err = local.NewGroup(*np)
	} else {
		var c comm.Communicator
		c, err = comm.Open("auto")
		comms = []comm.Communicator{c}
	}
	if err != nil {
		fmt.Fprintln(stderr, "ipcshare:", err)
		return 1
	}
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Go(func() { errs[i] = errors.Join(rank(c, *n, stdout), c.Close()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(stderr, "ipcshare:", err)
		return 1
	}
	return 0
}

// errMismatch is the root's verdict when u·v is not the expected value.
var errMismatch = errors.New("u·v does not match")

// uAt and vAt are element g of u and v: small multiples of 1/4, so that
// every product and partial sum is exact and the check can be exact too.
func uAt(g int64) float64 { return float64(g%7 + 1) }
func vAt(g int64) float64 { return float64(g%5+1) / 4 }

// rank is one rank's part: write its slices, meet, and on the root compute.
func rank(c comm.Communicator, n int, stdout io.Writer) (err error) {
	if c.LocalSize() != c.Size() {
		return fmt.Errorf("rank %d: the %d ranks span several nodes; ipcshare shares a buffer within one node", c.Rank(), c.Size())
	}
	count := n + 37*c.Rank()
	nc := comm.NodeComm(c)
	u, err := devmem.NewNodeSharedSlice[float64](nc, count)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, u.Close()) }()
	v, err := devmem.NewNodeSharedSlice[float64](nc, count)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, v.Close()) }()

	mineU, mineV := make([]float64, count), make([]float64, count)
	for i := range count {
		g := int64(u.Offset() + i)
		mineU[i], mineV[i] = uAt(g), vAt(g)
	}
	// Each rank's writes go straight into the root's buffers.
	writeErr := errors.Join(u.Mine().CopyFrom(mineU, nil), v.Mine().CopyFrom(mineV, nil))
	// Every rank meets the barrier even after a failed write, so none waits.
	if err := errors.Join(writeErr, u.Barrier()); err != nil {
		return err
	}
	var verdict error
	if c.Rank() == 0 {
		verdict = check(u, v, c.Size(), stdout)
	}
	// The others must not close (and so let the root free) before it has read.
	return errors.Join(verdict, u.Barrier())
}

// check reads the whole of u and v on the root, computes u·v, and compares
// it with the formula's value.
func check(u, v *devmem.NodeSharedSlice[float64], ranks int, stdout io.Writer) error {
	us, err := u.All().ToHost(nil)
	if err != nil {
		return err
	}
	vs, err := v.All().ToHost(nil)
	if err != nil {
		return err
	}
	var dot, want float64
	wrong := 0 // elements that are not what their rank should have written
	for i := range us {
		dot += us[i] * vs[i]
		want += uAt(int64(i)) * vAt(int64(i))
		if us[i] != uAt(int64(i)) || vs[i] != vAt(int64(i)) {
			wrong++
		}
	}
	verdict := "matches"
	if dot != want || wrong > 0 {
		verdict = fmt.Sprintf("MISMATCH (%d wrong elements)", wrong)
	}
	fmt.Fprintf(stdout, "ipcshare: %d rank(s) wrote %d elements (counts %v) into one buffer on %v: u·v = %g, expected %g: %s\n",
		ranks, len(us), u.Counts(), u.All().Device(), dot, want, verdict)
	if dot != want || wrong > 0 {
		return errMismatch
	}
	return nil
}
