package devmem

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// Cross-process tests start copies of the test binary that run only
// TestChildProcess; childRoleEnv names what the child does, and its other
// settings travel in environment variables too.
const childRoleEnv = "GPUCOMM_DEVMEM_CHILD"

// childRoles are the helper programs a child can run; each returns an error
// for the parent to show, or nil for exit status 0.
var childRoles = map[string]func() error{}

func init() {
	childRoles["ipc-check-write"] = childCheckWrite
	childRoles["ipc-hold"] = childHold
	childRoles["ipc-open-fails"] = childOpenFails
	childRoles["ipc-cache"] = childCache
	childRoles["ipc-raw-open"] = childRawOpen
}

func TestChildProcess(t *testing.T) {
	role := os.Getenv(childRoleEnv)
	if role == "" {
		t.Skip("helper run by the cross-process tests in a child process")
	}
	fn, ok := childRoles[role]
	if !ok {
		t.Fatalf("unknown child role %q", role)
	}
	if err := fn(); err != nil {
		t.Fatalf("child %s: %v", role, err)
	}
}

// child is a started copy of the test binary.
type child struct {
	cmd *exec.Cmd
	out bytes.Buffer
	// to and from are the parent's ends of the child's fd 4 (it reads) and
	// fd 3 (it writes), when the child was started with pipes.
	to   *os.File
	from *bufio.Reader
}

// startChild runs role in a copy of the test binary with env added. With
// pipes, the child gets fd 3 to write to the parent and fd 4 to read from it.
func startChild(t *testing.T, role string, env map[string]string, pipes bool) *child {
	t.Helper()
	return startChildAs(t, os.Args[0], role, env, pipes, nil)
}

