package devmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A tiny NodeComm for tests: each rank talks to a hub over a byte stream (a
// net.Pipe between goroutines, or os.Pipes to a child process); the hub
// answers each collective once every rank has asked for it. It shows
// NodeShared's protocol across real processes before the MPI backends do.
const (
	opBroadcast byte = iota + 1
	opAllGather
	opBarrier
)

type pipeComm struct {
	rank, size int
	dev        *Device
	r          io.Reader
	w          io.Writer
}

func (p *pipeComm) Rank() int       { return p.rank }
func (p *pipeComm) Size() int       { return p.size }
func (p *pipeComm) Device() *Device { return p.dev }

// call sends op, root, len, payload and returns the hub's reply payload.
func (p *pipeComm) call(op byte, root int, payload []byte) ([]byte, error) {
	req := make([]byte, 9+len(payload))
	req[0] = op
	binary.LittleEndian.PutUint32(req[1:], uint32(root))
	binary.LittleEndian.PutUint32(req[5:], uint32(len(payload)))
	copy(req[9:], payload)
	if _, err := p.w.Write(req); err != nil {
		return nil, fmt.Errorf("rank %d: to hub: %w", p.rank, err)
	}
	var head [5]byte
	if _, err := io.ReadFull(p.r, head[:]); err != nil {
		return nil, fmt.Errorf("rank %d: from hub: %w", p.rank, err)
	}
	reply := make([]byte, binary.LittleEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(p.r, reply); err != nil {
		return nil, fmt.Errorf("rank %d: from hub: %w", p.rank, err)
	}
	if head[0] != 0 {
		return nil, fmt.Errorf("rank %d: hub: %s", p.rank, reply)
	}
	return reply, nil
}

func (p *pipeComm) BroadcastBytes(b []byte, root int) error {
	reply, err := p.call(opBroadcast, root, b)
	if err != nil {
		return err
	}
	if len(reply) != len(b) {
		return fmt.Errorf("rank %d: broadcast of %d bytes got %d", p.rank, len(b), len(reply))
	}
	copy(b, reply)
	return nil
}

func (p *pipeComm) AllGatherInt64(v int64) ([]int64, error) {
	reply, err := p.call(opAllGather, 0, binary.LittleEndian.AppendUint64(nil, uint64(v)))
	if err != nil {
		return nil, err
	}
	if len(reply) != 8*p.size {
		return nil, fmt.Errorf("rank %d: gathered %d bytes for %d ranks", p.rank, len(reply), p.size)
	}
	out := make([]int64, p.size)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(reply[8*i:]))
	}
	return out, nil
}

func (p *pipeComm) Barrier() error { _, err := p.call(opBarrier, 0, nil); return err }

type hubConn struct {
	r io.Reader
	w io.Writer
}

// serveHub answers collectives until every rank has hung up. A rank that
// hangs up early or asks for a different collective ends it with an error
// reply to the others, so that no rank waits forever.
func serveHub(conns []hubConn) error {
	n := len(conns)
	for {
		ops, roots, payloads := make([]byte, n), make([]int, n), make([][]byte, n)
		var fail error
		asked := 0
		for r, c := range conns {
			var head [9]byte
			if _, err := io.ReadFull(c.r, head[:]); err != nil {
				if err == io.EOF && r == 0 {
					return nil // everyone is done (the others' EOF is not checked)
				}
				fail = fmt.Errorf("rank %d hung up: %v", r, err)
				break
			}
			ops[r], roots[r] = head[0], int(binary.LittleEndian.Uint32(head[1:]))
			payloads[r] = make([]byte, binary.LittleEndian.Uint32(head[5:]))
			if _, err := io.ReadFull(c.r, payloads[r]); err != nil {
				fail = fmt.Errorf("rank %d hung up: %v", r, err)
				break
			}
			asked++
		}
		var reply []byte
		if fail == nil {
			reply, fail = collect(ops, roots, payloads)
		}
		for r := range asked {
			status := byte(0)
			out := reply
			if fail != nil {
				status, out = 1, []byte(fail.Error())
			}
			head := []byte{status, 0, 0, 0, 0}
			binary.LittleEndian.PutUint32(head[1:], uint32(len(out)))
			conns[r].w.Write(append(head, out...))
		}
		if fail != nil {
			return fail
		}
	}
}

