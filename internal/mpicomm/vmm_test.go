package mpicomm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
)

// bounced hands the direct body ordinary memory in place of VMM buffers and
// brings recv's bytes back; a send inside recv stays inside recv's bounce
// buffer, at its offset. The host device stands in for the GPU: isVMM is
// made to call the user's buffers VMM, and the body plays MPI, checking
// what it was given and writing a result.
func TestBouncedDirectCollectiveSeesNoVMMMemory(t *testing.T) {
	dev := devmem.NewHostDevice()
	c := &Comm{dev: dev}
	rng := rand.New(rand.NewPCG(7, 11))
	for _, tc := range []struct {
		name     string
		sendOff  int // -1: send is a buffer of its own
		sendLen  int
		vmmSend  bool
		vmmRecv  bool
		wantSame bool // send's bounce buffer starts recv's at sendOff
	}{
		{"both VMM, apart", -1, 64, true, true, false},
		{"send VMM only", -1, 64, true, false, false},
		{"recv VMM only", -1, 64, false, true, false},
		{"in place", 0, 256, true, true, true},
		{"this rank's block of recv", 128, 64, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recv, err := dev.Alloc(256)
			if err != nil {
				t.Fatal(err)
			}
			defer recv.Free()
			send := recv
			if tc.sendOff >= 0 {
				send, err = recv.Slice(tc.sendOff, tc.sendLen)
			} else {
				send, err = dev.Alloc(tc.sendLen)
				defer send.Free()
			}
			if err != nil {
				t.Fatal(err)
			}
			in := make([]byte, 256)
			for i := range in {
				in[i] = byte(rng.IntN(256))
			}
			if err := devmem.CopyFromHost(recv, in, nil); err != nil {
				t.Fatal(err)
			}
			if tc.sendOff < 0 {
				if err := devmem.CopyFromHost(send, in[:tc.sendLen], nil); err != nil {
					t.Fatal(err)
				}
			}
			userRecv, userSend := recv, send
			old := isVMM
			defer func() { isVMM = old }()
			isVMM = func(b devmem.Buffer) bool {
				return (tc.vmmRecv && b.Overlaps(userRecv)) || (tc.vmmSend && b.Overlaps(userSend))
			}
			sendBytes, _ := userSend.Bytes()
			wantSend := append([]byte(nil), sendBytes[:tc.sendLen]...)
			result := make([]byte, 256)
			for i := range result {
				result[i] = byte(rng.IntN(256))
			}
			o := &op{c: c, call: driver.Call{Operation: driver.OpAllGather, Send: send, Recv: recv}}
			body := func(c *Comm, o *op) error {
				got := o.call
				if (tc.vmmSend && got.Send.Overlaps(userSend)) || (tc.vmmRecv && got.Recv.Overlaps(userRecv)) {
					return fmt.Errorf("MPI was handed the user's VMM memory")
				}
				if tc.wantSame && got.Send.Addr() != got.Recv.Addr()+uintptr(tc.sendOff) {
					return fmt.Errorf("send at %#x is not recv's bounce buffer %#x + %d", got.Send.Addr(), got.Recv.Addr(), tc.sendOff)
				}
				b, _ := got.Send.Bytes()
				if !bytes.Equal(b[:tc.sendLen], wantSend) {
					return fmt.Errorf("MPI's send does not hold the user's send bytes")
				}
				return devmem.CopyFromHost(got.Recv, result, nil)
			}
			if err := c.bounced(o, body); err != nil {
				t.Fatal(err)
			}
			if !o.call.Send.Same(send) || !o.call.Recv.Same(recv) {
				t.Error("bounced left the op with its bounce buffers")
			}
			got := make([]byte, 256)
			if err := devmem.CopyToHost(got, recv, nil); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != result[i] {
					t.Fatalf("recv[%d] = %d, want %d (what MPI wrote)", i, got[i], result[i])
				}
			}
			if st := dev.Stats(); st.Buffers != int64(2-btoi(tc.sendOff >= 0)) {
				t.Errorf("%d buffers live after the call; the bounce buffers must be freed", st.Buffers)
			}
		})
	}
}

// After a timeout the abandoned MPI call may still write into the bounce
// buffer: bounced keeps it, and says the timeout.
func TestBouncedKeepsItsBufferAfterATimeout(t *testing.T) {
	dev := devmem.NewHostDevice()
	c := &Comm{dev: dev}
	buf, err := dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	old := isVMM
	defer func() { isVMM = old }()
	isVMM = func(b devmem.Buffer) bool { return b.Overlaps(buf) }
	o := &op{c: c, call: driver.Call{Operation: driver.OpAllReduce, Send: buf, Recv: buf}}
	err = c.bounced(o, func(*Comm, *op) error { return fmt.Errorf("no progress: %w", comm.ErrTimeout) })
	if !errors.Is(err, comm.ErrTimeout) || dev.Stats().Buffers != 2 {
		t.Errorf("%v with %d buffers live; want ErrTimeout with the bounce buffer kept", err, dev.Stats().Buffers)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
