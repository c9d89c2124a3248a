package mpicomm

import (
	"errors"
	"fmt"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/ipccache"
	"github.com/gpucomm/gpucomm/internal/mpi"
	"github.com/gpucomm/gpucomm/kernels"
)

// Collectives through the IPC path (issue 22.1), when every rank of the
// communicator is on one node and every pair reaches (ipcAll, agreed at
// Open) and the call moves at least nodeMin bytes. MPI carries one
// Allgather of handles and two small Allreduces, which are also the
// barriers between the phases.
//
// Reductions: rank r reduces its part of the array (AllReduce, Reduce: the
// r-th of size near-equal parts; ReduceScatter: block r), reading every
// rank's send buffer in rank order, and writes the result straight into
// every output that holds that part: every rank's receive buffer
// (AllReduce), the root's (Reduce), its own (ReduceScatter). The ranks whose
// outputs peers write publish their receive buffers beside their send
// buffers. Before anything is written, each rank opens every buffer it
// reads or writes (and, on a GPU, loads the kernel); the first Allreduce
// says whether any failed, and then every rank runs the host-staged
// reduction instead. On a GPU of at most fusedRanks (kernels.MaxReduceRanks)
// ranks the part is one kernels.Reduce, each source read once and each
// destination written once: for 2 ranks and 64 MiB, 256 MiB of memory
// traffic in all, where copying the first part into a scratch, folding the
// second into it and every rank copying every part out moved 576.
// Elsewhere (the host device, more ranks) the part is folded into this
// rank's scratch, with comm/driver's ReduceInto on the host device and the
// fold kernels on a GPU, and copied to each output. The second Allreduce
// keeps every send buffer in place, and every output unread, until all
// have written; it also says whether any rank's part failed (see
// ipcReduce). With a timeout, a rank that gives up in either Allreduce
// has still taken part in it, so its peers may write its output after its
// call returned ErrTimeout: the communicator is broken by then, and the
// buffer is not to be trusted. Broadcast: the ranks copy the root's buffer.

// ipcCollective reports whether call runs through the IPC path.
func (c *Comm) ipcCollective(call driver.Call) bool {
	if !c.ipcAll || c.nodeMin <= 0 {
		return false
	}
	// On a GPU too: on the H200 (2026-12-04) an open of a peer's buffer
	// met CUDA_ERROR_ALREADY_MAPPED (an idle cache entry still mapped memory
	// the peer had freed where the new buffer was, or a close raced the
	// open) and the copy-out phase had no way back. The process's cache
	// (ipccache.Shared) now closes such stale entries and opens again, and
	// every peer buffer a rank reads or writes is opened before the ranks
	// agree to go on (ipcReduce), so an open that still fails sends every
	// rank to the staged path.
	n := call.Count * call.DType.Size()
	if call.Operation == driver.OpReduceScatter {
		n *= c.size
	}
	return n >= c.nodeMin
}

// ipcShare is what a rank publishes for a collective: a handle of its send
// buffer, and of its receive buffer where peers write into it (hasRecv), or
// nothing (ok false) when it cannot.
type ipcShare struct {
	ok, hasRecv bool
	send, recv  devmem.IPCHandle
}

func (s ipcShare) bytes() []byte {
	if !s.ok {
		return nil
	}
	b, _ := s.send.MarshalBinary()
	if s.hasRecv {
		r, _ := s.recv.MarshalBinary()
		b = append(b, r...)
	}
	return b
}

// shareLen is a share's length on the wire (gatherShares): one byte that
// says how many handles follow (0, 1 or 2) and whether the rank orders its
// part on the GPU (shareOrdered), then room for two handles.
const shareLen = 1 + 2*devmem.HandleSize

// shareOrdered marks the share of a rank whose reduction is ordered on the
// GPU (ipcpath_ordered.go): it has not waited for its stream.
const shareOrdered = 0x80