func collect(ops []byte, roots []int, payloads [][]byte) ([]byte, error) {
	for r := range ops {
		if ops[r] != ops[0] || roots[r] != roots[0] {
			return nil, fmt.Errorf("rank %d called op %d root %d, rank 0 op %d root %d", r, ops[r], roots[r], ops[0], roots[0])
		}
	}
	switch ops[0] {
	case opBroadcast:
		root := roots[0]
		if root < 0 || root >= len(ops) {
			return nil, fmt.Errorf("broadcast root %d", root)
		}
		for r, p := range payloads {
			if len(p) != len(payloads[root]) {
				return nil, fmt.Errorf("broadcast: rank %d gave %d bytes, root %d", r, len(p), len(payloads[root]))
			}
		}
		return payloads[root], nil
	case opAllGather:
		var out []byte
		for _, p := range payloads {
			out = append(out, p...)
		}
		return out, nil
	case opBarrier:
		return nil, nil
	}
	return nil, fmt.Errorf("unknown op %d", ops[0])
}

// inProcessNode makes size pipeComms on fresh host devices, wired to a hub
// running on a goroutine; the hub's error arrives on the channel.
func inProcessNode(t *testing.T, size int) ([]*pipeComm, <-chan error) {
	t.Helper()
	cs := make([]*pipeComm, size)
	hub := make([]hubConn, size)
	for r := range cs {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		cs[r] = &pipeComm{rank: r, size: size, dev: NewHostDevice(), r: a, w: a}
		hub[r] = hubConn{b, b}
	}
	done := make(chan error, 1)
	go func() {
		err := serveHub(hub)
		for _, h := range hub {
			h.r.(net.Conn).Close() // unblocks ranks still writing
		}
		done <- err
	}()
	return cs, done
}

// onEveryRank runs fn for each rank on its own goroutine and returns the
// errors by rank.
func onEveryRank(cs []*pipeComm, fn func(c *pipeComm) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = fn(c) })
	}
	wg.Wait()
	return errs
}

// rankValues are the float64 values rank r writes: exact in binary, and
// different for every rank and element.
func rankValues(rank, n int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(rank), 42))
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(rank*1_000_000+i) + float64(rng.IntN(4))/4
	}
	return v
}

// fillAndCheck is one rank's part of the node-shared test: write its values
// through Mine, meet at the barrier, then check every rank's values in All.
func fillAndCheck(ns *NodeSharedSlice[float64], rank int, counts []int64) error {
	if got := ns.Counts(); fmt.Sprint(got) != fmt.Sprint(counts) {
		return fmt.Errorf("rank %d: Counts() = %v, want %v", rank, got, counts)
	}
	var off int64
	for _, c := range counts[:rank] {
		off += c
	}
	if ns.Offset() != int(off) || ns.Mine().Len() != int(counts[rank]) {
		return fmt.Errorf("rank %d: Mine is %d elements at %d, want %d at %d", rank, ns.Mine().Len(), ns.Offset(), counts[rank], off)
	}
	if err := ns.Mine().CopyFrom(rankValues(rank, int(counts[rank])), nil); err != nil {
		return err
	}
	if err := ns.Barrier(); err != nil {
		return err
	}
	all, err := ns.All().ToHost(nil)
	if err != nil {
		return err
	}
	var want []float64
	for r, c := range counts {
		want = append(want, rankValues(r, int(c))...)
	}
	if len(all) != len(want) {
		return fmt.Errorf("rank %d: All holds %d elements, want %d", rank, len(all), len(want))
	}
	for i := range want {
		if all[i] != want[i] {
			return fmt.Errorf("rank %d: element %d of All = %v, want %v", rank, i, all[i], want[i])
		}
	}
	// Nobody closes (and the root frees) before everyone has checked.
	return ns.Barrier()
}

func checkNothingLeft(d *Device) error {
	if st := d.Stats(); st.Buffers != 0 || st.Bytes != 0 || st.Opened != 0 {
		return fmt.Errorf("%v: after Close: %+v", d, st)
	}
	return nil
}

