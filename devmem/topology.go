package devmem

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"golang.org/x/sys/unix"
)

// Topo is this node's GPUs as NVML sees them and how each pair is connected,
// the facts `nvidia-smi topo -m` prints.
type Topo struct {
	DriverVersion string
	Devices       []TopoDevice
	// Links[i][j] is how GPU i reaches GPU j; Links[i][i] is PathSelf.
	Links [][]Link
}

// TopoDevice is one GPU.
type TopoDevice struct {
	Index       int    // NVML's index
	Name        string // "NVIDIA H200"
	UUID        string // "GPU-…", as NVML and nvidia-smi print it
	PCIBusID    string // "00000000:19:00.0"
	MemoryTotal uint64 // bytes
	NUMANode    int    // the NUMA node nearest the GPU; -1 when unknown
	GPUNUMAID   int    // the GPU memory's own NUMA node (coherent GPUs); -1 when it has none
	CPUs        []int  // the cores nearest the GPU, ascending
}

// Path is how far apart two GPUs are over PCIe.
type Path int

const (
	PathUnknown Path = iota
	PathSelf         // the same GPU
	PathPIX          // at most one PCIe bridge
	PathPXB          // several PCIe bridges, no host bridge
	PathPHB          // a PCIe host bridge (the CPU)
	PathNode         // host bridges within one NUMA node
	PathSys          // the interconnect between NUMA nodes (QPI/UPI)
)

var pathNames = [...]string{"N/A", "X", "PIX", "PXB", "PHB", "NODE", "SYS"}

func (p Path) String() string {
	if p < 0 || int(p) >= len(pathNames) {
		return "Path(" + strconv.Itoa(int(p)) + ")"
	}
	return pathNames[p]
}

// Link is how one GPU reaches another: NVLinks bonded links when it is more
// than zero, else the PCIe Path.
type Link struct {
	Path    Path
	NVLinks int
}

// String is the cell `nvidia-smi topo -m` prints: X, NV#, PIX, ..., SYS.
func (l Link) String() string {
	if l.Path != PathSelf && l.NVLinks > 0 {
		return "NV" + strconv.Itoa(l.NVLinks)
	}
	return l.Path.String()
}

// nvmlQuery is what Topology asks NVML; the cgo build answers through
// go-nvml, and tests through a fake.
type nvmlQuery interface {
	driverVersion() (string, error)
	deviceCount() (int, error)
	// device describes GPU i (its Index is filled in by the caller).
	device(i int) (TopoDevice, error)
	// commonAncestor is the PCIe path between GPUs i and j.
	commonAncestor(i, j int) (Path, error)
	// nvlinkPeers lists what GPU i's active NVLinks lead to, one per link.
	nvlinkPeers(i int) ([]nvlinkPeer, error)
	shutdown() error
}

// nvlinkPeer is the far end of one NVLink: a GPU's bus id, or an NVSwitch.
type nvlinkPeer struct {
	busID    string
	toSwitch bool
}

// Topology reads this node's GPUs and their connections from NVML. Without
// NVML (no NVIDIA driver, or a build without cgo) it returns an error
// wrapping ErrLibraryNotFound.
func Topology() (*Topo, error) {
	q, err := openNVML()
	if err != nil {
		return nil, err
	}
	t, err := buildTopo(q)
	return t, errors.Join(err, q.shutdown())
}

func buildTopo(q nvmlQuery) (*Topo, error) {
	t := &Topo{}
	var err error
	if t.DriverVersion, err = q.driverVersion(); err != nil {
		return nil, err
	}
	n, err := q.deviceCount()
	if err != nil {
		return nil, err
	}
	byBus := map[string]int{}
	for i := range n {
		d, err := q.device(i)
		if err != nil {
			return nil, err
		}
		d.Index = i
		if d.NUMANode < 0 && d.PCIBusID != "" {
			d.NUMANode = numaNodeOf(d.PCIBusID)
		}
		t.Devices = append(t.Devices, d)
		byBus[normBusID(d.PCIBusID)] = i
	}
	// Links straight to another GPU count for that pair; links into NVSwitches
	// reach every GPU that also has switch links, as many as the fewer side.
	direct := make([][]int, n)
	toSwitch := make([]int, n)
	for i := range n {
		direct[i] = make([]int, n)
		peers, err := q.nvlinkPeers(i)
		if err != nil {
			continue // no NVLink on this GPU: NVML says "not supported"
		}
		for _, p := range peers {
			if p.toSwitch {
				toSwitch[i]++
			} else if j, ok := byBus[normBusID(p.busID)]; ok && j != i {
				direct[i][j]++
			}
		}
	}
	t.Links = make([][]Link, n)
	for i := range n {
		t.Links[i] = make([]Link, n)
		for j := range n {
			if i == j {
				t.Links[i][j] = Link{Path: PathSelf}
				continue
			}
			l := Link{NVLinks: max(direct[i][j], direct[j][i]) + min(toSwitch[i], toSwitch[j])}
			if p, err := q.commonAncestor(i, j); err == nil {
				l.Path = p
			}
			t.Links[i][j] = l
		}
	}
	return t, nil
}