// gatherShares gathers every rank's share (its bytes(), nil for none) in
// one MPI_Allgather of shareLen bytes a rank, where AllgatherBytes takes
// two collectives (the lengths, then the bytes): the IPC path's
// collectives pay for each of their small MPI calls (issue 22). ordered
// says whether this rank orders its part on the GPU; allOrdered whether
// every rank does.
func (c *Comm) gatherShares(o *op, share []byte, ordered bool) (shares [][]byte, allOrdered bool, err error) {
	if len(share)%devmem.HandleSize != 0 || len(share) > 2*devmem.HandleSize {
		return nil, false, fmt.Errorf("a share of %d bytes", len(share))
	}
	wire := make([]uint8, shareLen)
	wire[0] = uint8(len(share) / devmem.HandleSize)
	if ordered {
		wire[0] |= shareOrdered
	}
	copy(wire[1:], share)
	var all []uint8
	if err := c.block(o, func() error {
		var err error
		all, err = mpi.AllgatherValues(c.coll, wire)
		return err
	}); err != nil {
		return nil, false, err
	}
	out := make([][]byte, c.size)
	allOrdered = true
	for q := range out {
		rec := all[q*shareLen : (q+1)*shareLen]
		allOrdered = allOrdered && rec[0]&shareOrdered != 0
		n := int(rec[0] &^ shareOrdered)
		if n > 2 {
			return nil, false, fmt.Errorf("rank %d's share names %d handles", q, n)
		}
		out[q] = rec[1 : 1+n*devmem.HandleSize : 1+n*devmem.HandleSize]
	}
	return out, allOrdered, nil
}

func parseShare(raw []byte) (ipcShare, error) {
	var s ipcShare
	switch len(raw) {
	case 0:
		return s, nil
	case devmem.HandleSize, 2 * devmem.HandleSize:
	default:
		return s, fmt.Errorf("a share of %d bytes", len(raw))
	}
	if err := s.send.UnmarshalBinary(raw[:devmem.HandleSize]); err != nil {
		return s, err
	}
	if len(raw) == 2*devmem.HandleSize {
		if err := s.recv.UnmarshalBinary(raw[devmem.HandleSize:]); err != nil {
			return s, err
		}
		s.hasRecv = true
	}
	s.ok = true
	return s, nil
}

// scratchFor returns this rank's scratch of at least n bytes (never less
// than one byte), for the reductions that fold before they copy out;
// it grows to twice what it was at least, so that sizes that creep up
// reallocate seldom.
func (c *Comm) scratchFor(n int) (devmem.Buffer, error) {
	n = max(n, 1)
	if c.ipc.scratch.Len() >= n {
		return c.ipc.scratch.Slice(0, n)
	}
	if !c.ipc.scratch.IsZero() {
		c.ipc.scratchWas = c.ipc.scratch.Len()
		if err := c.ipc.scratch.Free(); err != nil {
			return devmem.Buffer{}, err
		}
		c.ipc.scratch = devmem.Buffer{}
	}
	b, err := c.dev.Alloc(max(n, 2*c.ipc.scratchWas))
	if err != nil {
		return b, err
	}
	c.ipc.scratch, c.ipc.scratchWas = b, b.Len()
	return b.Slice(0, n)
}

// part is the element range [lo, hi) of rank q's part of count elements:
// near-equal parts, each starting at a multiple of unit elements (16 bytes,
// so that kernels.Reduce takes its 16-byte path where the buffers start on
// one), the last ending at count.
func part(count, size, q, unit int) (lo, hi int) {
	lo = q * count / size / unit * unit
	hi = (q + 1) * count / size / unit * unit
	if q == size-1 {
		hi = count
	}
	return lo, hi
}

// agreeFailed is an Allreduce(max) of whether any rank failed: a barrier.
func (c *Comm) agreeFailed(o *op, failed bool) (bool, error) {
	anyFailed, _, err := c.agreeRun(o, failed, false)
	return anyFailed, err
}

// exchange publishes this rank's share and returns every rank's, or
// ok false when some rank has none.
func (c *Comm) exchange(o *op, mine ipcShare) ([]ipcShare, bool, error) {
	shares, ok, _, err := c.exchangeOrdered(o, mine, false)
	return shares, ok, err
}