func TestNodeSharedRanksFillOneBuffer(t *testing.T) {
	counts := []int64{3, 0, 1000, 17}
	cs, hub := inProcessNode(t, len(counts))
	shared := make([]*NodeSharedSlice[float64], len(cs))
	errs := onEveryRank(cs, func(c *pipeComm) error {
		ns, err := NewNodeSharedSlice[float64](c, int(counts[c.rank]))
		if err != nil {
			return err
		}
		shared[c.rank] = ns
		return fillAndCheck(ns, c.rank, counts)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// In one process every rank's view is the root's memory itself.
	for r, ns := range shared {
		if ns.All().Buffer().Addr() != shared[0].All().Buffer().Addr() || ns.All().Device() != cs[r].dev {
			t.Errorf("rank %d: All at %#x on %v; root's at %#x", r, ns.All().Buffer().Addr(), ns.All().Device(), shared[0].All().Buffer().Addr())
		}
		if r > 0 && cs[r].dev.Stats().Opened != 1 {
			t.Errorf("rank %d: %d views open, want 1", r, cs[r].dev.Stats().Opened)
		}
	}
	if st := cs[0].dev.Stats(); st.Buffers != 1 || st.Bytes != 8*1020 {
		t.Errorf("root holds %+v, want one buffer of %d bytes", st, 8*1020)
	}
	errs = onEveryRank(cs, func(c *pipeComm) error {
		if err := shared[c.rank].Close(); err != nil {
			return err
		}
		return checkNothingLeft(c.dev)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, ns := range shared {
		if err := ns.Close(); !errors.Is(err, ErrClosed) {
			t.Errorf("rank %d: second Close = %v, want ErrClosed", r, err)
		}
		if err := ns.Barrier(); !errors.Is(err, ErrClosed) {
			t.Errorf("rank %d: Barrier after Close = %v, want ErrClosed", r, err)
		}
	}
	endNode(t, cs, hub)
}

// endNode closes the ranks' ends of an inProcessNode and fails t if its hub
// failed.
func endNode(t *testing.T, cs []*pipeComm, hub <-chan error) {
	t.Helper()
	for _, c := range cs {
		c.w.(io.Closer).Close()
	}
	if err := <-hub; err != nil {
		t.Fatal(err)
	}
}

// onNode runs fn on every rank of a fresh inProcessNode of size ranks,
// fails t on any rank's error, and ends the node.
func onNode(t *testing.T, size int, fn func(c *pipeComm) error) {
	t.Helper()
	cs, hub := inProcessNode(t, size)
	if err := errors.Join(onEveryRank(cs, fn)...); err != nil {
		t.Fatal(err)
	}
	endNode(t, cs, hub)
}

func TestNodeSharedAllCountsZero(t *testing.T) {
	onNode(t, 3, func(c *pipeComm) error {
		ns, err := NewNodeShared(c, 0, 4)
		if err != nil {
			return err
		}
		if ns.All().Len() != 0 || ns.Mine().Len() != 0 || ns.All().IsZero() {
			return fmt.Errorf("rank %d: All %d bytes, Mine %d", c.rank, ns.All().Len(), ns.Mine().Len())
		}
		if err := ns.Close(); err != nil {
			return err
		}
		return checkNothingLeft(c.dev)
	})
}

// corruptingComm flips a byte of every broadcast it receives, as a broken
// transport would.
type corruptingComm struct{ *pipeComm }

func (c corruptingComm) BroadcastBytes(b []byte, root int) error {
	err := c.pipeComm.BroadcastBytes(b, root)
	b[1+hoDriver] ^= 0xff
	return err
}

func TestNodeSharedErrorOnOneRankFailsAllWithNothingLeft(t *testing.T) {
	cases := []struct {
		name string
		// args gives rank r's NodeComm, count and element size.
		args func(c *pipeComm) (NodeComm, int64, int)
		// want is the sentinel every rank's error wraps (nil: any error),
		// and on rank 2 (where the failure is) wantOn2.
		want, wantOn2 error
	}{
		{"negative count on rank 2", func(c *pipeComm) (NodeComm, int64, int) {
			if c.rank == 2 {
				return c, -5, 8
			}
			return c, 10, 8
		}, ErrInvalidArgument, ErrInvalidArgument},
		{"element sizes differ", func(c *pipeComm) (NodeComm, int64, int) {
			if c.rank == 2 {
				return c, 10, 4
			}
			return c, 10, 8
		}, ErrInvalidArgument, ErrInvalidArgument},
		{"zero element size on rank 2", func(c *pipeComm) (NodeComm, int64, int) {
			if c.rank == 2 {
				return c, 10, 0
			}
			return c, 10, 8
		}, ErrInvalidArgument, ErrInvalidArgument},
		{"handle corrupted on the way to rank 2", func(c *pipeComm) (NodeComm, int64, int) {
			if c.rank == 2 {
				return corruptingComm{c}, 10, 8
			}
			return c, 10, 8
		}, ErrBadHandle, ErrBadHandle},
		{"root cannot allocate", func(c *pipeComm) (NodeComm, int64, int) {
			return c, 1 << 46, 8 // 2 PiB: past any address space
		}, nil, nil},
		{"counts overflow", func(c *pipeComm) (NodeComm, int64, int) {
			return c, 1 << 61, 8
		}, ErrInvalidArgument, ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			onNode(t, 4, func(c *pipeComm) error {
				nc, count, elem := tc.args(c)
				ns, err := NewNodeShared(nc, count, elem)
				if err == nil {
					return fmt.Errorf("rank %d: NewNodeShared succeeded: %v", c.rank, ns.Counts())
				}
				want := tc.want
				if c.rank == 2 {
					want = tc.wantOn2
				}
				if want != nil && !errors.Is(err, want) {
					return fmt.Errorf("rank %d: %v, want an error wrapping %v", c.rank, err, want)
				}
				if ns != nil {
					return fmt.Errorf("rank %d: non-nil NodeShared with an error", c.rank)
				}
				return checkNothingLeft(c.dev)
			})
		})
	}
}

// An element type that Slice refuses (of size zero, or holding pointers)
// or an element size that is not positive fails every rank with
// ErrInvalidArgument and leaves nothing allocated; the rank that gave it
// says what it is (where every rank said "element sizes differ or are not
// positive (rank 0: -1, rank 0: -1)"), the others name that rank, and
// sizes that differ are named in bytes.
func TestNodeSharedRefusedElementTypesAreNamed(t *testing.T) {
	cases := []struct {
		name string
		// make is rank r's call.
		make func(c *pipeComm) (any, error)
		// onBad is what the errors of the ranks in bad say, onOthers what
		// the others' say.
		bad             []int
		onBad, onOthers []string
	}{
		{"struct{} on every rank", func(c *pipeComm) (any, error) {
			return NewNodeSharedSlice[struct{}](c, 4)
		}, []int{0, 1, 2}, []string{"struct {}", "size zero"}, nil},
		{"*int on rank 2", func(c *pipeComm) (any, error) {
			if c.rank == 2 {
				return NewNodeSharedSlice[*int](c, 4)
			}
			return NewNodeSharedSlice[float64](c, 4)
		}, []int{2}, []string{"rank 2", "*int", "pointers"}, []string{"rank 2 refused its element type"}},
		{"string on rank 0", func(c *pipeComm) (any, error) {
			if c.rank == 0 {
				return NewNodeSharedSlice[string](c, 4)
			}
			return NewNodeSharedSlice[float64](c, 4)
		}, []int{0}, []string{"string", "pointers"}, []string{"rank 0 refused its element type"}},
		{"element size 0 on rank 1", func(c *pipeComm) (any, error) {
			if c.rank == 1 {
				return NewNodeShared(c, 4, 0)
			}
			return NewNodeShared(c, 4, 8)
		}, []int{1}, []string{"element size 0 is not positive"}, []string{"rank 1 refused its element type"}},
		{"element sizes differ", func(c *pipeComm) (any, error) {
			if c.rank == 2 {
				return NewNodeShared(c, 4, 4)
			}
			return NewNodeShared(c, 4, 8)
		}, nil, nil, []string{"element sizes differ (rank 2: 4 bytes, rank 0: 8 bytes)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			onNode(t, 3, func(c *pipeComm) error {
				ns, err := tc.make(c)
				if err == nil {
					return fmt.Errorf("rank %d: succeeded: %v", c.rank, ns)
				}
				if !errors.Is(err, ErrInvalidArgument) {
					return fmt.Errorf("rank %d: %v; want ErrInvalidArgument", c.rank, err)
				}
				want := tc.onOthers
				if slices.Contains(tc.bad, c.rank) {
					want = tc.onBad
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						return fmt.Errorf("rank %d: %q; want it to say %q", c.rank, err, w)
					}
				}
				if strings.Contains(err.Error(), "-1") {
					return fmt.Errorf("rank %d: %q reports the -1 sent for a refused element", c.rank, err)
				}
				return checkNothingLeft(c.dev)
			})
		})
	}
}

