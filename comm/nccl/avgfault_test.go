package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/conformance"
	"github.com/gpucomm/gpucomm/devmem"
)

// Over a fake NCCL that gets float64 averages wrong as NCCL 2.28.3 does
// (the last 3 of more than a million elements garbage), AllReduce, Reduce
// and ReduceScatter with Avg must still be right, on one rank and on two,
// and NCCL must never be handed a float64 Avg. Without the workaround the
// Prime cases fail here with the 3 garbage elements.
func TestAvgOfFloat64IsRightOverAnNCCLWithTheFault(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			net := newFakeNet()
			conformance.RunConfig(t, fakeNewGroup(t, net, n, nil), conformance.Config{Short: true, Run: "^Prime/(AllReduce|Reductions)$"})
			net.checkClean(t)
			if got := net.avgCalls(comm.Float64); got != 0 {
				t.Errorf("NCCL %d was handed %d float64 averages; want each taken as a sum then a scaling", fakeVersion, got)
			}
		})
	}
}

// A release without the fault runs Avg natively: NCCL gets it, and the
// result is right. One whose table entry were missing would fail: the
// fault is seen when NCCL is handed the average.
func TestAvgRunsNativelyWhereNCCLIsFixed(t *testing.T) {
	const fixed = 22900 // 2.29.0: past every listed range
	for _, tc := range []struct {
		name     string
		fixedAvg bool
		wantPass bool
	}{{"a fixed NCCL", true, true}, {"a faulty NCCL the table missed", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			net := newFakeNet()
			libs := func(int) *fakeLib { return &fakeLib{version: fixed, fixedAvg: tc.fixedAvg} }
			rep := conformance.Check(fakeNewGroup(t, net, 1, libs), conformance.Config{Short: true, Run: "^Prime/AllReduce$"})
			if passed := rep.Failed() == 0 && len(rep.Results) == 1; passed != tc.wantPass {
				t.Errorf("passed %v, want %v:\n%v", passed, tc.wantPass, rep)
			}
			if net.avgCalls(comm.Float64) == 0 {
				t.Errorf("NCCL %d was handed no float64 average; want it native", fixed)
			}
		})
	}
}

func TestAvgWorkaroundTable(t *testing.T) {
	for _, tc := range []struct {
		version int
		dt      comm.DType
		want    bool
	}{
		{22803, comm.Float64, true}, // the release measured
		{22809, comm.Float64, true}, // the same series, no fix known
		{21200, comm.Float64, true}, // the oldest accepted: not measured, kept safe
		{0, comm.Float64, true},     // version unknown: kept safe
		{22900, comm.Float64, false},
		{30000, comm.Float64, false},
		{22803, comm.Float32, true}, // wrong out of place from 262147 elements
		{22803, comm.Int64, false},
		{22803, comm.Int8, false},
		{22900, comm.Float32, false},
	} {
		for _, count := range []int{1, 1_000_000, 1_000_003} {
			for _, inPlace := range []bool{false, true} {
				for _, nranks := range []int{1, 8} {
					if got := avgWorkaround(tc.version, tc.dt, count, inPlace, nranks); got != tc.want {
						t.Errorf("avgWorkaround(%d, %v, %d, inPlace=%v, %d ranks) = %v, want %v", tc.version, tc.dt, count, inPlace, nranks, got, tc.want)
					}
				}
			}
		}
	}
}

// float16 and bfloat16 were wrong out of place only: out of place they are
// copied to recv and averaged in place there; in place NCCL runs as it is.
func TestAvgOfHalfTypesIsTakenInPlace(t *testing.T) {
	for _, dt := range []comm.DType{comm.Float16, comm.BFloat16} {
		for _, v := range []int{22803, 0} {
			if got := avgFixFor(v, dt, 262147, false, 1); got != avgCopyInPlace {
				t.Errorf("NCCL %d, %v out of place: fix %d, want the copy then Avg in place", v, dt, got)
			}
			if got := avgFixFor(v, dt, 262147, true, 1); got != avgNative {
				t.Errorf("NCCL %d, %v in place (right there): fix %d, want NCCL's own", v, dt, got)
			}
		}
		if got := avgFixFor(22900, dt, 262147, false, 1); got != avgNative {
			t.Errorf("NCCL 2.29, %v: fix %d, want NCCL's own", dt, got)
		}
	}
	c := &Comm{version: 22803, size: 1}
	if p := c.planAvg(comm.Float16, comm.Avg, 5, false); p.op != comm.Avg || !p.copyFirst || p.scale {
		t.Errorf("plan of a float16 Avg out of place on NCCL 2.28.3: %+v, want Avg in place after a copy", p)
	}
	if p := c.planAvg(comm.Float64, comm.Avg, 5, true); p.op != comm.Sum || p.copyFirst || !p.scale {
		t.Errorf("plan of a float64 Avg in place on NCCL 2.28.3: %+v, want Sum then a scaling", p)
	}
	if p := c.planAvg(comm.Float64, comm.Max, 5, false); p.op != comm.Max || p.copyFirst || p.scale {
		t.Errorf("plan of a float64 Max: %+v, want NCCL's own Max", p)
	}
}

// Every type the table lists must have a scaling on the device, or the
// workaround would fail where NCCL gave a wrong answer; it scales count
// elements by 1/nranks, and nothing beyond.
func TestEveryListedTypeCanBeScaled(t *testing.T) {
	c := &Comm{size: 3}
	dev := devmem.NewHostDevice()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	in := []float64{3, 6, -9, 1.5, 7}
	for _, f := range avgFaults {
		if f.fix != avgSumScale {
			continue
		}
		for _, dt := range f.dtypes {
			b, err := dev.Alloc(len(in) * dt.Size())
			if err != nil {
				t.Fatal(err)
			}
			host, _ := b.Bytes()
			for i, v := range in {
				putFloat(host, dt, i, v)
			}
			if err := c.divide(b, len(in)-1, dt, s); err != nil {
				t.Errorf("%v (%s): %v", dt, f.why, err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			for i, v := range in {
				want := v * (1.0 / 3)
				if dt == comm.Float32 {
					want = float64(float32(v) * (1 / float32(3)))
				}
				if i == len(in)-1 {
					want = v // past count
				}
				if got := getFloat(host, dt, i); got != want {
					t.Errorf("%v: element %d: got %v, want %v", dt, i, got, want)
				}
			}
			b.Free()
		}
	}
	b, _ := dev.Alloc(2)
	defer b.Free()
	if err := c.divide(b, 1, comm.Float16, s); !errors.Is(err, comm.ErrUnsupported) {
		t.Errorf("float16, which has no scaling kernel: %v; want ErrUnsupported", err)
	}
}

func putFloat(b []byte, dt comm.DType, i int, v float64) {
	if dt == comm.Float32 {
		binary.NativeEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		return
	}
	binary.NativeEndian.PutUint64(b[8*i:], math.Float64bits(v))
}

func getFloat(b []byte, dt comm.DType, i int) float64 {
	if dt == comm.Float32 {
		return float64(math.Float32frombits(binary.NativeEndian.Uint32(b[4*i:])))
	}
	return math.Float64frombits(binary.NativeEndian.Uint64(b[8*i:]))
}
