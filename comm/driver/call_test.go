package driver

import (
	"testing"

	"github.com/gpucomm/gpucomm/devmem"
)

// The calls of Send, Recv and GroupP2P carry what Validate checks, and
// GroupCall's list is the backend's own copy.
func TestPointToPointCalls(t *testing.T) {
	dev := devmem.NewHostDevice()
	buf, err := dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	call, ps := SendCall(buf, 8, Float64, 3, nil)
	if call.Operation != OpSend || call.Send != buf || call.Count != 8 || call.DType != Float64 || call.Root != 3 ||
		len(ps) != 1 || ps[0] != SendTo(3, buf, 8, Float64) {
		t.Errorf("SendCall: %+v, %+v", call, ps)
	}
	call, ps = RecvCall(buf, 4, Int32, 1, nil)
	if call.Operation != OpRecv || call.Recv != buf || call.Count != 4 || call.DType != Int32 || call.Root != 1 ||
		len(ps) != 1 || ps[0] != RecvFrom(1, buf, 4, Int32) {
		t.Errorf("RecvCall: %+v, %+v", call, ps)
	}
	ops := []P2P{SendTo(1, buf, 2, Uint8), RecvFrom(2, buf, 2, Uint8)}
	call, ps = GroupCall(ops, nil)
	ops[0].Peer = 9 // the caller reuses its slice
	if call.Operation != OpGroupP2P || len(ps) != 2 || ps[0].Peer != 1 || call.P2P[0].Peer != 1 || ps[1] != RecvFrom(2, buf, 2, Uint8) {
		t.Errorf("GroupCall: %+v, %+v; want its own copy of the transfers", call, ps)
	}
}
