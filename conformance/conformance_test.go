package conformance_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/local"
	"github.com/gpucomm/gpucomm/conformance"
	"github.com/gpucomm/gpucomm/devmem"
)

func TestReportCountsFailuresAndSkips(t *testing.T) {
	rep := conformance.Report{Backend: "x", Ranks: 2, Device: "d", Results: []conformance.Result{
		{Name: "a", Passed: true},
		{Name: "b", Detail: "rank 1: wrong"},
		{Name: "c", Skipped: true, Detail: "needs 3 ranks"},
		{Name: "d", Detail: "timed out"},
	}}
	if rep.Failed() != 2 || rep.Skipped() != 1 {
		t.Errorf("Failed() = %d, Skipped() = %d; want 2, 1", rep.Failed(), rep.Skipped())
	}
	s := rep.String()
	for _, want := range []string{"4 cases, 2 failed, 1 skipped", "FAIL b", "rank 1: wrong", "skip c", "ok   a"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
	if (conformance.Report{}).Failed() != 0 {
		t.Error("an empty report has failures")
	}
}

func TestCheckRunsOnlySelectedCases(t *testing.T) {
	rep := conformance.Check(group(3), conformance.Config{Run: "^(Split|Grid/Gather)$"})
	var names []string
	for _, res := range rep.Results {
		names = append(names, res.Name)
	}
	if strings.Join(names, ",") != "Grid/Gather,Split" || rep.Failed() != 0 || rep.Ranks != 3 || rep.Backend != "local" {
		t.Errorf("got %v:\n%v", names, rep)
	}
}

// The report names a simulated host device by its kind: the same whatever
// host devices the process made before (here two groups' worth), where
// their numbers gave "host:0", then "host:4".
func TestCheckNamesSimulatedHostDevicesAlike(t *testing.T) {
	var devices []string
	for range 2 {
		rep := conformance.Check(group(2), conformance.Config{Run: "^Split$"})
		devices = append(devices, rep.Device)
	}
	if devices[0] != conformance.SimulatedHost || devices[1] != devices[0] {
		t.Errorf("devices %q; want %q twice", devices, conformance.SimulatedHost)
	}
}

func TestCheckReportsABadPattern(t *testing.T) {
	rep := conformance.Check(group(2), conformance.Config{Run: "("})
	if rep.Failed() != 1 || !strings.Contains(rep.Results[0].Detail, "Config.Run") {
		t.Errorf("%v", rep)
	}
}

func TestCheckSkipsCasesNeedingMoreRanks(t *testing.T) {
	rep := conformance.Check(group(1), conformance.Config{Run: "^(SendRecv|GroupP2P)$"})
	if len(rep.Results) != 2 || !rep.Results[0].Skipped || !rep.Results[1].Passed {
		t.Errorf("%v", rep)
	}
}

func group(n int) conformance.NewGroup {
	return func() ([]comm.Communicator, error) { return local.NewGroup(n) }
}

// processes hands the ranks of each 4-rank group out to two callers, the
// way mpirun gives each process its own: the k-th NewGroup call of process
// i gets ranks 2i and 2i+1 of the k-th group.
type processes struct {
	mu     sync.Mutex
	groups [][]comm.Communicator
	calls  [2]int
}

func (p *processes) newGroup(i int, wrap func(comm.Communicator) comm.Communicator) conformance.NewGroup {
	return func() ([]comm.Communicator, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		k := p.calls[i]
		p.calls[i]++
		for len(p.groups) <= k {
			g, err := local.NewGroup(4)
			if err != nil {
				return nil, err
			}
			for j := range g {
				g[j] = wrap(g[j])
			}
			p.groups = append(p.groups, g)
		}
		return p.groups[k][2*i : 2*i+2], nil
	}
}

// Two simulated processes with two ranks each: neither sees the other's
// data, and a failure on one is reported by both.
func TestCheckAgreesAcrossProcesses(t *testing.T) {
	for _, faulty := range []bool{false, true} {
		p := &processes{}
		wrap := func(c comm.Communicator) comm.Communicator { return c }
		if faulty {
			wrap = func(c comm.Communicator) comm.Communicator { return flipped{c} } // rank 0 only: process 0
		}
		var reps [2]conformance.Report
		var wg sync.WaitGroup
		for i := range reps {
			wg.Go(func() {
				// The prime-count cases add only time to what this checks.
				reps[i] = conformance.Check(p.newGroup(i, wrap), conformance.Config{Short: true, Timeout: time.Minute, Run: "^[^P]"})
			})
		}
		wg.Wait()
		for i, rep := range reps {
			if rep.Ranks != 4 {
				t.Errorf("process %d: %d ranks, want 4", i, rep.Ranks)
			}
			for _, res := range rep.Results {
				wantFail := faulty && (res.Name == "Grid/AllReduce" || res.Name == "Counts" || res.Name == "Stream")
				switch {
				case res.Skipped != strings.HasPrefix(res.Name, "Large/"):
					t.Errorf("faulty=%v process %d: %s skipped=%v", faulty, i, res.Name, res.Skipped)
				case !res.Skipped && res.Passed == wantFail:
					t.Errorf("faulty=%v process %d: %s passed=%v: %s", faulty, i, res.Name, res.Passed, res.Detail)
				case wantFail && i == 1 && res.Detail != "failed in another process":
					t.Errorf("process 1: %s: %q, want the failure of process 0", res.Name, res.Detail)
				}
			}
		}
	}
}

// stuck never returns from Barrier until released.
type stuck struct {
	comm.Communicator
	release chan struct{}
}

func (s stuck) Barrier(*devmem.Stream) error {
	<-s.release
	return fmt.Errorf("released")
}

func TestCheckReportsAHangAsATimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release) // lets the abandoned ranks finish
	newGroup := func() ([]comm.Communicator, error) {
		cs, err := local.NewGroup(2)
		for i := range cs {
			cs[i] = stuck{cs[i], release}
		}
		return cs, err
	}
	rep := conformance.Check(newGroup, conformance.Config{Run: "^Identity$", Timeout: 100 * time.Millisecond})
	if rep.Failed() != 1 || !strings.Contains(rep.Results[0].Detail, "timed out after 100ms; ranks still running: 0, 1") {
		t.Errorf("%v", rep)
	}
	// Later cases get fresh communicators and are not held up.
	if rep := conformance.Check(newGroup, conformance.Config{Run: "^Roots$"}); rep.Failed() != 0 || len(rep.Results) != 1 {
		t.Errorf("%v", rep)
	}
}