// exchangeOrdered is exchange for a rank that says whether it orders its
// part on the GPU (ordered), and learns whether every rank does.
func (c *Comm) exchangeOrdered(o *op, mine ipcShare, ordered bool) ([]ipcShare, bool, bool, error) {
	all, allOrdered, err := c.gatherShares(o, mine.bytes(), ordered)
	if err != nil {
		return nil, false, false, err
	}
	shares := make([]ipcShare, len(all))
	ok := true
	for q, raw := range all {
		s, err := parseShare(raw)
		if err != nil || !s.ok {
			ok = false
		}
		shares[q] = s
	}
	return shares, ok, allOrdered, nil
}

// openPeer opens h through the cache, or, for this rank's own handle, gives
// b itself.
func (c *Comm) openPeer(q int, h devmem.IPCHandle, b devmem.Buffer, refs *[]*ipccache.Ref) (devmem.Buffer, error) {
	if q == c.rank {
		return b.Slice(0, h.Size())
	}
	r, err := c.ipc.cache.Open(h)
	if err != nil {
		return devmem.Buffer{}, err
	}
	*refs = append(*refs, r)
	return r.Buf, nil
}

func release(refs []*ipccache.Ref) error {
	var errs []error
	for _, r := range refs {
		errs = append(errs, r.Release())
	}
	return errors.Join(errs...)
}

// peersWrite reports whether rank q's receive buffer is written by its
// peers in call (so that q must publish it): every rank's in AllReduce, the
// root's in Reduce; in ReduceScatter each rank writes its own.
func peersWrite(call driver.Call, q int) bool {
	return call.Operation == driver.OpAllReduce || call.Operation == driver.OpReduce && q == call.Root
}

// reduceShare is what this rank publishes for a reduction through the IPC
// path (its send buffer's handle, and its receive buffer's where peers
// write it; none where either cannot be exported), and the elements [lo,
// hi) of the send buffers it reduces: the rank-th of near-equal parts cut on
// 16 bytes (AllReduce, Reduce), or block rank (ReduceScatter).
func (c *Comm) reduceShare(call driver.Call) (mine ipcShare, lo, hi int) {
	es := call.DType.Size()
	count := call.Count
	sendBytes := count * es
	lo, hi = part(count, c.size, c.rank, max(1, 16/es)) // in elements of send
	if call.Operation == driver.OpReduceScatter {
		sendBytes *= c.size
		lo, hi = c.rank*count, (c.rank+1)*count
	}
	if h, err := c.exportRange(call.Send, sendBytes); err == nil {
		mine = ipcShare{ok: true, send: h}
		if peersWrite(call, c.rank) {
			mine.recv, err = c.exportRange(call.Recv, count*es)
			mine.ok, mine.hasRecv = err == nil, err == nil
		}
	}
	return mine, lo, hi
}