func startChildAs(t *testing.T, bin, role string, env map[string]string, pipes bool, cred *syscall.Credential) *child {
	t.Helper()
	c := &child{cmd: exec.Command(bin, "-test.run=^TestChildProcess$", "-test.count=1")}
	c.cmd.Env = append(os.Environ(), childRoleEnv+"="+role)
	for k, v := range env {
		c.cmd.Env = append(c.cmd.Env, k+"="+v)
	}
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if cred != nil {
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if pipes {
		upR, upW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		downR, downW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c.cmd.ExtraFiles = []*os.File{upW, downR}
		defer upW.Close()
		defer downR.Close()
		c.to, c.from = downW, bufio.NewReader(upR)
		t.Cleanup(func() { downW.Close(); upR.Close() })
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting child %s: %v", role, err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	return c
}

// wait waits for the child and fails the test unless it exited 0.
func (c *child) wait(t *testing.T) {
	t.Helper()
	if c.to != nil {
		c.to.Close()
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child %v: %v\n%s", c.cmd.Env[len(c.cmd.Env)-1], err, c.out.String())
	}
}

// childPipes are a child's ends: it writes lines to the parent on fd 3 and
// reads lines from it on fd 4.
func childPipes() (*os.File, *bufio.Reader) {
	return os.NewFile(3, "to-parent"), bufio.NewReader(os.NewFile(4, "from-parent"))
}

// fill returns n bytes of the pseudo-random stream seed names, the same in
// every process.
func fill(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func envInt(name string) (int, error) {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %v", name, os.Getenv(name), err)
	}
	return v, nil
}

func envHandle() (IPCHandle, error) {
	var h IPCHandle
	return h, h.UnmarshalText([]byte(os.Getenv("HANDLE")))
}

// mapped reports whether addr lies in a gpucomm memfd mapping of this
// process, by /proc/self/maps.
func mapped(addr uintptr) (bool, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(maps)) {
		if !strings.Contains(line, "memfd:gpucomm") {
			continue
		}
		lo, hi, _ := strings.Cut(strings.Fields(line)[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && uint64(addr) >= a && uint64(addr) < b {
			return true, nil
		}
	}
	return false, nil
}

// childCheckWrite opens HANDLE, checks that it holds bytes [off, off+len) of
// fill(SEED, TOTAL) (only view bytes [CLO, CHI) when those are set, as other
// children write the rest), writes fill(WSEED, WLEN) at WOFF of the view and
// closes.
func childCheckWrite() error {
	h, err := envHandle()
	if err != nil {
		return err
	}
	var v [5]int
	for i, name := range []string{"SEED", "TOTAL", "WSEED", "WOFF", "WLEN"} {
		if v[i], err = envInt(name); err != nil {
			return err
		}
	}
	seed, total, wseed, woff, wlen := v[0], v[1], v[2], v[3], v[4]
	d := NewHostDevice()
	buf, err := d.OpenIPC(h)
	if err != nil {
		return err
	}
	if got := d.Stats().Opened; got != 1 {
		return fmt.Errorf("Stats().Opened = %d after one open, want 1", got)
	}
	if buf.Pinned() != h.Pinned() {
		return fmt.Errorf("opened view Pinned() = %v, handle says %v", buf.Pinned(), h.Pinned())
	}
	got, _ := buf.Bytes()
	want := fill(uint64(seed), total)[h.Offset() : h.Offset()+h.Size()]
	if len(got) != len(want) {
		return fmt.Errorf("opened %d bytes, want %d", len(got), len(want))
	}
	lo, hi := 0, len(want)
	if os.Getenv("CHI") != "" {
		if lo, err = envInt("CLO"); err != nil {
			return err
		}
		if hi, err = envInt("CHI"); err != nil {
			return err
		}
	}
	for i := lo; i < hi; i++ {
		if got[i] != want[i] {
			return fmt.Errorf("byte %d of the view = %#x, want %#x", i, got[i], want[i])
		}
	}
	part, err := buf.Slice(woff, wlen)
	if err != nil {
		return err
	}
	if err := CopyFromHost(part, fill(uint64(wseed), wlen), nil); err != nil {
		return err
	}
	if err := buf.CloseIPC(); err != nil {
		return err
	}
	if got := d.Stats().Opened; got != 0 {
		return fmt.Errorf("Stats().Opened = %d after close, want 0", got)
	}
	return nil
}

// childHold opens HANDLE, says "opened", waits for the parent to free its
// buffer, then checks the bytes are still fill(SEED, SIZE), and that closing
// unmaps them.
func childHold() error {
	toParent, fromParent := childPipes()
	h, err := envHandle()
	if err != nil {
		return err
	}
	seed, err := envInt("SEED")
	if err != nil {
		return err
	}
	d := NewHostDevice()
	buf, err := d.OpenIPC(h)
	if err != nil {
		return err
	}
	fmt.Fprintln(toParent, "opened")
	if line, err := fromParent.ReadString('\n'); err != nil || line != "freed\n" {
		return fmt.Errorf("waiting for the parent: %q, %v", line, err)
	}
	got, _ := buf.Bytes()
	if want := fill(uint64(seed), h.Size()); !bytes.Equal(got, want) {
		return fmt.Errorf("the bytes changed after the exporter freed its buffer")
	}
	addr := buf.Addr()
	if ok, err := mapped(addr); err != nil || !ok {
		return fmt.Errorf("view not in /proc/self/maps while open: %v", err)
	}
	if err := buf.CloseIPC(); err != nil {
		return err
	}
	if ok, err := mapped(addr); err != nil || ok {
		return fmt.Errorf("view still mapped after CloseIPC (err %v)", err)
	}
	return nil
}

// childOpenFails expects HANDLE to be refused with ErrBadHandle, leaving
// nothing open.
func childOpenFails() error {
	h, err := envHandle()
	if err != nil {
		return err
	}
	d := NewHostDevice()
	buf, err := d.OpenIPC(h)
	if !errors.Is(err, ErrBadHandle) {
		return fmt.Errorf("OpenIPC = %v, %v; want an error wrapping ErrBadHandle", buf, err)
	}
	if st := d.Stats(); st.Opened != 0 || len(mappings) != 0 {
		return fmt.Errorf("after a refused open: Opened %d, %d mappings", st.Opened, len(mappings))
	}
	return nil
}

// childCache opens HANDLE twice and a sub-range of it once: one mapping,
// three views; the mapping goes with the last close.
func childCache() error {
	h, err := envHandle()
	if err != nil {
		return err
	}
	d := NewHostDevice()
	a, err := d.OpenIPC(h)
	if err != nil {
		return err
	}
	b, err := d.OpenIPC(h)
	if err != nil {
		return err
	}
	sub, err := b.Slice(64, 128)
	if err != nil {
		return err
	}
	subH, err := sub.Export() // re-exporting a view names the same memory
	if err != nil {
		return err
	}
	c, err := d.OpenIPC(subH)
	if err != nil {
		return err
	}
	if a.Addr() != b.Addr() || c.Addr() != a.Addr()+64 || c.Len() != 128 {
		return fmt.Errorf("views at %#x, %#x, %#x (len %d): want one mapping", a.Addr(), b.Addr(), c.Addr(), c.Len())
	}
	if len(mappings) != 1 || d.Stats().Opened != 3 {
		return fmt.Errorf("%d mappings, %d views open; want 1 and 3", len(mappings), d.Stats().Opened)
	}
	if a.Same(b) {
		return fmt.Errorf("two opens returned the same view: closing one would close both")
	}
	for i, v := range []Buffer{a, c} {
		if err := v.CloseIPC(); err != nil {
			return err
		}
		if ok, _ := mapped(a.Addr()); !ok {
			return fmt.Errorf("mapping gone after closing %d of 3 views", i+1)
		}
	}
	if err := a.CloseIPC(); !errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("second CloseIPC of a view = %v, want ErrInvalidArgument", err)
	}
	if err := b.CloseIPC(); err != nil {
		return err
	}
	if ok, _ := mapped(a.Addr()); ok || len(mappings) != 0 || d.Stats().Opened != 0 {
		return fmt.Errorf("after the last close: mapped %v, %d mappings, Opened %d", ok, len(mappings), d.Stats().Opened)
	}
	return nil
}

// childRawOpen tries to open PROCFD (a /proc/PID/fd/N path) directly, as a
// process of another user would, and expects the kernel to refuse.
func childRawOpen() error {
	f, err := os.OpenFile(os.Getenv("PROCFD"), os.O_RDWR, 0)
	if err == nil {
		f.Close()
		return fmt.Errorf("uid %d opened %s", os.Geteuid(), os.Getenv("PROCFD"))
	}
	if !errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("open as uid %d: %v, want a permission error", os.Geteuid(), err)
	}
	return nil
}

// exportFilled allocates n bytes on d filled with fill(seed, n).
func exportFilled(t *testing.T, d *Device, seed uint64, n int) Buffer {
	t.Helper()
	b, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := CopyFromHost(b, fill(seed, n), nil); err != nil {
		t.Fatal(err)
	}
	return b
}

func handleText(t *testing.T, h IPCHandle) string {
	t.Helper()
	txt, err := h.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	return string(txt)
}

// childWritesView has a child open h, a view of buf (which holds
// fill(seed, total)), check that it reads the view's bytes, and write
// fill(wseed, wlen) at byte woff of it; then buf must hold both.
func childWritesView(t *testing.T, buf Buffer, h IPCHandle, seed uint64, total, woff, wlen int, wseed uint64) {
	t.Helper()
	c := startChild(t, "ipc-check-write", map[string]string{
		"HANDLE": handleText(t, h), "SEED": strconv.FormatUint(seed, 10), "TOTAL": strconv.Itoa(total),
		"WSEED": strconv.FormatUint(wseed, 10), "WOFF": strconv.Itoa(woff), "WLEN": strconv.Itoa(wlen),
	}, false)
	c.wait(t)
	want := fill(seed, total)
	copy(want[h.Offset()+woff:], fill(wseed, wlen))
	got, _ := buf.Bytes()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("byte %d = %#x after the child wrote, want %#x", i, got[i], want[i])
		}
	}
}