// counting counts rank 0's calls that went through and those refused.
type counting struct {
	comm.Communicator
	ok, refused *atomic.Int64
}

func (c counting) count(err error) error {
	if c.Rank() == 0 {
		if err == nil {
			c.ok.Add(1)
		} else {
			c.refused.Add(1)
		}
	}
	return err
}

func (c counting) AllReduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	return c.count(c.Communicator.AllReduce(send, recv, n, dt, op, s))
}
func (c counting) Reduce(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, root int, s *devmem.Stream) error {
	return c.count(c.Communicator.Reduce(send, recv, n, dt, op, root, s))
}
func (c counting) Broadcast(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	return c.count(c.Communicator.Broadcast(send, recv, n, dt, root, s))
}
func (c counting) AllGather(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	return c.count(c.Communicator.AllGather(send, recv, n, dt, s))
}
func (c counting) ReduceScatter(send, recv devmem.Buffer, n int, dt comm.DType, op comm.Op, s *devmem.Stream) error {
	return c.count(c.Communicator.ReduceScatter(send, recv, n, dt, op, s))
}
func (c counting) AllToAll(send, recv devmem.Buffer, n int, dt comm.DType, s *devmem.Stream) error {
	return c.count(c.Communicator.AllToAll(send, recv, n, dt, s))
}
func (c counting) Gather(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	return c.count(c.Communicator.Gather(send, recv, n, dt, root, s))
}
func (c counting) Scatter(send, recv devmem.Buffer, n int, dt comm.DType, root int, s *devmem.Stream) error {
	return c.count(c.Communicator.Scatter(send, recv, n, dt, root, s))
}
func (c counting) Send(buf devmem.Buffer, n int, dt comm.DType, peer int, s *devmem.Stream) error {
	return c.count(c.Communicator.Send(buf, n, dt, peer, s))
}
func (c counting) Recv(buf devmem.Buffer, n int, dt comm.DType, peer int, s *devmem.Stream) error {
	return c.count(c.Communicator.Recv(buf, n, dt, peer, s))
}
func (c counting) GroupP2P(ops []comm.P2P, s *devmem.Stream) error {
	return c.count(c.Communicator.GroupP2P(ops, s))
}
func (c counting) Barrier(s *devmem.Stream) error { return c.count(c.Communicator.Barrier(s)) }
func (c counting) Split(color, key int) (comm.Communicator, error) {
	sub, err := c.Communicator.Split(color, key)
	c.count(err)
	if sub != nil {
		sub = counting{sub, c.ok, c.refused}
	}
	return sub, err
}

// Under MPICH on oversubscribed cores a collective can take milliseconds,
// so short mode must stay at a few hundred calls a rank.
func TestShortModeCallBudget(t *testing.T) {
	calls := map[bool][2]int64{}
	for _, short := range []bool{true, false} {
		var ok, refused atomic.Int64
		rep := conformance.Check(func() ([]comm.Communicator, error) {
			cs, err := local.NewGroup(2)
			for i := range cs {
				cs[i] = counting{cs[i], &ok, &refused}
			}
			return cs, err
		}, conformance.Config{Short: short, Run: "^[^LP]"}) // the large and prime-count cases add few calls (TestPrimeSpecsCoverTheirClaims bounds them) and most of the time
		if rep.Failed() != 0 {
			t.Fatalf("%v", rep)
		}
		calls[short] = [2]int64{ok.Load(), refused.Load()}
		t.Logf("short=%v: %d calls a rank went through, %d were refused", short, ok.Load(), refused.Load())
	}
	if s, f := calls[true], calls[false]; s[0] > 600 || s[0] >= f[0] || s[1] == 0 {
		t.Errorf("short mode makes %d calls, full mode %d; want at most 600 and fewer than full", s[0], f[0])
	}
}
