package multinodetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	_ "github.com/gpucomm/gpucomm/comm/cudaaware"
	_ "github.com/gpucomm/gpucomm/comm/mpi"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/launcher"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
	"github.com/gpucomm/gpucomm/internal/multinode"
)

func TestMain(m *testing.M) { mpitest.Main(m) }

// The layout every test assumes: nodes × perNode ranks, nodeA first
// (ranks 0 and 1 on nodeA, 2 and 3 on nodeB).
const (
	nodes   = 2
	perNode = 2
	np      = nodes * perNode
)

// backends are those a node test runs on: both MPI backends, host device.
var backends = []string{"mpi", "cudaaware"}

// nodeOf is the node a rank runs on in that layout.
func nodeOf(rank int) string { return multinode.Name(rank / perNode) }

// upNodes brings the simulated nodes up and sends mpitest's launches across
// them; it skips outside the ranks' parent when MPI or the harness is
// missing.
func upNodes(t *testing.T) {
	t.Helper()
	if !mpi.Built() {
		t.Skip("MPI is not built in: run with -tags mpi or -tags mpich")
	}
	n := multinode.Up(t, nodes)
	n.UseForMPITests(t, mpi.Family())
}

// TestMultinodeNodeTests runs every TestRankNode... test on 2 nodes × 2
// ranks.
func TestMultinodeNodeTests(t *testing.T) {
	upNodes(t)
	// The ranks' tests take about 10 s. MPICH's occasional hang in
	// MPI_Finalize (UCX over TCP) ends 5 s after the barrier before it
	// (GPUCOMM_MPI_FINALIZE_BOUND, set by nodes.sh for MPICH jobs); the
	// minute bounds anything else.
	j := mpitest.RunRanks(t, np, "^TestRankNode", time.Minute, "GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND=")
	mpitest.ExpectPass(t, np, j)
	for _, b := range backends {
		for r := range np {
			// Each rank says where it ran, so the layout itself is checked.
			if want := fmt.Sprintf("rank %d/%d %s: on %s as local rank %d of %d", r, np, b, nodeOf(r), r%perNode, perNode); !strings.Contains(j.Output, want) {
				t.Errorf("the ranks' output lacks %q", want)
			}
		}
	}
}

func open(t *testing.T, backend string, opts ...comm.Option) comm.Communicator {
	t.Helper()
	c, err := comm.Open(backend, append([]comm.Option{comm.WithDevice("host")}, opts...)...)
	if err != nil {
		t.Fatalf("Open(%s): %v", backend, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close(%s): %v", backend, err)
		}
	})
	return c
}

func forEachBackend(t *testing.T, body func(t *testing.T, backend string)) {
	mpitest.RankOnly(t)
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { body(t, b) })
	}
}

// allGatherString gathers every rank's s over c, in rank order.
func allGatherString(t *testing.T, c comm.Communicator, s string) []string {
	t.Helper()
	parts := allGatherBytes(t, c, []byte(s), 128)
	out := make([]string, len(parts))
	for r, p := range parts {
		if i := slices.Index(p, 0); i >= 0 {
			p = p[:i]
		}
		out[r] = string(p)
	}
	return out
}

// allGatherBytes gathers every rank's b, zero-padded to width bytes, over
// c, in rank order.
func allGatherBytes(t *testing.T, c comm.Communicator, b []byte, width int) [][]byte {
	t.Helper()
	if len(b) > width {
		t.Fatalf("%d bytes to gather, more than %d", len(b), width)
	}
	send, err := devmem.AllocSlice[uint8](c.Device(), width)
	if err != nil {
		t.Fatal(err)
	}
	defer send.Free()
	recv, err := devmem.AllocSlice[uint8](c.Device(), width*c.Size())
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Free()
	padded := make([]byte, width)
	copy(padded, b)
	if err := errors.Join(send.CopyFrom(padded, nil), recv.CopyFrom(slices.Repeat([]byte{0xff}, width*c.Size()), nil)); err != nil {
		t.Fatal(err)
	}
	if err := comm.AllGather(c, send, recv, nil); err != nil {
		t.Fatal(err)
	}
	got, err := recv.ToHost(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, c.Size())
	for r := range out {
		out[r] = got[r*width : (r+1)*width]
	}
	return out
}