// normBusID makes NVML's "00000000:19:00.0" and sysfs's "0000:19:00.0" the
// same key.
func normBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok {
		return id
	}
	if len(dom) > 4 {
		dom = dom[len(dom)-4:]
	}
	return dom + ":" + rest
}

// numaNodeOf reads the NUMA node of a PCI device from sysfs, -1 if unknown.
func numaNodeOf(busID string) int {
	b, err := os.ReadFile("/sys/bus/pci/devices/" + normBusID(busID) + "/numa_node")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// cpusOfMask lists the CPUs set in an affinity mask of 64-bit words, CPU
// 64*w+b being bit b of word w, as NVML returns it.
func cpusOfMask(words []uint64) []int {
	var cpus []int
	for w, bits := range words {
		for b := range 64 {
			if bits&(1<<b) != 0 {
				cpus = append(cpus, 64*w+b)
			}
		}
	}
	return cpus
}

// FormatCPUList writes CPUs as Linux cpu lists do: "0-15,32-47", in
// order and once each. A negative number names no CPU and is left out
// ("-3--1" would be a list no parser reads back, ParseCPUList included).
func FormatCPUList(cpus []int) string {
	s := slices.DeleteFunc(slices.Clone(cpus), func(c int) bool { return c < 0 })
	slices.Sort(s)
	s = slices.Compact(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// maxCPUs bounds the CPU numbers ParseCPUList accepts. Linux builds with at
// most 8192 CPUs (NR_CPUS, x86 MAXSMP); 65536 leaves room for larger builds
// while a list naming every CPU stays small.
const maxCPUs = 1 << 16

// ParseCPUList reads a Linux cpu list ("0-3,8,10-11") and returns its CPUs
// sorted, each once. CPU numbers must lie in [0, 65536): a list naming a
// larger one (Linux itself allows at most 8192 CPUs) is refused with
// ErrInvalidArgument, as is any part that is not a number or a range lo-hi
// with lo <= hi.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	type span struct{ lo, hi int }
	var spans []span
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := a, error(nil)
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("devmem: cpu list %q: bad part %q: %w", s, part, ErrInvalidArgument)
		}
		if b >= maxCPUs {
			return nil, fmt.Errorf("devmem: cpu list %q: part %q names a CPU beyond %d, the largest accepted: %w",
				s, part, maxCPUs-1, ErrInvalidArgument)
		}
		spans = append(spans, span{a, b})
	}
	// Merge the spans before listing their CPUs, so that a list repeating a
	// wide range costs its length, not the range's width times the repeats.
	slices.SortFunc(spans, func(x, y span) int { return x.lo - y.lo })
	var cpus []int
	next := 0 // the first CPU not yet listed
	for _, sp := range spans {
		for c := max(sp.lo, next); c <= sp.hi; c++ {
			cpus = append(cpus, c)
		}
		next = max(next, sp.hi+1)
	}
	return cpus, nil
}

