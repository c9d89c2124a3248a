package conformance

import (
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
)

// The prime-count cases must cover what they claim: checked on their specs,
// without running them.
func TestPrimeSpecsCoverTheirClaims(t *testing.T) {
	const p = 4
	for _, thin := range []bool{false, true} {
		seen := map[comm.DType]map[comm.Op]bool{}
		ops := map[comm.Op]map[bool]bool{} // op -> float? -> seen
		var all []collSpec
		for _, f := range []func(int, bool, bool) []collSpec{primeAllReduce, primeReductions, primeMoves} {
			all = append(all, f(p, thin, false)...)
		}
		covered := map[driver.Operation]bool{}
		for _, s := range all {
			covered[s.op] = true
			if s.count != primeCount {
				t.Errorf("thin=%v: %v: count %d, want %d", thin, s, s.count, primeCount)
			}
			if s.sendAt%2 != 1 || (!s.inPlace && s.recvAt%2 != 1) {
				t.Errorf("thin=%v: %v: want odd element offsets", thin, s)
			}
			if s.op != driver.OpAllReduce || s.inPlace {
				continue
			}
			if seen[s.dt] == nil {
				seen[s.dt] = map[comm.Op]bool{}
			}
			seen[s.dt][s.red] = true
			if ops[s.red] == nil {
				ops[s.red] = map[bool]bool{}
			}
			ops[s.red][s.dt.IsFloat()] = true
		}
		for _, op := range collectives {
			if !covered[op] {
				t.Errorf("thin=%v: no %v at the prime count", thin, op)
			}
		}
		for _, dt := range comm.DTypes() {
			for _, op := range comm.Ops() {
				switch {
				case !thin && !seen[dt][op]:
					t.Errorf("full: no AllReduce of %v %v out of place", dt, op)
				case thin && len(seen[dt]) == 0:
					t.Errorf("thin: no AllReduce of %v", dt)
				case thin && (!ops[op][true] || !ops[op][false]):
					t.Errorf("thin: %v not on both an integer and a floating type", op)
				}
			}
		}
		if !seen[comm.Float64][comm.Avg] {
			t.Errorf("thin=%v: no AllReduce of float64 Avg out of place, the pairing NCCL 2.28 got wrong", thin)
		}
		if n := len(all); thin && n > 25 {
			t.Errorf("thin: %d calls of %d elements; keep the short suite's cost down", n, primeCount)
		}
	}
}