func bootID(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestRankNodeLocalRanksNodeCommAndDevicePerNode: each rank's host is its
// node's, LocalRank and LocalSize count the ranks of its node (not of the
// job), the launcher's local rank agrees, SplitNode gives each node its own
// communicator of its own ranks, nodes have distinct boot_ids, and a
// node communicator's AllReduce adds only its node's values.
func TestRankNodeLocalRanksNodeCommAndDevicePerNode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := open(t, backend)
		me := c.Rank()
		host, err := os.Hostname()
		if err != nil {
			t.Fatal(err)
		}
		if c.Size() != np || host != nodeOf(me) {
			t.Fatalf("rank %d of %d on %s; want %d ranks, this one on %s", me, c.Size(), host, np, nodeOf(me))
		}
		if c.LocalRank() != me%perNode || c.LocalSize() != perNode {
			t.Errorf("rank %d on %s: local rank %d of %d, want %d of %d (a local rank taken from the job's?)", me, host, c.LocalRank(), c.LocalSize(), me%perNode, perNode)
		}
		if r, ok := mpi.LocalRankFromEnv(); !ok || r != c.LocalRank() {
			t.Errorf("the launcher's local rank %d (set: %v), the communicator's %d", r, ok, c.LocalRank())
		}
		if job, ok := launcher.FromEnv(); !ok || job.LocalRank != c.LocalRank() || job.Rank != me || job.Size != np {
			t.Errorf("launcher.FromEnv: %+v (found: %v); want rank %d of %d, local rank %d", job, ok, me, np, c.LocalRank())
		}
		// The device is opened for the local rank (devmem.Open(spec,
		// LocalRank)); a host device's ordinal only counts the host devices
		// of the process, so on the host device the kind is what shows.
		if d := c.Device(); d.Kind() != devmem.Host {
			t.Errorf("device %v; want a host device (GPUCOMM_DEVICE=host)", d)
		}
		hosts := allGatherString(t, c, host)
		boots := allGatherString(t, c, bootID(t))
		for r := range np {
			if hosts[r] != nodeOf(r) {
				t.Errorf("rank %d says it runs on %q, want %s", r, hosts[r], nodeOf(r))
			}
			if same := boots[r] == boots[me]; same != (nodeOf(r) == host) {
				t.Errorf("boot_id of rank %d (%s) against this rank's (%s): same %v, want same only on one node", r, boots[r], boots[me], same)
			}
		}
		node, err := comm.SplitNode(c)
		if err != nil {
			t.Fatal(err)
		}
		defer node.Close()
		if node.Size() != perNode || node.Rank() != c.LocalRank() {
			t.Errorf("SplitNode: rank %d of %d, want %d of %d", node.Rank(), node.Size(), c.LocalRank(), perNode)
		}
		if got := allGatherString(t, node, strconv.Itoa(me)); !slices.Equal(got, []string{strconv.Itoa(me - me%perNode), strconv.Itoa(me - me%perNode + 1)}) {
			t.Errorf("SplitNode's ranks are job ranks %v, want this node's", got)
		}
		// An AllReduce over the node adds this node's random values only.
		const n = 1000
		input := func(r int) []float64 {
			rng := rand.New(rand.NewPCG(uint64(r), 19))
			v := make([]float64, n)
			for i := range v {
				v[i] = float64(rng.IntN(1 << 20))
			}
			return v
		}
		send, err := devmem.AllocSlice[float64](node.Device(), n)
		if err != nil {
			t.Fatal(err)
		}
		defer send.Free()
		recv, err := devmem.AllocSlice[float64](node.Device(), n)
		if err != nil {
			t.Fatal(err)
		}
		defer recv.Free()
		if err := errors.Join(send.CopyFrom(input(me), nil), recv.CopyFrom(slices.Repeat([]float64{-1}, n), nil)); err != nil {
			t.Fatal(err)
		}
		if err := comm.AllReduce(node, send, recv, comm.Sum, nil); err != nil {
			t.Fatal(err)
		}
		got, err := recv.ToHost(nil)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, n)
		for r := me - me%perNode; r < me-me%perNode+perNode; r++ {
			for i, v := range input(r) {
				want[i] += v
			}
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("node AllReduce element %d: %v, want %v (the sum over %s's ranks)", i, got[i], want[i], host)
			}
		}
		fmt.Printf("rank %d/%d %s: on %s as local rank %d of %d\n", me, np, backend, host, c.LocalRank(), c.LocalSize())
	})
}

// values is rank r's message of n random float64s (exact in any order).
func values(r, n int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(r)+1, 0x5eed))
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(rng.IntN(1<<24)-1<<23) / 16
	}
	return v
}