func TestNodeSharedRootErrorReachesEveryRank(t *testing.T) {
	cs, hub := inProcessNode(t, 2)
	errs := onEveryRank(cs, func(c *pipeComm) error {
		_, err := NewNodeShared(c, 1<<46, 8)
		return err
	})
	if errs[0] == nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "root could not share") {
		t.Fatalf("errors %v", errs)
	}
	endNode(t, cs, hub)
}

func TestNewNodeSharedNilComm(t *testing.T) {
	if _, err := NewNodeShared(nil, 1, 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NewNodeShared(nil) = %v", err)
	}
}

func init() { childRoles["nodeshared"] = childNodeShared }

// childRankCounts reads a node child's RANK and COUNTS (comma-separated),
// which startNode set.
func childRankCounts() (int, []int64, error) {
	rank, err := envInt("RANK")
	if err != nil {
		return 0, nil, err
	}
	var counts []int64
	for f := range strings.SplitSeq(os.Getenv("COUNTS"), ",") {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, nil, err
		}
		counts = append(counts, n)
	}
	return rank, counts, nil
}

// startNode runs child role as len(counts) processes, one a rank, each
// given its RANK, the COUNTS and env, their node communicator served by a
// hub here; it waits for every one.
func startNode(t *testing.T, role string, counts []int64, env map[string]string) {
	t.Helper()
	var list []string
	for _, n := range counts {
		list = append(list, strconv.FormatInt(n, 10))
	}
	var cs []*child
	var hub []hubConn
	for r := range counts {
		e := map[string]string{"RANK": strconv.Itoa(r), "COUNTS": strings.Join(list, ",")}
		maps.Copy(e, env)
		c := startChild(t, role, e, true)
		cs = append(cs, c)
		hub = append(hub, hubConn{c.from, c.to})
	}
	hubErr := serveHub(hub)
	for _, c := range cs {
		c.wait(t)
	}
	if hubErr != nil {
		t.Fatal(hubErr)
	}
}

