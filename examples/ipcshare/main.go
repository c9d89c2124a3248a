// Command ipcshare shows the reliable way for the ranks of a node to fill
// one GPU input buffer, on any number of nodes: on each node, the node's
// root (its local rank 0) allocates the node's buffers for two vectors, u
// and v, and every rank of the node writes its own slice straight into them
// (devmem.NodeShared, through IPC handles sent within the node). Each
// node's root computes its part of u·v and checks every element and the
// product against the formula; the node roots then add their parts over a
// communicator of their own, and the first of them checks the global u·v.
//
//	go run ./examples/ipcshare                 # comm.Open("auto"), GPUCOMM_BACKEND picks
//	go run ./examples/ipcshare -np 4           # 4 in-process ranks (local backend)
//	go run ./examples/ipcshare -np 6 -nodes 3  # the same, split into 3 simulated nodes
//	mpirun -np 8 --host a:4,b:4 ./ipcshare     # one rank a process, one buffer a node
//
// Nodes are the ranks whose host names agree (comm.SplitNode); -nodes K
// groups consecutive ranks into K nodes instead, to try the multi-node path
// on one host. Rank r contributes n+37r elements, so every rank's part has
// another size. It prints a line per node and one for the job, and exits 0
// when every node and the global product match, 1 otherwise (a job too large
// for a host's memory or a node root's GPU is refused before it allocates),
// and 2 for a usage error. It takes flags only, no arguments.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sync"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/all" // every backend compiled in
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/devmem"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// maxN bounds -n so that every count and byte size below fits an int; the
// memory check (checkMemory) refuses what a machine cannot hold long before.
const maxN = 1 << 40

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ipcshare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	np := fs.Int("np", 0, "run this many in-process ranks (local backend) instead of comm.Open(\"auto\")")
	n := fs.Int("n", 1000, fmt.Sprintf("elements rank 0 contributes (at most %d); rank r adds 37r more", maxN))
	nodes := fs.Int("nodes", 0, "group consecutive ranks into this many simulated nodes (0: nodes are the ranks' hosts)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h asked for the usage: that is no failure
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ipcshare: unexpected argument %q: it takes flags only\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if *n < 0 || *np < 0 || *nodes < 0 {
		fmt.Fprintln(stderr, "ipcshare: -n, -np and -nodes must not be negative")
		return 2
	}
	if *n > maxN {
		fmt.Fprintf(stderr, "ipcshare: -n %d: at most %d elements a rank\n", *n, maxN)
		return 2
	}
	if *np > 0 && *nodes > *np {
		fmt.Fprintf(stderr, "ipcshare: -nodes %d: more nodes than the %d ranks\n", *nodes, *np)
		return 2
	}
	var comms []comm.Communicator
	var err error
	if *np > 0 {
		// In-process ranks: not under a launcher of several ranks (each
		// process would run a job of its own), and not on a GPU, which
		// the local backend does not drive.
		if err := comm.CheckLauncher(local.Name); err != nil {
			fmt.Fprintln(stderr, "ipcshare: -np:", err)
			return 2
		}
		if err := local.CheckDeviceSetting(""); err != nil {
			fmt.Fprintln(stderr, "ipcshare: -np:", err)
			return 2
		}
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
	out := &lockedWriter{w: stdout}
	for i, c := range comms {
		wg.Go(func() { errs[i] = errors.Join(rank(c, *n, *nodes, out), c.Close()) })
	}
	wg.Wait()
	if err := errors.Join(distinct(errs)...); err != nil {
		fmt.Fprintln(stderr, "ipcshare:", err)
		return 1
	}
	return 0
}

// distinct is errs without nils and without repeats of a message, which
// in-process ranks that agreed on a refusal all return.
func distinct(errs []error) []error {
	var out []error
	seen := map[string]bool{}
	for _, err := range errs {
		if err != nil && !seen[err.Error()] {
			seen[err.Error()] = true
			out = append(out, err)
		}
	}
	return out
}

// lockedWriter keeps the lines of in-process node roots whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// errMismatch is a root's verdict when u·v or an element is not the
// expected value.
var errMismatch = errors.New("u·v does not match")

// uAt and vAt are element g of u and v: small multiples of 1/4, so that
// every product and partial sum is exact and the check can be exact too.
func uAt(g int64) float64 { return float64(g%7 + 1) }
func vAt(g int64) float64 { return float64(g%5+1) / 4 }

// countOf is how many elements rank r contributes; firstOf is the global
// index of its first element: the sum of countOf over the ranks before r.
func countOf(n, r int) int   { return n + 37*r }
func firstOf(n, r int) int64 { return int64(r)*int64(n) + 37*int64(r)*int64(r-1)/2 }

// dotOf is the expected u·v over global elements [from, to).
func dotOf(from, to int64) float64 {
	var d float64
	for g := from; g < to; g++ {
		d += uAt(g) * vAt(g)
	}
	return d
}

// splitNodes makes this rank's node communicator: its host's ranks, or,
// with nodes > 0, its group of consecutive ranks.
func splitNodes(c comm.Communicator, nodes int) (comm.Communicator, string, error) {
	if nodes > 0 {
		if nodes > c.Size() {
			return nil, "", fmt.Errorf("-nodes %d: more nodes than the %d ranks", nodes, c.Size())
		}
		k := c.Rank() * nodes / c.Size()
		node, err := c.Split(k, c.Rank())
		return node, fmt.Sprintf("simulated node %d", k), err
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, "", err
	}
	node, err := comm.SplitNode(c)
	if err != nil {
		return nil, "", err
	}
	// The launcher's idea of a node and the host names must agree, or the
	// root that allocates would not be local rank 0.
	if node.Size() != c.LocalSize() || node.Rank() != c.LocalRank() {
		err = fmt.Errorf("rank %d on %s: %d ranks share this host name as rank %d of them, but the launcher says local rank %d of %d",
			c.Rank(), host, node.Size(), node.Rank(), c.LocalRank(), c.LocalSize())
		return nil, "", errors.Join(err, node.Close())
	}
	return node, host, nil
}

// rank is one rank's part: find its node, write its slices into the node's
// buffers, meet, check on the node's root, and add up over the node roots.
func rank(c comm.Communicator, n, nodes int, stdout io.Writer) (err error) {
	node, name, err := splitNodes(c, nodes)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, node.Close()) }()
	nc := comm.NodeComm(node)
	// The node's root needs each node rank's global rank to know what it wrote.
	globals, err := nc.AllGatherInt64(int64(c.Rank()))
	if err != nil {
		return err
	}
	var nodeCount float64 // the elements of the node's u, and of its v
	for _, g := range globals {
		nodeCount += float64(countOf(n, int(g)))
	}
	if err := checkMemory(c, n, node.Rank() == 0, nodeCount); err != nil {
		return err
	}
	count := countOf(n, c.Rank())
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

	first := firstOf(n, c.Rank())
	mineU, mineV := make([]float64, count), make([]float64, count)
	for i := range count {
		mineU[i], mineV[i] = uAt(first+int64(i)), vAt(first+int64(i))
	}
	// Each rank's writes go straight into the node root's buffers.
	writeErr := errors.Join(u.Mine().CopyFrom(mineU, nil), v.Mine().CopyFrom(mineV, nil))
	// Every rank meets the barrier even after a failed write, so none waits.
	if err := errors.Join(writeErr, u.Barrier()); err != nil {
		return err
	}
	var part partial
	var verdict error
	if node.Rank() == 0 {
		part, verdict = checkNode(u, v, globals, n, name, stdout)
	}
	// The others must not close (and so let the root free) before it has read.
	if err := u.Barrier(); err != nil {
		return errors.Join(verdict, err)
	}
	return errors.Join(verdict, addUp(c, node.Rank() == 0, part, n, stdout))
}