// TestRankNodePathOnlyBetweenRanksOfOneNode: every pair of ranks exchanges
// one message above the node path's size, one pair after another; the
// counters show that a pair on one node went the node path and a pair
// across nodes did not (MPI carried it), and every element arrives.
func TestRankNodePathOnlyBetweenRanksOfOneNode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		const nodeBytes, n = 4096, 8192 // 64 KiB messages
		c := open(t, backend, comm.WithNodeBytes(nodeBytes))
		np, ok := c.(comm.NodePath)
		if !ok || np.NodeBytes() == 0 {
			if backend == "mpi" {
				t.Fatalf("the mpi backend has no node path between the %d ranks of a node (NodePath: %v)", c.LocalSize(), ok)
			}
			t.Skipf("%s has no node path (NodePath: %v): every message goes through MPI", backend, ok)
		}
		if np.NodeBytes() != nodeBytes {
			t.Fatalf("NodeBytes %d, want %d", np.NodeBytes(), nodeBytes)
		}
		me := c.Rank()
		send, err := devmem.AllocSlice[float64](c.Device(), n)
		if err != nil {
			t.Fatal(err)
		}
		defer send.Free()
		recv, err := devmem.AllocSlice[float64](c.Device(), n)
		if err != nil {
			t.Fatal(err)
		}
		defer recv.Free()
		if err := send.CopyFrom(values(me, n), nil); err != nil {
			t.Fatal(err)
		}
		for a := range c.Size() {
			for b := a + 1; b < c.Size(); b++ {
				if me != a && me != b {
					if err := c.Barrier(nil); err != nil {
						t.Fatal(err)
					}
					continue
				}
				peer := a + b - me
				if err := recv.CopyFrom(slices.Repeat([]float64{-0.5}, n), nil); err != nil { // poisoned
					t.Fatal(err)
				}
				sent0, got0 := np.NodeMessages()
				err := c.GroupP2P([]comm.P2P{comm.SendSlice(peer, send), comm.RecvSlice(peer, recv)}, nil)
				if err != nil {
					t.Fatalf("exchange with rank %d: %v", peer, err)
				}
				sent1, got1 := np.NodeMessages()
				want := int64(0)
				if nodeOf(peer) == nodeOf(me) {
					want = 1
				}
				if sent1-sent0 != want || got1-got0 != want {
					t.Errorf("rank %d (%s) with rank %d (%s): %d sent and %d received through the node path, want %d each",
						me, nodeOf(me), peer, nodeOf(peer), sent1-sent0, got1-got0, want)
				}
				got, err := recv.ToHost(nil)
				if err != nil {
					t.Fatal(err)
				}
				wantV := values(peer, n)
				for i := range got {
					if got[i] != wantV[i] {
						t.Fatalf("from rank %d: element %d is %v, want %v", peer, i, got[i], wantV[i])
					}
				}
				if err := c.Barrier(nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// TestRankNodeSharedOnEveryNodeAtOnce: each node builds its own NodeShared
// buffer at the same time, with counts that differ per rank; each rank
// writes its part, and after the barrier every rank of the node reads the
// whole buffer and finds exactly its node's ranks' parts, in order.
func TestRankNodeSharedOnEveryNodeAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := open(t, backend)
		node, err := comm.SplitNode(c)
		if err != nil {
			t.Fatal(err)
		}
		defer node.Close()
		me := c.Rank()
		count := func(r int) int { return 500 + 113*r }
		ns, err := devmem.NewNodeSharedSlice[float64](comm.NodeComm(node), count(me))
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		first := me - me%perNode // the node's first job rank
		if want := []int64{int64(count(first)), int64(count(first + 1))}; !slices.Equal(ns.Counts(), want) {
			t.Fatalf("counts %v, want %v (this node's ranks only)", ns.Counts(), want)
		}
		if err := ns.Mine().CopyFrom(values(me, count(me)), nil); err != nil {
			t.Fatal(err)
		}
		if err := ns.Barrier(); err != nil {
			t.Fatal(err)
		}
		all, err := ns.All().ToHost(nil)
		if err != nil {
			t.Fatal(err)
		}
		want := append(values(first, count(first)), values(first+1, count(first+1))...)
		if len(all) != len(want) {
			t.Fatalf("the node's buffer holds %d elements, want %d", len(all), len(want))
		}
		for i := range want {
			if all[i] != want[i] {
				t.Fatalf("%s's buffer element %d is %v, want %v", nodeOf(me), i, all[i], want[i])
			}
		}
		// No rank closes (and lets the root free) before all have read.
		if err := ns.Barrier(); err != nil {
			t.Fatal(err)
		}
	})
}