func TestIPCChildReadsViewAndWritesIntoIt(t *testing.T) {
	const total, seed = 1<<20 + 13, 11
	d := NewHostDevice()
	buf := exportFilled(t, d, seed, total)
	defer buf.Free()
	view, err := buf.Slice(4096+7, 300_001)
	if err != nil {
		t.Fatal(err)
	}
	h, err := view.Export()
	if err != nil {
		t.Fatal(err)
	}
	if h.Offset() != 4096+7 || h.Size() != 300_001 || h.Kind() != Host || h.PID() != os.Getpid() || h.DeviceUUID() != d.UUID() {
		t.Fatalf("handle says %v, uuid %x", h, h.DeviceUUID())
	}
	childWritesView(t, buf, h, seed, total, 1000, 5003, 77)
}

func TestIPCFourChildrenWriteDisjointSlices(t *testing.T) {
	const total, seed, chunk, gap = 4 * 65536, 5, 65536, 100
	d := NewHostDevice()
	buf := exportFilled(t, d, seed, total)
	defer buf.Free()
	h, err := buf.Export()
	if err != nil {
		t.Fatal(err)
	}
	txt := handleText(t, h)
	var cs []*child
	for i := range 4 {
		// Each child writes its chunk less a gap at both ends, which must
		// keep the parent's bytes.
		cs = append(cs, startChild(t, "ipc-check-write", map[string]string{
			"HANDLE": txt, "SEED": strconv.Itoa(seed), "TOTAL": strconv.Itoa(total),
			"WSEED": strconv.Itoa(1000 + i), "WOFF": strconv.Itoa(i*chunk + gap), "WLEN": strconv.Itoa(chunk - 2*gap),
			"CLO": strconv.Itoa(i * chunk), "CHI": strconv.Itoa((i + 1) * chunk),
		}, false))
	}
	for _, c := range cs {
		c.wait(t)
	}
	want := fill(seed, total)
	for i := range 4 {
		copy(want[i*chunk+gap:], fill(uint64(1000+i), chunk-2*gap))
	}
	got, _ := buf.Bytes()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("byte %d (chunk %d) = %#x, want %#x", i, i/chunk, got[i], want[i])
		}
	}
}