// ipcReduce runs AllReduce, Reduce or ReduceScatter through the IPC path;
// staged is the host-staged body every rank runs instead when any rank
// cannot.
func (c *Comm) ipcReduce(o *op, staged func(*Comm, *op) error) (err error) {
	call := o.call
	mine, lo, hi := c.reduceShare(call)
	shares, ok, err := c.exchange(o, mine)
	if err != nil {
		return err
	}
	if !ok {
		c.ipc.staged.Add(1)
		return staged(c, o)
	}
	var refs []*ipccache.Ref
	defer func() { err = errors.Join(err, release(refs)) }()
	// Every buffer this rank reads or writes is opened now, before the
	// ranks agree: a failure sends every rank to the staged path, as
	// nothing has been written yet.
	r, prepErr := c.nodePart(shares, call, lo, hi, &refs)
	// The second flag is a GPU-ordered peer's stream that failed
	// (ipcReduceOrdered, with this rank on no stream): then no rank can
	// fall back either.
	failed, noStage, err := c.agreeRun(o, prepErr != nil, false)
	if err != nil {
		return err
	}
	if failed && noStage {
		return c.unstageable(call, nil)
	}
	if failed {
		c.ipc.staged.Add(1)
		return staged(c, o)
	}
	var runErr error
	if reduceFault != nil {
		runErr = reduceFault(c.rank)
	}
	if runErr == nil {
		runErr = c.reduce(call, r)
	}
	// No rank leaves, and so reuses its send buffer or reads its output,
	// before every rank has written. A rank's failure leaves its part of
	// every output unwritten, so no rank may count the reduction done:
	// where every send buffer is intact (no rank reduced in place) and
	// every failed rank's device still works, all run the host-staged
	// reduction, which writes every output again; else every rank fails
	// (a rank whose staged reduction failed at its first copy would leave
	// the others waiting in MPI). A device that failed with a sticky error
	// fails its stream's next synchronize as well.
	written := call.Operation != driver.OpReduce || c.rank == call.Root // a Reduce's non-roots have no output
	noStage = written && !call.Recv.IsZero() && call.Recv.Overlaps(call.Send)
	if runErr != nil && c.dev.Kind() == devmem.CUDA && c.ipc.copies.Synchronize() != nil {
		noStage = true
	}
	anyFailed, anyNoStage, err := c.agreeRun(o, runErr != nil, noStage)
	if err != nil {
		return errors.Join(runErr, err)
	}
	switch {
	case !anyFailed:
		c.ipc.collectives.Add(1)
		return nil
	case !anyNoStage:
		c.ipc.staged.Add(1)
		return staged(c, o)
	}
	return partFailed(call, runErr)
}

// partFailed is the error of every rank of a reduction through the IPC path
// where a rank's part failed and the host-staged reduction cannot run
// instead: runErr, this rank's own failure, or errPeerPart where it had
// none.
func partFailed(call driver.Call, runErr error) error {
	if runErr == nil {
		runErr = errPeerPart
	}
	return fmt.Errorf("%v through the IPC path: a rank's part failed, and the host-staged reduction cannot run instead (a send buffer reduced in place, or a device that failed): %w", call.Operation, runErr)
}

// errPeerPart is a reduction's error on the ranks whose own part went
// through, when another's did not.
var errPeerPart = errors.New("another rank could not write its part of the outputs")

// fusedRanks is the most ranks whose reductions on a GPU are one
// kernels.Reduce; tests lower it (export_test.go) to run the fold and
// copies on a GPU with few ranks.
var fusedRanks = kernels.MaxReduceRanks

// reduceFault, when set (by tests, export_test.go), and when it returns an
// error, fails this rank's part of an IPC reduction in place of writing
// it: a launch or copy that failed, as only a GPU could make one fail.
var reduceFault func(rank int) error

// agreeRun is an Allreduce(max) of whether any rank failed its part and
// whether any cannot run the host-staged reduction instead (agreeFailed's
// too, with the second false): a barrier.
func (c *Comm) agreeRun(o *op, failed, noStage bool) (anyFailed, anyNoStage bool, err error) {
	v := []int64{b2i(failed), b2i(noStage)}
	err = c.block(o, func() error { return mpi.AllreduceInt64s(c.coll, v, mpi.Max) })
	return v[0] != 0, v[1] != 0, err
}

// nodePart is this rank's share of a reduction through the IPC path: its
// part of every rank's send buffer, in rank order, and the outputs it
// writes the reduced part into.
type nodePart struct {
	n          int // elements in the part
	srcs, dsts []devmem.Buffer
	fused      bool          // one kernels.Reduce
	scratch    devmem.Buffer // else folded here first
}

