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
// r-th of size near-equal parts; ReduceScatter: block r) by reading every
// rank's send buffer in rank order into its scratch, folding with
// comm/driver's ReduceInto on the host device and the kernels of
// kernels/reduce.cu on a GPU; then, once every rank has (the first
// Allreduce, which also says whether any failed: then every rank runs the
// host-staged reduction instead, nothing having been written), each rank
// copies the parts it needs out of the ranks' scratches; the second
// Allreduce keeps every scratch and send buffer in place until all have
// read. Broadcast: the ranks copy the root's buffer.

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
	// every peer buffer a rank reads is opened before the ranks agree to go
	// on (ipcReduce), so an open that still fails sends every rank to the
	// staged path.
	n := call.Count * call.DType.Size()
	if call.Operation == driver.OpReduceScatter {
		n *= c.size
	}
	return n >= c.nodeMin
}

// ipcShare is what a rank publishes for a collective: handles of its send
// buffer and its scratch, or why it cannot.
type ipcShare struct {
	ok            bool
	send, scratch devmem.IPCHandle
}

func (s ipcShare) bytes() []byte {
	if !s.ok {
		return nil
	}
	a, _ := s.send.MarshalBinary()
	b, _ := s.scratch.MarshalBinary()
	return append(a, b...)
}

func parseShare(raw []byte) (ipcShare, error) {
	var s ipcShare
	if len(raw) == 0 {
		return s, nil
	}
	if len(raw) != 2*devmem.HandleSize {
		return s, fmt.Errorf("a share of %d bytes", len(raw))
	}
	if err := s.send.UnmarshalBinary(raw[:devmem.HandleSize]); err != nil {
		return s, err
	}
	if err := s.scratch.UnmarshalBinary(raw[devmem.HandleSize:]); err != nil {
		return s, err
	}
	s.ok = true
	return s, nil
}

// scratchFor returns the collective's scratch of at least n bytes (never
// less than one byte, so that it can be exported), growing it between
// collectives only: peers read it during one.
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
	// Twice what it was at least: each scratch freed stays mapped in the
	// peers' caches until evicted, so few sizes are better than many.
	b, err := c.dev.Alloc(max(n, 2*c.ipc.scratchWas))
	if err != nil {
		return b, err
	}
	c.ipc.scratch, c.ipc.scratchWas = b, b.Len()
	return b.Slice(0, n)
}

// part is the element range [lo, hi) of rank q's part of count elements.
func part(count, size, q int) (lo, hi int) {
	return q * count / size, (q + 1) * count / size
}

// agreeFailed is an Allreduce(max) of whether any rank failed: a barrier.
func (c *Comm) agreeFailed(o *op, failed bool) (bool, error) {
	v := []int64{b2i(failed)}
	err := c.block(o, func() error { return mpi.AllreduceInt64s(c.coll, v, mpi.Max) })
	return v[0] != 0, err
}

// exchange publishes this rank's share and returns every rank's, or
// ok false when some rank has none.
func (c *Comm) exchange(o *op, mine ipcShare) ([]ipcShare, bool, error) {
	var all [][]byte
	if err := c.block(o, func() error {
		var err error
		all, err = mpi.AllgatherBytes(c.coll, mine.bytes())
		return err
	}); err != nil {
		return nil, false, err
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
	return shares, ok, nil
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

// ipcReduce runs AllReduce, Reduce or ReduceScatter through the IPC path;
// staged is the host-staged body every rank runs instead when any rank
// cannot.
func (c *Comm) ipcReduce(o *op, staged func(*Comm, *op) error) (err error) {
	call := o.call
	es := call.DType.Size()
	count := call.Count
	sendBytes := count * es
	lo, hi := part(count, c.size, c.rank) // in elements of send
	if call.Operation == driver.OpReduceScatter {
		sendBytes *= c.size
		lo, hi = c.rank*count, (c.rank+1)*count
	}
	mine := ipcShare{}
	scratch, serr := c.scratchFor((hi - lo) * es)
	if serr == nil {
		if h, err := c.exportRange(call.Send, sendBytes); err == nil {
			if hs, err := scratch.Export(); err == nil {
				mine = ipcShare{ok: true, send: h, scratch: hs}
			}
		}
	}
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
	foldErr := c.foldPart(shares, call, scratch, lo, hi, &refs)
	// The scratches this rank copies out of are opened now, before the
	// ranks agree: a failure to open one sends every rank to the staged
	// path, as nothing has been written yet.
	var parts []devmem.Buffer // by rank: the part of the result to copy out
	if foldErr == nil && (call.Operation == driver.OpAllReduce || call.Operation == driver.OpReduce && c.rank == call.Root) {
		parts = make([]devmem.Buffer, c.size)
		for q := range c.size {
			qlo, qhi := part(count, c.size, q)
			if qhi == qlo {
				continue
			}
			src, err := c.openPeer(q, shares[q].scratch, scratch, &refs)
			if err == nil {
				parts[q], err = src.Slice(0, (qhi-qlo)*es)
			}
			if err != nil {
				foldErr = err
				break
			}
		}
	}
	failed, err := c.agreeFailed(o, foldErr != nil)
	if err != nil {
		return err
	}
	if failed {
		c.ipc.staged.Add(1)
		return staged(c, o)
	}
	// Every part is reduced: copy out what this rank needs.
	var copyErr error
	if call.Operation == driver.OpReduceScatter {
		copyErr = devmem.CopyN(call.Recv, scratch, count*es, c.ipc.copies)
	}
	for q, src := range parts {
		if src.IsZero() {
			continue
		}
		qlo, qhi := part(count, c.size, q)
		dst, err := call.Recv.Slice(qlo*es, (qhi-qlo)*es)
		if err == nil {
			err = devmem.CopyN(dst, src, (qhi-qlo)*es, c.ipc.copies)
		}
		if err != nil {
			copyErr = err
			break
		}
	}
	if copyErr == nil {
		copyErr = c.ipc.copies.Synchronize()
	}
	// No rank leaves, and so reuses its scratch or send buffer, before
	// every rank has read them.
	if _, err := c.agreeFailed(o, copyErr != nil); err != nil {
		return errors.Join(copyErr, err)
	}
	if copyErr != nil {
		return fmt.Errorf("%v through the IPC path: %w", call.Operation, copyErr)
	}
	c.ipc.collectives.Add(1)
	return nil
}

// foldPart reduces elements [lo, hi) of every rank's send buffer, in rank
// order, into scratch, and finishes an Avg there.
func (c *Comm) foldPart(shares []ipcShare, call driver.Call, scratch devmem.Buffer, lo, hi int, refs *[]*ipccache.Ref) error {
	es := call.DType.Size()
	n := hi - lo
	if n == 0 {
		return nil
	}
	for q := range c.size {
		whole, err := c.openPeer(q, shares[q].send, call.Send, refs)
		if err != nil {
			return err
		}
		src, err := whole.Slice(lo*es, n*es)
		if err != nil {
			return err
		}
		if q == 0 {
			err = devmem.CopyN(scratch, src, n*es, c.ipc.copies)
		} else {
			err = c.fold(call, scratch, src, n)
		}
		if err != nil {
			return err
		}
	}
	if call.Op == comm.Avg {
		if err := c.divide(call, scratch, n); err != nil {
			return err
		}
	}
	return c.ipc.copies.Synchronize()
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
			b = ipcShare{ok: true, send: h, scratch: h}.bytes()
		}
	}
	var all [][]byte
	err := c.block(o, func() error {
		var err error
		all, err = mpi.AllgatherBytes(c.coll, b)
		return err
	})
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
