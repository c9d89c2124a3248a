package conformance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/conformance"
	"github.com/gpucomm/gpucomm/devmem"
)

// The suite must be able to fail: each faulty wrapper of the local backend
// breaks one promise, and Check must report the cases that test it while
// the cases that do not touch it still pass.

// flipped corrupts one element of every AllReduce result of more than one
// element on rank 0 (the suite's own one-element verdict stays intact).
type flipped struct{ comm.Communicator }

func (f flipped) AllReduce(send, recv devmem.Buffer, count int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	if err := f.Communicator.AllReduce(send, recv, count, dt, op, s); err != nil || count < 2 || f.Rank() != 0 {
		return err
	}
	return s.HostFunc(func() error {
		b, _ := recv.Bytes()
		b[count*dt.Size()-1] ^= 0xFF // the top byte of the last element: sign and exponent
		return nil
	})
}

// rootless broadcasts from rank 0 whatever root it is given.
type rootless struct{ comm.Communicator }

func (f rootless) Broadcast(send, recv devmem.Buffer, count int, dt comm.DType, root int, s *devmem.Stream) error {
	if root != 0 && f.Rank() == 0 {
		send = recv // rank 0 was not given a send buffer: it sends what recv holds
	}
	return f.Communicator.Broadcast(send, recv, count, dt, 0, s)
}

// unordered runs AllReduce at once instead of after the work queued before
// it on the caller's stream.
type unordered struct{ comm.Communicator }

func (f unordered) AllReduce(send, recv devmem.Buffer, count int, dt comm.DType, op comm.Op, _ *devmem.Stream) error {
	return f.Communicator.AllReduce(send, recv, count, dt, op, nil)
}

// raggedTail corrupts the last 3 elements of AllReduce results of more
// than a million elements on rank 0, as NCCL 2.28 did for float64 Avg: only a
// case at such a count can see it.
type raggedTail struct{ comm.Communicator }

func (f raggedTail) AllReduce(send, recv devmem.Buffer, count int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	if err := f.Communicator.AllReduce(send, recv, count, dt, op, s); err != nil || count <= 1_000_000 || f.Rank() != 0 {
		return err
	}
	return s.HostFunc(func() error {
		b, _ := recv.Bytes()
		for i := (count - 3) * dt.Size(); i < count*dt.Size(); i++ {
			b[i] ^= 0x5A
		}
		return nil
	})
}

func wrapped(wrap func(comm.Communicator) comm.Communicator) conformance.NewGroup {
	return func() ([]comm.Communicator, error) {
		cs, err := local.NewGroup(4)
		for i := range cs {
			cs[i] = wrap(cs[i])
		}
		return cs, err
	}
}

func TestCheckReportsFaultyBackends(t *testing.T) {
	for _, tc := range []struct {
		name       string
		wrap       func(comm.Communicator) comm.Communicator
		fail, pass []string
		run        string // the cases to run: the prime-count ones only where they matter
	}{
		{"flipped AllReduce", func(c comm.Communicator) comm.Communicator { return flipped{c} },
			[]string{"Grid/AllReduce", "Counts", "Stream"},
			[]string{"Grid/Broadcast", "Grid/ReduceScatter", "Roots", "BadInput", "Split"}, "^[^P]"},
		{"Broadcast from rank 0", func(c comm.Communicator) comm.Communicator { return rootless{c} },
			[]string{"Grid/Broadcast", "Counts", "Roots", "Stream", "BadInput"},
			[]string{"Grid/AllReduce", "Grid/Gather", "Grid/Scatter", "Split"}, "^[^P]"},
		{"AllReduce out of stream order", func(c comm.Communicator) comm.Communicator { return unordered{c} },
			[]string{"Stream"},
			[]string{"Grid/AllReduce", "Counts", "Grid/Broadcast"}, "^[^P]"},
		{"AllReduce's tail wrong above a million elements", func(c comm.Communicator) comm.Communicator { return raggedTail{c} },
			[]string{"Prime/AllReduce"},
			[]string{"Grid/AllReduce", "Counts", "Stream", "Prime/Moves"}, "^(Grid/AllReduce|Counts|Stream|Prime/.*)$"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := conformance.Check(wrapped(tc.wrap), conformance.Config{Short: true, Timeout: time.Minute, Run: tc.run})
			got := map[string]conformance.Result{}
			for _, res := range rep.Results {
				got[res.Name] = res
			}
			for _, name := range tc.fail {
				if res, ok := got[name]; !ok || res.Passed || res.Skipped {
					t.Errorf("%s: want a failure, got %+v", name, res)
				}
			}
			for _, name := range tc.pass {
				if res, ok := got[name]; !ok || !res.Passed {
					t.Errorf("%s: want a pass, got %+v", name, res)
				}
			}
			if t.Failed() {
				t.Log(rep)
			}
		})
	}
}

func TestCheckPassesLocalBackend(t *testing.T) {
	rep := conformance.Check(wrapped(func(c comm.Communicator) comm.Communicator { return c }), conformance.Config{Short: true})
	if rep.Failed() != 0 || rep.Skipped() != 2*0+countLarge(rep) || rep.Backend != "local" || rep.Ranks != 4 {
		t.Errorf("%v", rep)
	}
	for _, res := range rep.Results {
		if !res.Skipped && (!res.Passed || res.Detail != "") {
			t.Errorf("%s: %+v", res.Name, res)
		}
	}
}

func countLarge(rep conformance.Report) int {
	n := 0
	for _, res := range rep.Results {
		if strings.HasPrefix(res.Name, "Large/") {
			n++
		}
	}
	return n
}
