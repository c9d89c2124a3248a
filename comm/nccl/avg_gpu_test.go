package nccl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// TestRankGPUReductionsAtPrimeCounts is NCCL 2.28's float64 average fault
// (the last 3 of 1000003 elements garbage) and its kin, on one rank of a
// real GPU: AllReduce, Reduce and ReduceScatter for every element type ×
// reduction at 1000003 elements (a prime) and 1000000, out of place and in
// place, at element offset 0 and at odd ones, from random inputs with a
// fixed seed into poisoned buffers. On one rank every reduction of a value
// is the value itself (an average divides by 1), so each result must equal
// its input bit for bit, and every byte around it must keep its poison.
// Run with GPUCOMM_GPU_TESTS=1 under mpirun -np 1 (TestUnderLauncherOnGPU
// starts it so).
func TestRankGPUReductionsAtPrimeCounts(t *testing.T) {
	if os.Getenv("GPUCOMM_GPU_TESTS") != "1" {
		t.Skip("set GPUCOMM_GPU_TESTS=1 on a machine with a GPU and NCCL")
	}
	onePerGPU(t)
	if n := mpi.World().Size(); n != 1 {
		t.Skipf("checks against one rank's identities: runs on one rank, not %d", n)
	}
	c, err := Open(comm.WithDevice("cuda"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	t.Logf("%s, version code %d: float64 Avg taken as a sum then a scaling by 1/nranks: %v",
		c.lib.describe(), c.version, avgWorkaround(c.version, comm.Float64, 1_000_003, false, 1))
	const most = 1_048_583 + 8 // the largest count and its offsets
	dev := c.Device()
	sendBuf, err := dev.Alloc(most * 8)
	if err != nil {
		t.Fatal(err)
	}
	defer sendBuf.Free()
	recvBuf, err := dev.Alloc(most * 8)
	if err != nil {
		t.Fatal(err)
	}
	defer recvBuf.Free()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()

	// NCCL's own results first, to measure the fault: a wrong one where the
	// table takes no workaround is a fault the table misses.
	t.Run("NCCL's own", func(t *testing.T) {
		nativeAvg = true
		defer func() { nativeAvg = false }()
		gpuReductionGrid(t, c, s, sendBuf, recvBuf, func(what string, dt comm.DType, red comm.Op, count int, inPlace bool, err error) {
			if red == comm.Avg && avgWorkaround(c.version, dt, count, inPlace, 1) {
				t.Logf("%s: wrong, and the table takes the workaround here: %v", what, err)
				return
			}
			t.Errorf("%s: NCCL's own result is wrong where the table (avgfault.go) takes no workaround: %v", what, err)
		})
	})
	t.Run("gpucomm's", func(t *testing.T) {
		gpuReductionGrid(t, c, s, sendBuf, recvBuf, func(what string, _ comm.DType, _ comm.Op, _ int, _ bool, err error) {
			t.Errorf("%s: one rank's reduction must equal its input bit for bit, the poison around it kept: %v", what, err)
		})
	})
}

// gpuReductionGrid makes every call of the grid and hands each failure to
// fail.
func gpuReductionGrid(t *testing.T, c *Comm, s *devmem.Stream, sendBuf, recvBuf devmem.Buffer,
	fail func(what string, dt comm.DType, red comm.Op, count int, inPlace bool, err error)) {
	bad := 0
	// 1048583 = 2^20+7: every float type was wrong there on NCCL 2.28.3.
	for _, count := range []int{1_000_003, 1_000_000, 1_048_583} {
		for _, dt := range comm.DTypes() {
			input := gpuTestInput(dt, count, uint64(count)*16+uint64(dt))
			for _, op := range []driver.Operation{driver.OpAllReduce, driver.OpReduce, driver.OpReduceScatter} {
				for _, red := range comm.Ops() {
					for _, inPlace := range []bool{false, true} {
						for _, at := range [][2]int{{0, 0}, {1, 3}} {
							sendAt, recvAt := at[0], at[1]
							what := fmt.Sprintf("%v %v %v count=%d", op, dt, red, count)
							if inPlace {
								recvAt = sendAt
								what += fmt.Sprintf(" in place at element %d", sendAt)
							} else {
								what += fmt.Sprintf(" at elements %d (send) and %d (recv)", sendAt, recvAt)
							}
							if err := gpuReduceOnce(c, s, op, dt, red, count, inPlace, sendAt, recvAt, input, sendBuf, recvBuf); err != nil {
								fail(what, dt, red, count, inPlace, err)
								if bad++; bad > 200 {
									t.Fatal("more than 200 wrong results")
								}
							}
						}
					}
				}
			}
		}
	}
}

// gpuReduceOnce makes one call and checks both buffers.
func gpuReduceOnce(c *Comm, s *devmem.Stream, op driver.Operation, dt comm.DType, red comm.Op, count int, inPlace bool,
	sendAt, recvAt int, input []byte, sendBuf, recvBuf devmem.Buffer) error {
	es, n := dt.Size(), count*dt.Size()
	size := sendBuf.Len()
	poison := bytes.Repeat([]byte{0xA5}, size)
	sendInit := append([]byte(nil), poison...)
	copy(sendInit[sendAt*es:], input)
	if err := devmem.CopyFromHost(sendBuf, sendInit, nil); err != nil {
		return err
	}
	if err := devmem.CopyFromHost(recvBuf, poison, nil); err != nil {
		return err
	}
	send, _ := sendBuf.Slice(sendAt*es, n)
	recv, _ := recvBuf.Slice(recvAt*es, n)
	recvWhole := recvBuf
	if inPlace {
		recv, recvWhole = send, sendBuf
	}
	var err error
	switch op {
	case driver.OpAllReduce:
		err = c.AllReduce(send, recv, count, dt, red, s)
	case driver.OpReduce:
		err = c.Reduce(send, recv, count, dt, red, 0, s)
	case driver.OpReduceScatter:
		err = c.ReduceScatter(send, recv, count, dt, red, s)
	}
	if err != nil {
		return err
	}
	if err := c.Wait(s); err != nil {
		return err
	}
	got := make([]byte, size)
	if err := devmem.CopyToHost(got, recvWhole, nil); err != nil {
		return err
	}
	want := poison
	if inPlace {
		want = sendInit
	} else {
		want = append([]byte(nil), poison...)
		copy(want[recvAt*es:], input)
		gotSend := make([]byte, size)
		if err := devmem.CopyToHost(gotSend, sendBuf, nil); err != nil {
			return err
		}
		if !bytes.Equal(gotSend, sendInit) {
			return fmt.Errorf("send was changed: %s", firstDiffs(gotSend, sendInit, dt, sendAt))
		}
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("recv: %s", firstDiffs(got, want, dt, recvAt))
	}
	return nil
}

// firstDiffs says how many elements differ and shows the first few, by
// element index from the view's start.
func firstDiffs(got, want []byte, dt comm.DType, at int) string {
	es := dt.Size()
	var first []string
	bad := 0
	for i := 0; i+es <= len(got); i += es {
		if bytes.Equal(got[i:i+es], want[i:i+es]) {
			continue
		}
		bad++
		if len(first) < 3 {
			first = append(first, fmt.Sprintf("element %d: got %s, want %s", i/es-at, elemString(got[i:i+es], dt), elemString(want[i:i+es], dt)))
		}
	}
	return fmt.Sprintf("%d elements differ; %v", bad, first)
}

func elemString(b []byte, dt comm.DType) string {
	switch dt {
	case comm.Float64:
		return fmt.Sprintf("%g (%#x)", math.Float64frombits(binary.NativeEndian.Uint64(b)), binary.NativeEndian.Uint64(b))
	case comm.Float32:
		return fmt.Sprintf("%g (%#x)", math.Float32frombits(binary.NativeEndian.Uint32(b)), binary.NativeEndian.Uint32(b))
	}
	return fmt.Sprintf("%#x", b)
}

// gpuTestInput is count elements of dt from a fixed seed: any bits for
// integers, finite normal values of either sign between 0.5 and 2 for
// floating types (so that min and max compare them plainly).
func gpuTestInput(dt comm.DType, count int, seed uint64) []byte {
	g := rand.New(rand.NewPCG(seed, 0x17))
	es := dt.Size()
	b := make([]byte, count*es)
	for i := range count {
		r := g.Uint64()
		sign, exp := r>>63, r>>62&1 // 2^-1 or 2^0
		var v uint64
		switch dt {
		case comm.Float16:
			v = sign<<15 | (14+exp)<<10 | r&0x3ff
		case comm.BFloat16:
			v = sign<<15 | (126+exp)<<7 | r&0x7f
		case comm.Float32:
			v = sign<<31 | (126+exp)<<23 | r&0x7fffff
		case comm.Float64:
			v = sign<<63 | (1022+exp)<<52 | r&0xfffffffffffff
		default:
			v = r
		}
		switch es {
		case 1:
			b[i] = byte(v)
		case 2:
			binary.NativeEndian.PutUint16(b[2*i:], uint16(v))
		case 4:
			binary.NativeEndian.PutUint32(b[4*i:], uint32(v))
		default:
			binary.NativeEndian.PutUint64(b[8*i:], v)
		}
	}
	return b
}