// hostMemory and deviceMemory are devmem's; tests shrink them to check the
// refusal without filling the machine.
var (
	hostMemory   = devmem.HostMemory
	deviceMemory = (*devmem.Device).Memory
)

// checkMemory has the ranks agree, before u and v are allocated, that every
// host and every node root's GPU can hold its share: 8 bytes an element for
// each rank's slices of u and v, and on a node's root the node's u and v
// (in host memory on a host device) and its host copy of them. The ranks of
// a host add up what they need of its memory; the job then takes the worst
// shortage (AllReduce(Max)), so that every rank returns the same error, or
// none. Memory that cannot be read is taken to be enough.
func checkMemory(c comm.Communicator, n int, root bool, nodeCount float64) (err error) {
	hostNeed, gpuNeed := 16*float64(countOf(n, c.Rank())), 0.0
	if root {
		hostNeed += 16 * nodeCount
		if c.Device().Kind() == devmem.Host {
			hostNeed += 16 * nodeCount
		} else {
			gpuNeed = 16 * nodeCount
		}
	}
	host, err := comm.SplitNode(c)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, host.Close()) }()
	sum, err := reduceAll(host, comm.Sum, hostNeed)
	if err != nil {
		return err
	}
	// short: {host short, its need, free, total, GPU short, its need, free, total}
	short := make([]float64, 8)
	if free, total, err := hostMemory(); err == nil && sum[0] > float64(free) {
		copy(short[0:4], []float64{1, sum[0], float64(free), float64(total)})
	}
	if gpuNeed > 0 {
		if free, total, err := deviceMemory(c.Device()); err == nil && gpuNeed > float64(free) {
			copy(short[4:8], []float64{1, gpuNeed, float64(free), float64(total)})
		}
	}
	worst, err := reduceAll(c, comm.Max, short...)
	if err != nil {
		return err
	}
	if worst[0] > 0 {
		return fmt.Errorf("-n %d: the ranks of a host need %s of its memory for u and v, but it has %s free of %s: use a smaller -n",
			n, bytesOf(worst[1]), bytesOf(worst[2]), bytesOf(worst[3]))
	}
	if worst[4] > 0 {
		return fmt.Errorf("-n %d: a node's u and v need %s on its root's GPU, which has %s free of %s: use a smaller -n, or more nodes",
			n, bytesOf(worst[5]), bytesOf(worst[6]), bytesOf(worst[7]))
	}
	return nil
}