func TestIPCOpenedMemoryOutlivesExporterFree(t *testing.T) {
	const n, seed = 8192, 3
	d := NewHostDevice()
	buf := exportFilled(t, d, seed, n)
	h, err := buf.Export()
	if err != nil {
		t.Fatal(err)
	}
	c := startChild(t, "ipc-hold", map[string]string{"HANDLE": handleText(t, h), "SEED": strconv.Itoa(seed)}, true)
	if line, err := c.from.ReadString('\n'); err != nil || line != "opened\n" {
		c.cmd.Wait()
		t.Fatalf("child said %q, %v\n%s", line, err, c.out.String())
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	if ok, err := mapped(buf.Addr()); err != nil || ok {
		t.Fatalf("exporter's mapping still there after Free (err %v)", err)
	}
	fmt.Fprintln(c.to, "freed")
	c.wait(t)
}

func TestIPCHandleOfFreedBufferIsRefused(t *testing.T) {
	d := NewHostDevice()
	buf := exportFilled(t, d, 1, 4096)
	h, err := buf.Export()
	if err != nil {
		t.Fatal(err)
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	// Whatever file takes the descriptor number next must not be mapped.
	other := exportFilled(t, d, 2, 4096)
	defer other.Free()
	startChild(t, "ipc-open-fails", map[string]string{"HANDLE": handleText(t, h)}, false).wait(t)
	if _, err := d.OpenIPC(h); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("OpenIPC in the exporter after Free = %v, want ErrBadHandle", err)
	}
}

func TestIPCOpenIsCachedPerProcess(t *testing.T) {
	d := NewHostDevice()
	buf := exportFilled(t, d, 9, 4096)
	defer buf.Free()
	h, err := buf.Export()
	if err != nil {
		t.Fatal(err)
	}
	startChild(t, "ipc-cache", map[string]string{"HANDLE": handleText(t, h)}, false).wait(t)
}

func TestIPCOtherUserCannotOpen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a child as another user")
	}
	d := NewHostDevice()
	buf := exportFilled(t, d, 4, 4096)
	defer buf.Free()
	if _, err := buf.Export(); err != nil { // export sets the memfd's mode
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(buf.a.shared.fd, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != 0o600 {
		t.Errorf("exported memfd mode %o, want 600", st.Mode&0o777)
	}
	// The child runs as nobody, so it needs a copy of the binary it may run.
	dir, err := os.MkdirTemp("", "gpucomm-ipc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "devmem.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	procfd := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), buf.a.shared.fd)
	c := startChildAs(t, bin, "ipc-raw-open", map[string]string{"PROCFD": procfd}, false, &syscall.Credential{Uid: 65534, Gid: 65534})
	c.wait(t)
}

func TestIPCOpenInExporterIsOriginalMemory(t *testing.T) {
	d, peer := NewHostDevice(), NewHostDevice()
	buf := exportFilled(t, d, 21, 4096)
	defer buf.Free()
	view, err := buf.Slice(100, 200)
	if err != nil {
		t.Fatal(err)
	}
	h, err := view.Export()
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []*Device{d, peer} {
		got, err := on.OpenIPC(h)
		if err != nil {
			t.Fatal(err)
		}
		if got.Addr() != buf.Addr()+100 || got.Len() != 200 || got.Device() != on {
			t.Fatalf("open on %v: %d bytes at %#x on %v; want 200 at %#x", on, got.Len(), got.Addr(), got.Device(), buf.Addr()+100)
		}
		if err := Memset(got, byte(on.Ordinal()), nil); err != nil {
			t.Fatal(err)
		}
		b, _ := buf.Bytes()
		for i, want := range fill(21, 4096) {
			if 100 <= i && i < 300 {
				want = byte(on.Ordinal())
			}
			if b[i] != want {
				t.Fatalf("open on %v: exporter's byte %d = %#x, want %#x", on, i, b[i], want)
			}
		}
		if on.Stats().Opened != 1 {
			t.Fatalf("Opened = %d on %v", on.Stats().Opened, on)
		}
		if err := got.CloseIPC(); err != nil {
			t.Fatal(err)
		}
		if on.Stats().Opened != 0 || len(views) != 0 {
			t.Fatalf("after close: Opened %d, %d views", on.Stats().Opened, len(views))
		}
	}
}