// openFiles counts this process's open file descriptors and its mappings
// of shared memory (memfds, as the host device's exports are), to see that
// a refused open made neither. (Other mappings come and go with the Go
// runtime and MPI's threads.)
func openFiles(t *testing.T) (fds, maps int) {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries), strings.Count(string(b), "/memfd:")
}

// TestRankNodeIPCHandleFromAnotherNodeIsRefused: every rank exports a
// buffer of random bytes; each node's local rank 0 sends its handle to the
// other node's local rank 0 and to its own node's other rank. A handle from
// the other node is refused with ErrBadHandle naming both nodes, with no
// descriptor or mapping made; one from this node opens and reads the
// exporter's bytes (so the refusal is the node's, not a broken handle).
func TestRankNodeIPCHandleFromAnotherNodeIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := open(t, backend)
		me := c.Rank()
		const size = 4096
		buf, err := c.Device().Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		defer buf.Free()
		mine := make([]byte, size)
		rng := rand.New(rand.NewPCG(uint64(me), 77))
		for i := range mine {
			mine[i] = byte(rng.Uint32())
		}
		if err := devmem.CopyFromHost(buf, mine, nil); err != nil {
			t.Fatal(err)
		}
		h, err := buf.Export()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := h.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		handles := allGatherBytes(t, c, raw, len(raw)) // every rank's handle, in rank order (one size)
		for r, s := range handles {
			if r == me {
				continue
			}
			var theirs devmem.IPCHandle
			if err := theirs.UnmarshalBinary(s); err != nil {
				t.Fatalf("rank %d's handle: %v", r, err)
			}
			if theirs.Node() != nodeOf(r) {
				t.Errorf("rank %d's handle says node %q, want %s", r, theirs.Node(), nodeOf(r))
			}
			fds0, maps0 := openFiles(t)
			v, err := c.Device().OpenIPC(theirs)
			if nodeOf(r) != nodeOf(me) {
				fds1, maps1 := openFiles(t)
				if err == nil {
					v.CloseIPC()
					t.Fatalf("rank %d on %s opened rank %d's handle from %s", me, nodeOf(me), r, nodeOf(r))
				}
				if !errors.Is(err, devmem.ErrBadHandle) || !strings.Contains(err.Error(), nodeOf(r)) || !strings.Contains(err.Error(), nodeOf(me)) {
					t.Errorf("rank %d's handle from %s: %v; want ErrBadHandle naming %s and %s", r, nodeOf(r), err, nodeOf(r), nodeOf(me))
				}
				if fds1 != fds0 || maps1 != maps0 {
					t.Errorf("the refused open changed the descriptors %d -> %d, memfd mappings %d -> %d: it opened something", fds0, fds1, maps0, maps1)
				}
				continue
			}
			if err != nil {
				t.Fatalf("rank %d's handle from this node (%s): %v", r, nodeOf(r), err)
			}
			got := make([]byte, size)
			rerr := devmem.CopyToHost(got, v, nil)
			if err := errors.Join(rerr, v.CloseIPC()); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, size)
			wrng := rand.New(rand.NewPCG(uint64(r), 77))
			for i := range want {
				want[i] = byte(wrng.Uint32())
			}
			if !slices.Equal(got, want) {
				t.Fatalf("rank %d's buffer opened on %s does not hold its bytes", r, nodeOf(me))
			}
		}
		// The exporters free only after every rank has tried.
		if err := c.Barrier(nil); err != nil {
			t.Fatal(err)
		}
	})
}

// TestMultinodeNodePathWithARankAloneOnItsNode: 3 ranks, 2 on nodeA and 1
// on nodeB. The rank alone on nodeB has no pair for the node path, and its
// vote turned the path off on every rank (NodeBytes 0 everywhere, so
// nodeA's pair went through MPI); it now abstains, and nodeA's pair takes
// the path while every pair across the nodes goes through MPI.
func TestMultinodeNodePathWithARankAloneOnItsNode(t *testing.T) {
	upNodes(t)
	j := mpitest.RunRanks(t, 3, "^TestRankNodePathOnlyBetweenRanksOfOneNode$", time.Minute, "GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND=")
	mpitest.ExpectPass(t, 3, j)
}