// nodePart opens what this rank reads and writes for elements [lo, hi) of
// call, and makes ready the kernel or the scratch it reduces with.
func (c *Comm) nodePart(shares []ipcShare, call driver.Call, lo, hi int, refs *[]*ipccache.Ref) (nodePart, error) {
	es := call.DType.Size()
	r := nodePart{n: hi - lo}
	if r.n == 0 {
		return r, nil
	}
	// at is the part's bytes of rank q's buffer that h names (b itself for
	// this rank), from element off.
	at := func(q int, h devmem.IPCHandle, b devmem.Buffer, off int) (devmem.Buffer, error) {
		whole, err := c.openPeer(q, h, b, refs)
		if err != nil {
			return devmem.Buffer{}, err
		}
		return whole.Slice(off*es, r.n*es)
	}
	for q := range c.size {
		src, err := at(q, shares[q].send, call.Send, lo)
		if err != nil {
			return r, err
		}
		r.srcs = append(r.srcs, src)
	}
	if call.Operation == driver.OpReduceScatter {
		dst, err := call.Recv.Slice(0, r.n*es)
		if err != nil {
			return r, err
		}
		r.dsts = append(r.dsts, dst)
	}
	for q := range c.size {
		if !peersWrite(call, q) {
			continue
		}
		if !shares[q].hasRecv {
			return r, fmt.Errorf("rank %d published no receive buffer", q)
		}
		dst, err := at(q, shares[q].recv, call.Recv, lo)
		if err != nil {
			return r, err
		}
		r.dsts = append(r.dsts, dst)
	}
	if c.dev.Kind() == devmem.CUDA {
		// The module that holds the reduce kernels holds the folds: an op
		// or type without them, or a module that does not build, fails
		// here, before anything is written.
		typ, op, err := foldNames(call)
		if err == nil {
			err = kernels.ReduceReady(c.dev, typ, op)
		}
		if err != nil {
			return r, err
		}
		if r.fused = c.size <= fusedRanks; r.fused {
			return r, nil
		}
	}
	var err error
	r.scratch, err = c.scratchFor(r.n * es)
	return r, err
}

// reduce reduces r's part into every output, and waits for it.
func (c *Comm) reduce(call driver.Call, r nodePart) error {
	if r.n == 0 {
		return nil
	}
	by := 0
	if call.Op == comm.Avg {
		by = c.size
	}
	if r.fused {
		typ, op, err := foldNames(call)
		if err == nil {
			err = kernels.Reduce(c.ipc.copies, typ, op, r.dsts, r.srcs, r.n, by)
		}
		return errors.Join(err, c.ipc.copies.Synchronize())
	}
	nb := r.n * call.DType.Size()
	err := devmem.CopyN(r.scratch, r.srcs[0], nb, c.ipc.copies)
	for _, src := range r.srcs[1:] {
		if err != nil {
			break
		}
		err = c.fold(call, r.scratch, src, r.n)
	}
	if err == nil && by > 0 {
		err = c.divide(call, r.scratch, r.n)
	}
	for _, dst := range r.dsts {
		if err != nil {
			break
		}
		err = devmem.CopyN(dst, r.scratch, nb, c.ipc.copies)
	}
	return errors.Join(err, c.ipc.copies.Synchronize())
}

// fold is acc = acc op src over n elements: ReduceInto on the host device,
// after the copies queued before it; the kernels on a GPU.
func (c *Comm) fold(call driver.Call, acc, src devmem.Buffer, n int) error {
	if c.dev.Kind() != devmem.CUDA {
		if err := c.ipc.copies.Synchronize(); err != nil {
			return err
		}
		a, _ := acc.Bytes()
		s, _ := src.Bytes()
		return driver.ReduceInto(call.DType, call.Op, a[:n*call.DType.Size()], s[:n*call.DType.Size()])
	}
	typ, op, err := foldNames(call)
	if err != nil {
		return err
	}
	return kernels.Fold(c.ipc.copies, typ, op, acc, src, n)
}

func (c *Comm) divide(call driver.Call, acc devmem.Buffer, n int) error {
	if c.dev.Kind() != devmem.CUDA {
		if err := c.ipc.copies.Synchronize(); err != nil {
			return err
		}
		a, _ := acc.Bytes()
		return driver.DivideInto(call.DType, a[:n*call.DType.Size()], c.size)
	}
	typ, _, err := foldNames(call)
	if err != nil {
		return err
	}
	return kernels.Divide(c.ipc.copies, typ, acc, n, c.size)
}

