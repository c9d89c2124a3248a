package comm_test

import (
	"fmt"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// SplitBy groups the ranks that give the same name, whole names only ("a"
// and "ab" differ, "" is a name), ranked as before; a sum over each new
// communicator adds exactly its members' values.
func TestSplitByGroupsEqualNamesOnly(t *testing.T) {
	names := []string{"ab", "a", "ab", "", "a", "node-with-a-long-name"}
	groups := map[string][]int{}
	for r, n := range names {
		groups[n] = append(groups[n], r)
	}
	onRanks(t, len(names), func(c comm.Communicator) error {
		sub, err := comm.SplitBy(c, names[c.Rank()])
		if err != nil {
			return err
		}
		defer sub.Close()
		members := groups[names[c.Rank()]]
		want := -1
		for i, r := range members {
			if r == c.Rank() {
				want = i
			}
		}
		if sub.Size() != len(members) || sub.Rank() != want {
			return fmt.Errorf("rank %d (%q): rank %d of %d, want %d of %d", c.Rank(), names[c.Rank()], sub.Rank(), sub.Size(), want, len(members))
		}
		x, err := devmem.AllocSlice[int64](sub.Device(), 1)
		if err != nil {
			return err
		}
		defer x.Free()
		if err := x.CopyFrom([]int64{1 << c.Rank()}, nil); err != nil {
			return err
		}
		if err := comm.AllReduce(sub, x, x, comm.Sum, nil); err != nil {
			return err
		}
		got, err := x.ToHost(nil)
		if err != nil {
			return err
		}
		var sum int64
		for _, r := range members {
			sum += 1 << r
		}
		if got[0] != sum {
			return fmt.Errorf("rank %d: sum over its group %b, want %b", c.Rank(), got[0], sum)
		}
		return nil
	})
}

// In one process every rank is on one node: SplitNode keeps them all, in
// order, and its size is LocalSize.
func TestSplitNodeOfALocalGroupIsTheWholeGroup(t *testing.T) {
	onRanks(t, 3, func(c comm.Communicator) error {
		node, err := comm.SplitNode(c)
		if err != nil {
			return err
		}
		defer node.Close()
		if node.Size() != c.LocalSize() || node.Rank() != c.Rank() {
			return fmt.Errorf("rank %d: SplitNode gave rank %d of %d, want %d of %d", c.Rank(), node.Rank(), node.Size(), c.Rank(), c.LocalSize())
		}
		return nil
	})
}