func TestIPCInProcessViewKeepsMemoryAfterFree(t *testing.T) {
	d, peer := NewHostDevice(), NewHostDevice()
	buf := exportFilled(t, d, 8, 4096)
	h, err := buf.Export()
	if err != nil {
		t.Fatal(err)
	}
	v1, err := peer.OpenIPC(h)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := peer.OpenIPC(h)
	if err != nil {
		t.Fatal(err)
	}
	if v1.Addr() != v2.Addr() || peer.Stats().Opened != 2 {
		t.Fatalf("two opens: %#x and %#x, Opened %d", v1.Addr(), v2.Addr(), peer.Stats().Opened)
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Buffers != 0 || st.Bytes != 0 {
		t.Fatalf("exporter's stats after Free: %+v", st)
	}
	if _, err := peer.OpenIPC(h); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("open after the owner freed = %v, want ErrBadHandle", err)
	}
	if err := v1.CloseIPC(); err != nil {
		t.Fatal(err)
	}
	got, _ := v2.Bytes()
	if !bytes.Equal(got, fill(8, 4096)) {
		t.Fatal("memory changed while a view was still open")
	}
	if ok, _ := mapped(v2.Addr()); !ok {
		t.Fatal("memory unmapped while a view was still open")
	}
	if err := v2.CloseIPC(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := mapped(v2.Addr()); ok {
		t.Fatal("memory still mapped after the owner freed it and the last view closed")
	}
	if peer.Stats().Opened != 0 || len(exports) != 0 {
		t.Fatalf("Opened %d, %d exports left", peer.Stats().Opened, len(exports))
	}
}

// exportOpen exports buf and opens the handle on d.
func exportOpen(t *testing.T, d *Device, buf Buffer) (IPCHandle, Buffer) {
	t.Helper()
	h, err := buf.Export()
	if err != nil {
		t.Fatal(err)
	}
	v, err := d.OpenIPC(h)
	if err != nil {
		t.Fatal(err)
	}
	return h, v
}

func TestIPCMisuseIsAnError(t *testing.T) {
	d := NewHostDevice()
	buf := exportFilled(t, d, 1, 256)
	defer buf.Free()
	h, v := exportOpen(t, d, buf)
	sub, _ := v.Slice(0, 10)
	if err := sub.CloseIPC(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("CloseIPC of part of a view = %v", err)
	}
	if err := v.Free(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Free of an opened view = %v", err)
	}
	if err := buf.CloseIPC(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("CloseIPC of an allocation = %v", err)
	}
	if err := (Buffer{}).CloseIPC(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("CloseIPC of the zero Buffer = %v", err)
	}
	if !v.IsOpenedIPC() || buf.IsOpenedIPC() {
		t.Errorf("IsOpenedIPC: view %v, allocation %v", v.IsOpenedIPC(), buf.IsOpenedIPC())
	}
	if err := v.CloseIPC(); err != nil {
		t.Fatal(err)
	}
	if err := v.CloseIPC(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("second CloseIPC = %v", err)
	}
	if err := CopyToHost(make([]byte, 10), v, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("copy out of a closed view = %v", err)
	}
	if _, err := (*Device)(nil).OpenIPC(h); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("OpenIPC on a nil device = %v", err)
	}
	if d.Stats().Opened != 0 {
		t.Errorf("Opened = %d", d.Stats().Opened)
	}
}

func TestExportRefusesWhatCannotBeShared(t *testing.T) {
	d := NewHostDevice()
	pinned, err := d.AllocPinned(64)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Free()
	empty, err := d.Alloc(0)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Free()
	freed, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	freed.Free()
	for name, b := range map[string]Buffer{"zero Buffer": {}, "pinned": pinned, "empty allocation": empty, "freed": freed} {
		if h, err := b.Export(); !errors.Is(err, ErrInvalidArgument) || !h.IsZero() {
			t.Errorf("Export of %s = %v, %v; want ErrInvalidArgument", name, h, err)
		}
	}
	if len(exports) != 0 {
		t.Errorf("%d exports recorded after refused exports", len(exports))
	}
}