// foldNames names call's element type and reduction as kernels does.
func foldNames(call driver.Call) (typ, op string, err error) {
	types := map[comm.DType]string{comm.Int8: "i8", comm.Uint8: "u8", comm.Int32: "i32", comm.Uint32: "u32",
		comm.Int64: "i64", comm.Uint64: "u64", comm.Float16: "f16", comm.BFloat16: "bf16", comm.Float32: "f32", comm.Float64: "f64"}
	ops := map[comm.Op]string{comm.Sum: "sum", comm.Avg: "sum", comm.Prod: "prod", comm.Min: "min", comm.Max: "max"}
	typ, op = types[call.DType], ops[call.Op]
	if typ == "" || op == "" {
		return "", "", fmt.Errorf("no device fold of %v with %v: %w", call.DType, call.Op, comm.ErrUnsupported)
	}
	return typ, op, nil
}

// publishSend gathers every rank's share of its send buffer: a handle of
// its first bytes bytes where publish and the buffer can be exported, else
// none (an empty share).
func (c *Comm) publishSend(o *op, publish bool, bytes int) ([][]byte, error) {
	var b []byte
	if publish {
		if h, err := c.exportRange(o.call.Send, bytes); err == nil {
			b = ipcShare{ok: true, send: h}.bytes()
		}
	}
	all, _, err := c.gatherShares(o, b, false)
	return all, err
}

// ipcBroadcast copies the root's buffer into every rank's.
func (c *Comm) ipcBroadcast(o *op) (err error) {
	call := o.call
	n := call.Count * call.DType.Size()
	// Only the root's share matters; the others publish nothing.
	all, err := c.publishSend(o, c.rank == call.Root, n)
	if err != nil {
		return err
	}
	root, perr := parseShare(all[call.Root])
	if perr != nil || !root.ok {
		c.ipc.staged.Add(1)
		return c.stagedBroadcast(o)
	}
	var refs []*ipccache.Ref
	defer func() { err = errors.Join(err, release(refs)) }()
	var copyErr error
	if c.rank != call.Root || call.Send.Addr() != call.Recv.Addr() {
		src, err := c.openPeer(call.Root, root.send, call.Send, &refs)
		if err == nil {
			if err = devmem.CopyN(call.Recv, src, n, c.ipc.copies); err == nil {
				err = c.ipc.copies.Synchronize()
			}
		}
		copyErr = err
	}
	return c.settleIPC(o, copyErr, (*Comm).stagedBroadcast)
}

// settleIPC ends a collective whose copies out of its peers' buffers gave
// copyErr: the ranks agree whether any failed (an Allreduce, which also
// keeps every buffer in place until all have read), and then all run
// staged, which writes every output again, or all count the collective
// done through the IPC path.
func (c *Comm) settleIPC(o *op, copyErr error, staged func(*Comm, *op) error) error {
	failed, err := c.agreeFailed(o, copyErr != nil)
	if err != nil {
		return err
	}
	if failed {
		c.ipc.staged.Add(1)
		return staged(c, o)
	}
	c.ipc.collectives.Add(1)
	return nil
}

// The bodies dispatch gives Staged mode's reductions and Broadcast: through
// the IPC path when the call takes it, else the host-staged pipeline.
func (c *Comm) nodeAllReduce(o *op) error { return c.nodeReduction(o, (*Comm).stagedAllReduce) }
func (c *Comm) nodeReduce(o *op) error    { return c.nodeReduction(o, (*Comm).stagedReduce) }
func (c *Comm) nodeReduceScatter(o *op) error {
	return c.nodeReduction(o, (*Comm).stagedReduceScatter)
}

func (c *Comm) nodeReduction(o *op, staged func(*Comm, *op) error) error {
	if c.ipcCollective(o.call) {
		return c.ipcReduce(o, staged)
	}
	return staged(c, o)
}

func (c *Comm) nodeBroadcast(o *op) error {
	if c.ipcCollective(o.call) {
		return c.ipcBroadcast(o)
	}
	return c.stagedBroadcast(o)
}