// bytesOf writes a byte count in decimal gigabytes, or megabytes below one.
func bytesOf(b float64) string {
	if b < 1e9 {
		return fmt.Sprintf("%.1f MB", b/1e6)
	}
	return fmt.Sprintf("%.1f GB", b/1e9)
}

// reduceAll all-reduces a few float64 values over c, now, into a buffer
// poisoned with NaN, so that a reduction that wrote nothing cannot pass.
func reduceAll(c comm.Communicator, op comm.Op, vals ...float64) (out []float64, err error) {
	dev := c.Device()
	send, err := devmem.AllocSlice[float64](dev, len(vals))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, send.Free()) }()
	recv, err := devmem.AllocSlice[float64](dev, len(vals))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, recv.Free()) }()
	if err := send.CopyFrom(vals, nil); err != nil {
		return nil, err
	}
	poison := make([]float64, len(vals))
	for i := range poison {
		poison[i] = math.NaN()
	}
	if err := recv.CopyFrom(poison, nil); err != nil {
		return nil, err
	}
	if err := comm.AllReduce(c, send, recv, op, nil); err != nil {
		return nil, err
	}
	return recv.ToHost(nil)
}

// partial is a node root's contribution to the global check.
type partial struct {
	dot, elements, wrong, failed float64
}

// checkNode reads the whole of the node's u and v on its root, compares
// every element with what its rank should have written, and u·v with the
// formula's value.
func checkNode(u, v *devmem.NodeSharedSlice[float64], globals []int64, n int, name string, stdout io.Writer) (partial, error) {
	us, err := u.All().ToHost(nil)
	if err != nil {
		return partial{failed: 1}, err
	}
	vs, err := v.All().ToHost(nil)
	if err != nil {
		return partial{failed: 1}, err
	}
	var p partial
	var want float64
	counts := u.Counts()
	j := 0
	for k, cnt := range counts {
		first := firstOf(n, int(globals[k]))
		want += dotOf(first, first+cnt)
		for i := range cnt {
			g := first + i
			p.dot += us[j] * vs[j]
			if us[j] != uAt(g) || vs[j] != vAt(g) {
				p.wrong++
			}
			j++
		}
	}
	p.elements = float64(len(us))
	verdict := "matches"
	if p.dot != want || p.wrong > 0 || j != len(us) {
		verdict = fmt.Sprintf("MISMATCH (%g wrong elements)", p.wrong)
		p.failed = 1
	}
	fmt.Fprintf(stdout, "ipcshare: %s: %d rank(s) wrote %d elements (ranks %v, counts %v) into one buffer on %v: u·v = %g, expected %g: %s\n",
		name, len(counts), len(us), globals, counts, u.All().Device(), p.dot, want, verdict)
	if p.failed > 0 {
		return p, fmt.Errorf("%s: %w", name, errMismatch)
	}
	return p, nil
}

// addUp sums the node roots' partials over a communicator of the node
// roots; the first root checks the sum against the formula over all ranks.
func addUp(c comm.Communicator, root bool, p partial, n int, stdout io.Writer) (err error) {
	color := comm.Undefined
	if root {
		color = 0
	}
	roots, err := c.Split(color, c.Rank())
	if err != nil || roots == nil {
		return err
	}
	defer func() { err = errors.Join(err, roots.Close()) }()
	sum, err := reduceAll(roots, comm.Sum, p.dot, p.elements, p.wrong, p.failed)
	if err != nil {
		return err
	}
	if roots.Rank() != 0 {
		return nil
	}
	total := firstOf(n, c.Size())
	want := dotOf(0, total)
	ok := sum[0] == want && sum[1] == float64(total) && sum[2] == 0 && sum[3] == 0
	verdict := "matches"
	if !ok {
		verdict = fmt.Sprintf("MISMATCH (%g wrong elements, %g failed node(s))", sum[2], sum[3])
	}
	fmt.Fprintf(stdout, "ipcshare: job: %d node(s), %d rank(s), %g of %d elements: u·v = %g, expected %g: %s\n",
		roots.Size(), c.Size(), sum[1], total, sum[0], want, verdict)
	if !ok {
		return fmt.Errorf("job: %w", errMismatch)
	}
	return nil
}