// countingDriver is the host driver with its IPC opens counted, to show
// that bad handles are refused before the driver is asked.
type countingDriver struct {
	*hostDriver
	opens atomic.Int64
}

func (c *countingDriver) ipcOpen(h [64]byte, fd int, need int) (*allocation, error) {
	c.opens.Add(1)
	return c.hostDriver.ipcOpen(h, fd, need)
}

func newCountingDevice() (*Device, *countingDriver) {
	d := NewHostDevice()
	cd := &countingDriver{hostDriver: &hostDriver{dev: d}}
	d.drv = cd
	return d, cd
}

// reseal re-encodes a handle after change, with a valid checksum.
func reseal(t *testing.T, h IPCHandle, change func(*handleFields)) IPCHandle {
	t.Helper()
	f, err := decodeHandle(h.raw[:])
	if err != nil {
		t.Fatal(err)
	}
	change(&f)
	return f.seal()
}

func TestOpenIPCRefusesBadHandlesBeforeTheDriver(t *testing.T) {
	src := NewHostDevice()
	buf := exportFilled(t, src, 6, 512)
	defer buf.Free()
	good, err := buf.Export()
	if err != nil {
		t.Fatal(err)
	}
	// As if a process that does not exist (past any pid_max) exported it,
	// so that only the checks stand between the handle and the driver.
	foreign := reseal(t, good, func(f *handleFields) {
		f.pid = math.MaxInt32 - 1
		binary.LittleEndian.PutUint32(f.drv[0:], f.pid) // the host driver's own copy
	})
	flip := func(h IPCHandle, at int) IPCHandle { h.raw[at] ^= 0x40; return h }
	cases := map[string]IPCHandle{
		"zero handle":           {},
		"flipped checksum byte": flip(foreign, hoCRC+1),
		"flipped driver byte":   flip(foreign, hoDriver+3),
		"flipped size byte":     flip(foreign, hoSize),
		"other boot":            reseal(t, foreign, func(f *handleFields) { f.node.boot[0] ^= 1 }),
		"other host":            reseal(t, foreign, func(f *handleFields) { f.node.host = [64]byte{'e', 'l', 's', 'e'} }),
		"cuda kind":             reseal(t, foreign, func(f *handleFields) { f.kind = CUDA }),
		"unknown kind":          reseal(t, foreign, func(f *handleFields) { f.kind = 9 }),
		"older version": func() IPCHandle {
			h := foreign
			binary.LittleEndian.PutUint16(h.raw[hoVersion:], handleVersion-1)
			binary.LittleEndian.PutUint32(h.raw[hoCRC:], crc32.Checksum(h.raw[:hoCRC], castagnoli))
			return h
		}(),
		"newer version": func() IPCHandle {
			h := foreign
			binary.LittleEndian.PutUint16(h.raw[hoVersion:], handleVersion+1)
			binary.LittleEndian.PutUint32(h.raw[hoCRC:], crc32.Checksum(h.raw[:hoCRC], castagnoli))
			return h
		}(),
		"range past the end":           reseal(t, foreign, func(f *handleFields) { f.off = 1 << 62; f.size = 1 << 62 }),
		"VMM flag on host memory":      reseal(t, foreign, func(f *handleFields) { f.vmm = true }),
		"service token on host memory": reseal(t, foreign, func(f *handleFields) { f.token = 0x5eed }),
		"unknown flags": func() IPCHandle {
			h := foreign
			h.raw[hoFlags] = flagPinned | flagVMM
			binary.LittleEndian.PutUint32(h.raw[hoCRC:], crc32.Checksum(h.raw[:hoCRC], castagnoli))
			return h
		}(),
		"this process, unknown allocation": reseal(t, good, func(f *handleFields) { f.drv[40] = 1 }),
		"this process, range past the end": reseal(t, good, func(f *handleFields) { f.size = 513 }),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			d, cd := newCountingDevice()
			b, err := d.OpenIPC(h)
			if !errors.Is(err, ErrBadHandle) || !b.IsZero() {
				t.Fatalf("OpenIPC = %v, %v; want an error wrapping ErrBadHandle", b, err)
			}
			if n := cd.opens.Load(); n != 0 {
				t.Errorf("the driver was asked to open %d times", n)
			}
			if st := d.Stats(); st.Opened != 0 || len(views) != 0 || len(mappings) != 0 {
				t.Errorf("after a refused open: Opened %d, %d views, %d mappings", st.Opened, len(views), len(mappings))
			}
		})
	}
	got, _ := buf.Bytes()
	if !bytes.Equal(got, fill(6, 512)) {
		t.Error("the exported buffer changed")
	}
	// The foreign handle itself passes the checks and reaches the driver,
	// which finds no such process: the checks above are what refused the
	// others.
	d, cd := newCountingDevice()
	if _, err := d.OpenIPC(foreign); !errors.Is(err, ErrBadHandle) || cd.opens.Load() != 1 {
		t.Errorf("foreign handle: %v after %d driver opens; want the driver asked once and ErrBadHandle", err, cd.opens.Load())
	}
}