// childNodeShared is one rank of a node of processes: RANK of SIZE, whose
// counts are COUNTS (comma-separated), talking to the hub on fd 3 and 4.
func childNodeShared() error {
	rank, counts, err := childRankCounts()
	if err != nil {
		return err
	}
	toHub, fromHub := childPipes()
	c := &pipeComm{rank: rank, size: len(counts), dev: NewHostDevice(), r: fromHub, w: toHub}
	ns, err := NewNodeSharedSlice[float64](c, int(counts[rank]))
	if err != nil {
		return err
	}
	if rank > 0 && c.dev.Stats().Opened != 1 {
		return fmt.Errorf("rank %d: %d views open", rank, c.dev.Stats().Opened)
	}
	err = fillAndCheck(ns, rank, counts)
	return errors.Join(err, ns.Close(), checkNothingLeft(c.dev))
}

func TestNodeSharedAcrossProcesses(t *testing.T) {
	startNode(t, "nodeshared", []int64{5000, 1, 0, 12345}, nil)
}

func init() { childRoles["nodeshared-two"] = childNodeSharedTwo }

// childNodeSharedTwo is one rank (RANK of len(COUNTS)) on device DEVICE of
// the two-buffer node test: two NodeShared buffers u and v alive at once;
// each rank writes its values into its part of u, then copies the next
// rank's part of u into its own part of v (memory both are views of, moved
// by this rank's device), opens u's handle twice more, and checks every
// element of u and v.
func childNodeSharedTwo() error {
	rank, counts, err := childRankCounts()
	if err != nil {
		return err
	}
	size := len(counts)
	dev, err := Open(os.Getenv("DEVICE"), 0)
	if err != nil {
		return err
	}
	toHub, fromHub := childPipes()
	c := &pipeComm{rank: rank, size: size, dev: dev, r: fromHub, w: toHub}
	u, err := NewNodeSharedSlice[float64](c, int(counts[rank]))
	if err != nil {
		return fmt.Errorf("u: %w", err)
	}
	next := (rank + 1) % size
	v, err := NewNodeSharedSlice[float64](c, int(counts[next]))
	if err != nil {
		return errors.Join(fmt.Errorf("v: %w", err), u.Close())
	}
	check := func() error {
		if u.All().Buffer().Overlaps(v.All().Buffer()) {
			return errors.New("u and v overlap")
		}
		if err := u.Mine().CopyFrom(rankValues(rank, int(counts[rank])), nil); err != nil {
			return err
		}
		if err := u.Barrier(); err != nil {
			return err
		}
		var off int
		for _, n := range counts[:next] {
			off += int(n)
		}
		theirs, err := u.All().Buffer().Slice(off*8, int(counts[next])*8)
		if err != nil {
			return err
		}
		if err := CopyN(v.Mine().Buffer(), theirs, theirs.Len(), nil); err != nil {
			return err
		}
		// Opened many times: u's handle again (a cached mapping on the
		// other ranks), as the same memory.
		h, err := u.All().Buffer().Export()
		if err != nil {
			return err
		}
		if want := os.Getenv("WANT_VMM") == "1"; h.VMM() != want {
			return fmt.Errorf("rank %d: u's handle VMM() = %v, want %v", rank, h.VMM(), want)
		}
		for range 2 {
			again, err := dev.OpenIPC(h)
			if err != nil {
				return fmt.Errorf("opening u again: %w", err)
			}
			if again.Addr() != u.All().Buffer().Addr() || !again.Overlaps(u.All().Buffer()) {
				again.CloseIPC()
				return fmt.Errorf("u opened again at %#x, u at %#x", again.Addr(), u.All().Buffer().Addr())
			}
			if err := again.CloseIPC(); err != nil {
				return err
			}
		}
		if err := v.Barrier(); err != nil {
			return err
		}
		var wantU, wantV []float64
		for r := range size {
			wantU = append(wantU, rankValues(r, int(counts[r]))...)
			nr := (r + 1) % size
			wantV = append(wantV, rankValues(nr, int(counts[nr]))...)
		}
		for name, pair := range map[string]struct {
			s    *NodeSharedSlice[float64]
			want []float64
		}{"u": {u, wantU}, "v": {v, wantV}} {
			got, err := pair.s.All().ToHost(nil)
			if err != nil {
				return err
			}
			if len(got) != len(pair.want) {
				return fmt.Errorf("rank %d: %s holds %d elements, want %d", rank, name, len(got), len(pair.want))
			}
			for i := range got {
				if got[i] != pair.want[i] {
					return fmt.Errorf("rank %d: element %d of %s = %v, want %v", rank, i, name, got[i], pair.want[i])
				}
			}
		}
		return v.Barrier() // nobody closes before everyone has checked
	}
	err = check()
	return errors.Join(err, v.Close(), u.Close(), checkNothingLeft(dev))
}

// nodeSharedTwoBuffers runs childNodeSharedTwo as len(counts) processes on
// device spec.
func nodeSharedTwoBuffers(t *testing.T, spec string, vmm bool, counts []int64) {
	t.Helper()
	startNode(t, "nodeshared-two", counts, map[string]string{"DEVICE": spec, "WANT_VMM": map[bool]string{true: "1"}[vmm]})
}

// TestNodeSharedTwoBuffersAcrossProcesses: the seed program's two
// node-shared arrays, alive at once in several processes, data moved
// between them, every element checked on every rank.
func TestNodeSharedTwoBuffersAcrossProcesses(t *testing.T) {
	nodeSharedTwoBuffers(t, "host", false, []int64{3000, 1, 0, 4321, 77})
}