const topoLegend = `Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// Format writes the topology laid out as `nvidia-smi topo -m` does (the
// matrix with CPU affinity, NUMA affinity and GPU NUMA ID columns, and the
// legend), then the driver version and one line per GPU.
func (t *Topo) Format(w io.Writer) error {
	if t == nil || len(t.Devices) == 0 {
		_, err := fmt.Fprintf(w, "No GPU found (driver %s)\n", orNA(topoDriver(t)))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i := range t.Devices {
		fmt.Fprintf(tw, "\tGPU%d", i)
	}
	fmt.Fprint(tw, "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n")
	for i, d := range t.Devices {
		fmt.Fprintf(tw, "GPU%d", i)
		for j := range t.Devices {
			cell := "N/A"
			if i < len(t.Links) && j < len(t.Links[i]) {
				cell = t.Links[i][j].String()
			}
			fmt.Fprintf(tw, "\t%s", cell)
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%s\n", orNA(FormatCPUList(d.CPUs)), numaOrNA(d.NUMANode), numaOrNA(d.GPUNUMAID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "\n%s\nDriver version: %s\n", topoLegend, orNA(t.DriverVersion)); err != nil {
		return err
	}
	for i, d := range t.Devices {
		numa := "NUMA N/A"
		if d.NUMANode >= 0 {
			numa = "NUMA " + strconv.Itoa(d.NUMANode)
		}
		if _, err := fmt.Fprintf(w, "GPU%d: %s, %s, PCI %s, %d MiB, %s, CPUs %s\n",
			i, orNA(d.Name), orNA(d.UUID), orNA(d.PCIBusID), d.MemoryTotal>>20, numa, orNA(FormatCPUList(d.CPUs))); err != nil {
			return err
		}
	}
	return nil
}

func numaOrNA(n int) string {
	if n < 0 {
		return "N/A"
	}
	return strconv.Itoa(n)
}

func topoDriver(t *Topo) string {
	if t == nil {
		return ""
	}
	return t.DriverVersion
}

func orNA(s string) string {
	if s == "" {
		return "N/A"
	}
	return s
}

// UUIDString is a device UUID as NVML and nvidia-smi write a GPU's:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
func UUIDString(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// DeviceOf finds d (a CUDA device) among t's GPUs, by UUID.
func (t *Topo) DeviceOf(d *Device) (*TopoDevice, error) {
	if d == nil {
		return nil, fmt.Errorf("devmem: nil device: %w", ErrInvalidArgument)
	}
	if d.Kind() != CUDA {
		return nil, fmt.Errorf("devmem: %v is not a GPU, so NVML does not list it: %w", d, ErrUnsupported)
	}
	id := UUIDString(d.UUID())
	for i := range t.Devices {
		if strings.EqualFold(t.Devices[i].UUID, id) {
			return &t.Devices[i], nil
		}
	}
	return nil, fmt.Errorf("devmem: NVML does not list %v (%s): %w", d, id, ErrInvalidArgument)
}

// BindToDevice pins every thread of this process to the cores nearest d's
// GPU (NVML's CPU affinity), so that host staging buffers and the threads
// that copy them sit on the GPU's NUMA node. It needs NVML (an error
// wrapping ErrLibraryNotFound without it); a host device has no GPU to be
// near (ErrUnsupported). Call it early: threads started later inherit the
// affinity of the thread that starts them.
func BindToDevice(d *Device) error {
	if d == nil {
		return fmt.Errorf("devmem: BindToDevice of a nil device: %w", ErrInvalidArgument)
	}
	if d.Kind() != CUDA {
		return fmt.Errorf("devmem: BindToDevice(%v): only a GPU has cores near it: %w", d, ErrUnsupported)
	}
	t, err := Topology()
	if err != nil {
		return err
	}
	td, err := t.DeviceOf(d)
	if err != nil {
		return err
	}
	if len(td.CPUs) == 0 {
		return fmt.Errorf("devmem: BindToDevice(%v): NVML gives no CPU affinity: %w", d, ErrUnsupported)
	}
	return bindCPUs(td.CPUs)
}

// bindCPUs sets the affinity of every thread of the process to cpus.
// sched_setaffinity acts on one thread, so each in /proc/self/task gets it;
// the pass repeats until no thread it has not seen appears, because a thread
// started meanwhile may have copied an old mask.
func bindCPUs(cpus []int) error {
	var set unix.CPUSet
	set.Zero()
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return fmt.Errorf("devmem: CPU %d out of range: %w", c, ErrInvalidArgument)
		}
		set.Set(c)
	}
	if set.Count() == 0 {
		return fmt.Errorf("devmem: no CPU to bind to: %w", ErrInvalidArgument)
	}
	done := map[int]bool{}
	for pass := 0; pass < 16; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("devmem: listing threads: %w", err)
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("devmem: binding thread %d to CPUs %s: %w", tid, FormatCPUList(cpus), err)
			}
			done[tid] = true
		}
		if !fresh {
			return nil
		}
	}
	return nil
}
