package comm_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/localtest"
)

// onRanks runs fn on every rank of a new local group of n and returns the
// errors joined.
func onRanks(t *testing.T, n int, fn func(c comm.Communicator) error) {
	t.Helper()
	_, errs := localtest.Run(t, n, fn)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestNodeCommCollectives(t *testing.T) {
	const n = 4
	onRanks(t, n, func(c comm.Communicator) error {
		nc := comm.NodeComm(c)
		if nc.Rank() != c.Rank() || nc.Size() != n || nc.Device() != c.Device() {
			return fmt.Errorf("rank %d: NodeComm says rank %d of %d on %v", c.Rank(), nc.Rank(), nc.Size(), nc.Device())
		}
		got, err := nc.AllGatherInt64(int64(c.Rank())*-1_000_000_007 + 3)
		if err != nil {
			return err
		}
		for r, v := range got {
			if v != int64(r)*-1_000_000_007+3 {
				return fmt.Errorf("rank %d: gathered[%d] = %d", c.Rank(), r, v)
			}
		}
		for root := range n {
			b := make([]byte, 300)
			for i := range b {
				b[i] = byte(i*7 + c.Rank()) // differs on every rank: only root's may survive
			}
			if err := nc.BroadcastBytes(b, root); err != nil {
				return err
			}
			for i := range b {
				if b[i] != byte(i*7+root) {
					return fmt.Errorf("rank %d: broadcast from %d: byte %d = %d", c.Rank(), root, i, b[i])
				}
			}
		}
		if err := nc.Barrier(); err != nil {
			return err
		}
		if st := c.Device().Stats(); st.Buffers != 0 || st.Bytes != 0 {
			return fmt.Errorf("rank %d: scratch buffers left: %+v", c.Rank(), st)
		}
		return nil
	})
}

func TestNodeCommBadRootChangesNothing(t *testing.T) {
	onRanks(t, 2, func(c comm.Communicator) error {
		b := []byte{1, 2, 3}
		if err := comm.NodeComm(c).BroadcastBytes(b, 7); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("rank %d: broadcast from root 7 = %v", c.Rank(), err)
		}
		if b[0] != 1 || b[1] != 2 || b[2] != 3 {
			return fmt.Errorf("rank %d: buffer changed to %v", c.Rank(), b)
		}
		return nil
	})
}

// TestNodeSharedOnLocalGroup is the node-shared buffer on the in-process
// backend: ranks in one process, so every rank's view is the root's memory.
func TestNodeSharedOnLocalGroup(t *testing.T) {
	counts := []int{7, 1000, 0, 33}
	values := func(rank int) []float64 {
		rng := rand.New(rand.NewPCG(uint64(rank), 1))
		v := make([]float64, counts[rank])
		for i := range v {
			v[i] = float64(rng.IntN(1<<20)) / 8
		}
		return v
	}
	var mu sync.Mutex
	addrs := map[int]uintptr{}
	onRanks(t, len(counts), func(c comm.Communicator) error {
		ns, err := devmem.NewNodeSharedSlice[float64](comm.NodeComm(c), counts[c.Rank()])
		if err != nil {
			return err
		}
		mu.Lock()
		addrs[c.Rank()] = ns.All().Buffer().Addr()
		mu.Unlock()
		if err := ns.Mine().CopyFrom(values(c.Rank()), nil); err != nil {
			return err
		}
		if err := ns.Barrier(); err != nil {
			return err
		}
		all, err := ns.All().ToHost(nil)
		if err != nil {
			return err
		}
		i := 0
		for r := range counts {
			for _, want := range values(r) {
				if all[i] != want {
					return fmt.Errorf("rank %d: element %d (rank %d's) = %v, want %v", c.Rank(), i, r, all[i], want)
				}
				i++
			}
		}
		// The shared buffer works with the communicator: a rank's part can
		// be reduced like any buffer on its device.
		sum, err := devmem.AllocSlice[float64](c.Device(), 1)
		if err != nil {
			return err
		}
		first, err := ns.All().Sub(0, 1)
		if err != nil {
			return err
		}
		if err := comm.AllReduce(c, first, sum, comm.Sum, nil); err != nil {
			return err
		}
		got, err := sum.ToHost(nil)
		if err = errors.Join(err, sum.Free()); err != nil {
			return err
		}
		if got[0] != float64(len(counts))*all[0] {
			return fmt.Errorf("rank %d: sum of element 0 = %v, want %v", c.Rank(), got[0], float64(len(counts))*all[0])
		}
		if err := ns.Barrier(); err != nil {
			return err
		}
		if err := ns.Close(); err != nil {
			return err
		}
		if st := c.Device().Stats(); st.Buffers != 0 || st.Bytes != 0 || st.Opened != 0 {
			return fmt.Errorf("rank %d: after Close: %+v", c.Rank(), st)
		}
		return nil
	})
	for r, a := range addrs {
		if a != addrs[0] {
			t.Errorf("rank %d's buffer at %#x, root's at %#x: in one process it must be the same memory", r, a, addrs[0])
		}
	}
}