// cudaHandle is a well-formed handle of CUDA memory of process pid: legacy
// (random driver bytes) or VMM.
func cudaHandle(t testing.TB, pid uint32, vmm bool) handleFields {
	node, err := localNode()
	if err != nil {
		t.Fatal(err)
	}
	f := handleFields{kind: CUDA, vmm: vmm, pid: pid, token: 0x5eed, size: 4096, node: node}
	if vmm {
		f.drv = vmmIPC{id: 3, size: 1 << 21}.bytes()
	} else {
		copy(f.drv[:], fill(99, 64))
	}
	return f
}

// TestVMMHandleBytesAreChecked: a VMM handle whose driver bytes or range do
// not make sense, or a GPU handle without a service token, is refused by
// UnmarshalBinary (and so by OpenIPC) with ErrBadHandle.
func TestVMMHandleBytesAreChecked(t *testing.T) {
	good := cudaHandle(t, 12345, true)
	if gh := good.seal(); gh.VMM() == false {
		t.Fatal("VMM() false on a VMM handle")
	} else if _, err := decodeHandle(gh.raw[:]); err != nil {
		t.Fatalf("a well-formed VMM handle: %v", err)
	}
	cases := map[string]func(f *handleFields){
		"allocation id 0":         func(f *handleFields) { f.drv = vmmIPC{id: 0, size: 1 << 21}.bytes() },
		"size 0":                  func(f *handleFields) { f.drv = vmmIPC{id: 3, size: 0}.bytes() },
		"size past MaxInt":        func(f *handleFields) { f.drv = vmmIPC{id: 3, size: 1 << 63}.bytes() },
		"trailing driver bytes":   func(f *handleFields) { f.drv[40] = 1 },
		"range past the mapping":  func(f *handleFields) { f.off = 1 << 21; f.size = 1 },
		"no service token":        func(f *handleFields) { f.token = 0 },
		"legacy, no token":        func(f *handleFields) { f.vmm = false; f.token = 0 },
		"VMM flag on pinned host": func(f *handleFields) { f.kind = Host },
	}
	for name, change := range cases {
		f := good
		change(&f)
		h := f.seal()
		var got IPCHandle
		if err := got.UnmarshalBinary(h.raw[:]); !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: UnmarshalBinary = %v, want ErrBadHandle", name, err)
		}
		if _, err := NewHostDevice().OpenIPC(h); !errors.Is(err, ErrBadHandle) {
			t.Errorf("%s: OpenIPC = %v, want ErrBadHandle", name, err)
		}
	}
}

func TestHandleMarshalRoundTrip(t *testing.T) {
	d := NewHostDevice()
	buf := exportFilled(t, d, 2, 1000)
	defer buf.Free()
	view, _ := buf.Slice(10, 20)
	h, err := view.Export()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := h.MarshalBinary()
	if err != nil || len(bin) != HandleSize {
		t.Fatalf("MarshalBinary = %d bytes, %v", len(bin), err)
	}
	var back IPCHandle
	if err := back.UnmarshalBinary(bin); err != nil || back != h {
		t.Fatalf("UnmarshalBinary: %v, equal %v", err, back == h)
	}
	txt, err := h.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var fromText IPCHandle
	if err := fromText.UnmarshalText(txt); err != nil || fromText != h {
		t.Fatalf("UnmarshalText: %v, equal %v", err, fromText == h)
	}
	host, _ := os.Hostname()
	if h.Node() != host || h.Size() != 20 || h.Offset() != 10 {
		t.Errorf("node %q size %d offset %d", h.Node(), h.Size(), h.Offset())
	}
	// A refused unmarshal leaves the handle as it was.
	for _, bad := range [][]byte{nil, bin[:HandleSize-1], append(bytes.Clone(bin), 0), bytes.Repeat([]byte{0xff}, HandleSize)} {
		keep := back
		if err := back.UnmarshalBinary(bad); !errors.Is(err, ErrBadHandle) || back != keep {
			t.Errorf("UnmarshalBinary of %d bad bytes: %v, handle changed %v", len(bad), err, back != keep)
		}
	}
	if err := back.UnmarshalText([]byte("zz")); !errors.Is(err, ErrBadHandle) {
		t.Errorf("UnmarshalText of non-hex: %v", err)
	}
	if _, err := (IPCHandle{}).MarshalBinary(); !errors.Is(err, ErrBadHandle) {
		t.Errorf("MarshalBinary of the zero handle: %v", err)
	}
}

