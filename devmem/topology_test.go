package devmem

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestTopoFormat(t *testing.T) {
	h200 := func(i int, numa int, cpus []int) TopoDevice {
		return TopoDevice{Index: i, Name: "NVIDIA H200", UUID: fmt.Sprintf("GPU-%d0000000-1111-2222-3333-444444444444", i),
			PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x19+i*0x10), MemoryTotal: 143771 << 20, NUMANode: numa, GPUNUMAID: -1, CPUs: cpus}
	}
	nv := func(n int) Link { return Link{Path: PathSys, NVLinks: n} }
	self := Link{Path: PathSelf}
	cases := []struct {
		name string
		topo *Topo
		want string
	}{
		{"no GPU", &Topo{DriverVersion: "580.159"}, "No GPU found (driver 580.159)\n"},
		{"nil topology", nil, "No GPU found (driver N/A)\n"},
		{"one GPU", &Topo{
			DriverVersion: "580.159",
			Devices:       []TopoDevice{h200(0, 0, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})},
			Links:         [][]Link{{self}},
		}, `      GPU0  CPU Affinity  NUMA Affinity  GPU NUMA ID
GPU0  X     0-15          0              N/A

` + topoLegend + `
Driver version: 580.159
GPU0: NVIDIA H200, GPU-00000000-1111-2222-3333-444444444444, PCI 00000000:19:00.0, 143771 MiB, NUMA 0, CPUs 0-15
`},
		{"two GPUs over NVLink on two NUMA nodes", &Topo{
			DriverVersion: "580.159",
			Devices:       []TopoDevice{h200(0, 0, []int{0, 1, 2, 3, 8, 9}), h200(1, 1, []int{4, 5, 6, 7, 10})},
			Links:         [][]Link{{self, nv(18)}, {nv(18), self}},
		}, `      GPU0  GPU1  CPU Affinity  NUMA Affinity  GPU NUMA ID
GPU0  X     NV18  0-3,8-9       0              N/A
GPU1  NV18  X     4-7,10        1              N/A

` + topoLegend + `
Driver version: 580.159
GPU0: NVIDIA H200, GPU-00000000-1111-2222-3333-444444444444, PCI 00000000:19:00.0, 143771 MiB, NUMA 0, CPUs 0-3,8-9
GPU1: NVIDIA H200, GPU-10000000-1111-2222-3333-444444444444, PCI 00000000:29:00.0, 143771 MiB, NUMA 1, CPUs 4-7,10
`},
		{"four GPUs over PCIe, affinity unknown", &Topo{
			Devices: []TopoDevice{h200(0, -1, nil), h200(1, -1, nil), func() TopoDevice {
				d := h200(2, 1, []int{64})
				d.GPUNUMAID = 4 // a coherent GPU's memory is a NUMA node of its own
				return d
			}(), {Index: 3}},
			Links: [][]Link{
				{self, {Path: PathPIX}, {Path: PathNode}, {Path: PathSys}},
				{{Path: PathPIX}, self, {Path: PathPXB}, {Path: PathPHB}},
				{{Path: PathNode}, {Path: PathPXB}, self, {}},
				{{Path: PathSys}, {Path: PathPHB}, {}, self},
			},
		}, `      GPU0  GPU1  GPU2  GPU3  CPU Affinity  NUMA Affinity  GPU NUMA ID
GPU0  X     PIX   NODE  SYS   N/A           N/A            N/A
GPU1  PIX   X     PXB   PHB   N/A           N/A            N/A
GPU2  NODE  PXB   X     N/A   64            1              4
GPU3  SYS   PHB   N/A   X     N/A           0              0

` + topoLegend + `
Driver version: N/A
GPU0: NVIDIA H200, GPU-00000000-1111-2222-3333-444444444444, PCI 00000000:19:00.0, 143771 MiB, NUMA N/A, CPUs N/A
GPU1: NVIDIA H200, GPU-10000000-1111-2222-3333-444444444444, PCI 00000000:29:00.0, 143771 MiB, NUMA N/A, CPUs N/A
GPU2: NVIDIA H200, GPU-20000000-1111-2222-3333-444444444444, PCI 00000000:39:00.0, 143771 MiB, NUMA 1, CPUs 64
GPU3: N/A, N/A, PCI N/A, 0 MiB, NUMA 0, CPUs N/A
`},
		{"links matrix too small", &Topo{
			Devices: []TopoDevice{h200(0, 0, []int{1}), h200(1, 0, []int{1})},
			Links:   [][]Link{{self}},
		}, `      GPU0  GPU1  CPU Affinity  NUMA Affinity  GPU NUMA ID
GPU0  X     N/A   1             0              N/A
GPU1  N/A   N/A   1             0              N/A

` + topoLegend + `
Driver version: N/A
GPU0: NVIDIA H200, GPU-00000000-1111-2222-3333-444444444444, PCI 00000000:19:00.0, 143771 MiB, NUMA 0, CPUs 1
GPU1: NVIDIA H200, GPU-10000000-1111-2222-3333-444444444444, PCI 00000000:29:00.0, 143771 MiB, NUMA 0, CPUs 1
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := tc.topo.Format(&b); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tc.want {
				t.Errorf("Format:\n%s\nwant:\n%s", got, tc.want)
			}
			for i, line := range strings.Split(b.String(), "\n") {
				if strings.TrimRight(line, " ") != line {
					t.Errorf("line %d ends in spaces: %q", i, line)
				}
			}
		})
	}
}

// fakeNVML answers nvmlQuery from tables.
type fakeNVML struct {
	devs    []TopoDevice
	paths   map[[2]int]Path
	links   map[int][]nvlinkPeer
	failDev int // device() of this index fails, when >= 0
}

func (f *fakeNVML) shutdown() error                { return nil }
func (f *fakeNVML) driverVersion() (string, error) { return "999.1", nil }
func (f *fakeNVML) deviceCount() (int, error)      { return len(f.devs), nil }
func (f *fakeNVML) device(i int) (TopoDevice, error) {
	if i == f.failDev {
		return TopoDevice{}, fmt.Errorf("device %d: GPU is lost", i)
	}
	return f.devs[i], nil
}
func (f *fakeNVML) commonAncestor(i, j int) (Path, error) {
	if p, ok := f.paths[[2]int{min(i, j), max(i, j)}]; ok {
		return p, nil
	}
	return PathUnknown, errors.New("not supported")
}
func (f *fakeNVML) nvlinkPeers(i int) ([]nvlinkPeer, error) {
	if p, ok := f.links[i]; ok {
		return p, nil
	}
	return nil, errors.New("not supported")
}

func TestBuildTopoCountsNVLinksAndPaths(t *testing.T) {
	bus := []string{"00000000:1A:00.0", "00000000:2B:00.0", "00000000:3C:00.0", "00000000:4D:00.0", "00000000:5E:00.0"}
	var devs []TopoDevice
	for i, b := range bus {
		devs = append(devs, TopoDevice{Index: 99, Name: "GPU", UUID: fmt.Sprint("GPU-", i), PCIBusID: b, NUMANode: -1, CPUs: []int{i}})
	}
	peer := func(busID string, n int) []nvlinkPeer { return slices.Repeat([]nvlinkPeer{{busID: busID}}, n) }
	sw := func(n int) []nvlinkPeer { return slices.Repeat([]nvlinkPeer{{toSwitch: true}}, n) }
	f := &fakeNVML{
		devs:    devs,
		failDev: -1,
		paths: map[[2]int]Path{
			{0, 1}: PathPIX, {0, 2}: PathSys, {0, 3}: PathSys, {0, 4}: PathNode,
			{1, 2}: PathSys, {1, 3}: PathSys, {2, 3}: PathPXB, {2, 4}: PathPHB,
		},
		links: map[int][]nvlinkPeer{
			// GPU0 and GPU1 bonded by 4 links, written in sysfs's bus id form
			// on one side; GPU2 and GPU3 on NVSwitches with 18 and 12 links;
			// GPU1 has one link to an unknown device; GPU4 has none.
			0: peer("0000:2b:00.0", 4),
			1: append(peer("00000000:1A:00.0", 4), nvlinkPeer{busID: "00000000:FF:00.0"}),
			2: sw(18),
			3: sw(12),
		},
	}
	topo, err := buildTopo(f)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"X", "NV4", "SYS", "SYS", "NODE"},
		{"NV4", "X", "SYS", "SYS", "N/A"},
		{"SYS", "SYS", "X", "NV12", "PHB"},
		{"SYS", "SYS", "NV12", "X", "N/A"},
		{"NODE", "N/A", "PHB", "N/A", "X"},
	}
	for i := range want {
		for j := range want[i] {
			if got := topo.Links[i][j].String(); got != want[i][j] {
				t.Errorf("Links[%d][%d] = %s, want %s", i, j, got, want[i][j])
			}
		}
		if topo.Devices[i].Index != i || topo.Devices[i].UUID != fmt.Sprint("GPU-", i) {
			t.Errorf("device %d: %+v", i, topo.Devices[i])
		}
		// No such PCI device on this machine: NUMA stays unknown.
		if topo.Devices[i].NUMANode != -1 {
			t.Errorf("device %d: NUMA node %d, want -1", i, topo.Devices[i].NUMANode)
		}
	}
	if topo.DriverVersion != "999.1" {
		t.Errorf("driver %q", topo.DriverVersion)
	}
	f.failDev = 3
	if topo, err := buildTopo(f); err == nil {
		t.Errorf("a device that fails to answer gave %+v", topo)
	}
}

func TestTopologyWithoutNVML(t *testing.T) {
	topo, err := Topology()
	if err == nil {
		var b strings.Builder
		topo.Format(&b)
		t.Skipf("NVML is present here:\n%s", b.String())
	}
	if !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("Topology() = %v, want an error wrapping ErrLibraryNotFound", err)
	}
	gpu := &Device{kind: CUDA, name: "fake GPU"}
	if err := BindToDevice(gpu); !errors.Is(err, ErrLibraryNotFound) {
		t.Errorf("BindToDevice without NVML = %v, want ErrLibraryNotFound", err)
	}
}

func TestBindToDeviceRefusesWhatIsNoGPU(t *testing.T) {
	if err := BindToDevice(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("BindToDevice(nil) = %v", err)
	}
	if err := BindToDevice(NewHostDevice()); !errors.Is(err, ErrUnsupported) {
		t.Errorf("BindToDevice(host) = %v", err)
	}
}

func TestTopoDeviceOf(t *testing.T) {
	u := [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if got, want := UUIDString(u), "GPU-deadbeef-0102-0304-0506-0708090a0b0c"; got != want {
		t.Fatalf("UUIDString = %s, want %s", got, want)
	}
	topo := &Topo{Devices: []TopoDevice{{Index: 0, UUID: "GPU-11111111-0000-0000-0000-000000000000"}, {Index: 1, UUID: "GPU-DEADBEEF-0102-0304-0506-0708090A0B0C"}}}
	td, err := topo.DeviceOf(&Device{kind: CUDA, uuid: u})
	if err != nil || td.Index != 1 {
		t.Fatalf("DeviceOf = %+v, %v; want GPU 1", td, err)
	}
	if _, err := topo.DeviceOf(&Device{kind: CUDA}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("DeviceOf an unlisted GPU = %v", err)
	}
	if _, err := topo.DeviceOf(NewHostDevice()); !errors.Is(err, ErrUnsupported) {
		t.Errorf("DeviceOf a host device = %v", err)
	}
}

func TestCPUList(t *testing.T) {
	cases := []struct {
		text string
		cpus []int
	}{
		{"", nil},
		{"0", []int{0}},
		{"0-3", []int{0, 1, 2, 3}},
		{"0-1,3,5-7,64", []int{0, 1, 3, 5, 6, 7, 64}},
	}
	for _, tc := range cases {
		if got := FormatCPUList(tc.cpus); got != tc.text {
			t.Errorf("FormatCPUList(%v) = %q, want %q", tc.cpus, got, tc.text)
		}
		got, err := ParseCPUList(tc.text)
		if err != nil || !slices.Equal(got, tc.cpus) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", tc.text, got, err, tc.cpus)
		}
	}
	if got := FormatCPUList([]int{7, 5, 6, 5, 1}); got != "1,5-7" {
		t.Errorf("unsorted input: %q", got)
	}
	// Negative numbers name no CPU: left out, so that the list parses back.
	for _, tc := range []struct {
		cpus []int
		text string
	}{{[]int{-3, -2, -1}, ""}, {[]int{-1, 0, 1, 3}, "0-1,3"}, {[]int{2, -5}, "2"}} {
		got := FormatCPUList(tc.cpus)
		if got != tc.text {
			t.Errorf("FormatCPUList(%v) = %q, want %q", tc.cpus, got, tc.text)
		}
		if back, err := ParseCPUList(got); got != "" && (err != nil || FormatCPUList(back) != got) {
			t.Errorf("ParseCPUList(%q) = %v, %v: does not read back", got, back, err)
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "1-", "1,,2"} {
		if got, err := ParseCPUList(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want ErrInvalidArgument", bad, got, err)
		}
	}
	// CPU numbers beyond the bound are refused at once: a range to MaxInt
	// used to loop forever, one to 99999999999 to list every number.
	for _, bad := range []string{"65536", "3,65530-65536", "9223372036854775807", "0-99999999999", "0-9223372036854775807"} {
		done := make(chan error, 1)
		go func() { _, err := ParseCPUList(bad); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "65535") {
				t.Errorf("ParseCPUList(%q) = %v; want ErrInvalidArgument naming the bound", bad, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ParseCPUList(%q) has not returned in 10s", bad)
		}
	}
	if got, err := ParseCPUList("65534-65535"); err != nil || !slices.Equal(got, []int{65534, 65535}) {
		t.Errorf("ParseCPUList at the bound = %v, %v", got, err)
	}
	// Overlapping, repeated and unsorted parts give each CPU once, sorted,
	// and a list repeating the widest range costs its length, not the
	// range's width per repeat.
	if got, err := ParseCPUList("8-10,2,0-3,9,3-4"); err != nil || !slices.Equal(got, []int{0, 1, 2, 3, 4, 8, 9, 10}) {
		t.Errorf("ParseCPUList overlapping = %v, %v", got, err)
	}
	wide := strings.Repeat("0-65535,", 200000) + "7"
	start := time.Now()
	got, err := ParseCPUList(wide)
	if err != nil || len(got) != maxCPUs || got[0] != 0 || got[len(got)-1] != maxCPUs-1 {
		t.Errorf("ParseCPUList(200000 x 0-65535) = %d CPUs, %v", len(got), err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("ParseCPUList(200000 x 0-65535) took %v", d)
	}
	if got := cpusOfMask([]uint64{0b1011, 0, 1 << 63}); !slices.Equal(got, []int{0, 1, 3, 191}) {
		t.Errorf("cpusOfMask = %v", got)
	}
	if normBusID("00000000:1A:00.0") != "0000:1a:00.0" || normBusID("0000:1a:00.0") != "0000:1a:00.0" {
		t.Errorf("normBusID: %q", normBusID("00000000:1A:00.0"))
	}
}

func affinityOf(tid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

func threads(t *testing.T) []int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

func TestBindCPUsBindsEveryThread(t *testing.T) {
	orig, err := affinityOf(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := bindCPUs(orig); err != nil {
			t.Fatalf("restoring the affinity %v: %v", orig, err)
		}
	}()
	one := orig[len(orig)-1:]
	if err := bindCPUs(one); err != nil {
		t.Fatal(err)
	}
	for _, tid := range threads(t) {
		got, err := affinityOf(tid)
		if err != nil {
			continue // the thread exited
		}
		if !slices.Equal(got, one) {
			t.Errorf("thread %d bound to %v, want %v", tid, got, one)
		}
	}
	if err := bindCPUs(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bindCPUs(nil) = %v", err)
	}
	if err := bindCPUs([]int{1 << 20}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bindCPUs of CPU 2^20 = %v", err)
	}
}

// parseGPUUUID reads "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
func parseGPUUUID(s string) ([16]byte, error) {
	var u [16]byte
	b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimPrefix(s, "GPU-"), "-", ""))
	if err != nil || len(b) != 16 {
		return u, fmt.Errorf("UUID %q: %v", s, err)
	}
	copy(u[:], b)
	return u, nil
}

// On a machine with NVML, BindToDevice pins every thread to exactly the
// cores NVML names for the GPU.
func TestBindToDeviceWithNVML(t *testing.T) {
	topo, err := Topology()
	if err != nil {
		t.Skipf("no NVML here: %v", err)
	}
	orig, err := affinityOf(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := bindCPUs(orig); err != nil {
			t.Fatalf("restoring the affinity %v: %v", orig, err)
		}
	}()
	for _, td := range topo.Devices {
		u, err := parseGPUUUID(td.UUID)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.EqualFold(UUIDString(u), td.UUID) {
			t.Fatalf("UUIDString round trip: %q, NVML says %q", UUIDString(u), td.UUID)
		}
		if err := BindToDevice(&Device{kind: CUDA, uuid: u}); err != nil {
			t.Fatalf("GPU%d: %v", td.Index, err)
		}
		want := td.CPUs
		for _, tid := range threads(t) {
			if got, err := affinityOf(tid); err == nil && !slices.Equal(got, want) {
				t.Errorf("GPU%d: thread %d bound to %s, want %s", td.Index, tid, FormatCPUList(got), FormatCPUList(want))
			}
		}
	}
}