// seedHandles adds to f's corpus the handle of a live host buffer of size
// bytes (freed when f ends) and a legacy and a VMM CUDA handle of process
// pid, and gives the host handle's bytes.
func seedHandles(f *testing.F, size int, pid uint32) []byte {
	f.Helper()
	buf, err := NewHostDevice().Alloc(size)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { buf.Free() })
	h, err := buf.Export()
	if err != nil {
		f.Fatal(err)
	}
	good, _ := h.MarshalBinary()
	f.Add(good)
	for _, vmm := range []bool{false, true} {
		hf := cudaHandle(f, pid, vmm)
		c := hf.seal()
		f.Add(c.raw[:])
	}
	return good
}

func FuzzUnmarshalHandle(f *testing.F) {
	good := seedHandles(f, 64, 4242)
	f.Add([]byte{})
	f.Add(make([]byte, HandleSize))
	f.Add(good[:hoCRC])
	flipped := bytes.Clone(good)
	flipped[hoCRC] ^= 1
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, b []byte) {
		try := func(b []byte) {
			var h IPCHandle
			if err := h.UnmarshalBinary(b); err != nil {
				if !errors.Is(err, ErrBadHandle) {
					t.Fatalf("UnmarshalBinary error %v does not wrap ErrBadHandle", err)
				}
				if !h.IsZero() {
					t.Fatal("a refused UnmarshalBinary changed the handle")
				}
				return
			}
			again, err := h.MarshalBinary()
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("re-marshalled %x, %v; want %x", again, err, b)
			}
			_ = h.String()
		}
		try(b)
		// The mutator seldom hits a valid checksum; fixing it reaches the
		// checks of the fields behind it.
		if len(b) == HandleSize {
			fixed := bytes.Clone(b)
			binary.LittleEndian.PutUint32(fixed[hoCRC:], crc32.Checksum(fixed[:hoCRC], castagnoli))
			try(fixed)
		}
	})
}

// A process exports a buffer; another process of the node (here the same
// one, which gets the original memory back) opens the handle it was sent.
func ExampleDevice_OpenIPC() {
	d := NewHostDevice()
	buf, _ := d.Alloc(16)
	defer buf.Free()
	CopyFromHost(buf, []byte("shared with peer"), nil)

	h, _ := buf.Export()
	wire, _ := h.MarshalBinary() // send these bytes to the peer

	var got IPCHandle
	if err := got.UnmarshalBinary(wire); err != nil {
		fmt.Println(err)
		return
	}
	peer := NewHostDevice()
	view, err := peer.OpenIPC(got)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := view.Bytes()
	fmt.Printf("%s (%d views open)\n", b, peer.Stats().Opened)
	view.CloseIPC()
	fmt.Println(peer.Stats().Opened, "views open")
	// Output:
	// shared with peer (1 views open)
	// 0 views open
}

// FuzzOpenIPC hands OpenIPC whatever passes UnmarshalBinary, checksum
// fixed: it must refuse with ErrBadHandle (or open what a handle really
// names, and close it), never panic or hang.
func FuzzOpenIPC(f *testing.F) {
	seedHandles(f, 4096, uint32(os.Getpid()))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != HandleSize {
			return
		}
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint32(b[hoCRC:], crc32.Checksum(b[:hoCRC], castagnoli))
		var h IPCHandle
		if h.UnmarshalBinary(b) != nil {
			return
		}
		v, err := NewHostDevice().OpenIPC(h)
		if err == nil {
			if err := v.CloseIPC(); err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, ErrBadHandle) {
			t.Fatalf("OpenIPC of %v: %v, want ErrBadHandle", h, err)
		}
	})
}
