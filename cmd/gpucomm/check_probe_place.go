package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"golang.org/x/sys/unix"
)

// The placement part of the probe that needs the GPU topology or the other
// ranks of the node: the rank's CPU binding against its GPU's NUMA node and
// cores (NVML's affinity), the peer links between the node's GPUs (reported
// once a node, by local rank 0), whether IPC handles open between the local
// ranks (a small NodeShared buffer, content-checked), and NCCL's rule of one
// rank a GPU. Without NVML (the host device, a machine with no NVIDIA
// driver) the topology findings say "unknown (no NVML)" and are no error.

// numaLayout is the machine's NUMA nodes as sysfs gives them: the CPUs of
// each node, and each node's distances to the others (10 is local).
type numaLayout struct {
	CPUs map[int][]int
	Dist map[int][]int
}

// readNUMA reads /sys/devices/system/node; what it cannot read stays empty.
func readNUMA() numaLayout {
	l := numaLayout{CPUs: map[int][]int{}, Dist: map[int][]int{}}
	dirs, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpulist")); err == nil {
			if cpus, err := devmem.ParseCPUList(string(b)); err == nil {
				l.CPUs[n] = cpus
			}
		}
		if b, err := os.ReadFile(filepath.Join(d, "distance")); err == nil {
			var row []int
			for f := range strings.FieldsSeq(string(b)) {
				v, err := strconv.Atoi(f)
				if err != nil {
					row = nil
					break
				}
				row = append(row, v)
			}
			l.Dist[n] = row
		}
	}
	return l
}

// nodesOf lists the NUMA nodes holding any of cpus, ascending.
func (l numaLayout) nodesOf(cpus []int) []int {
	var nodes []int
	for n, ncpus := range l.CPUs {
		for _, c := range cpus {
			if slices.Contains(ncpus, c) {
				nodes = append(nodes, n)
				break
			}
		}
	}
	slices.Sort(nodes)
	return nodes
}

// allowedCPUs is this process's affinity mask (what the launcher's binding
// left it), ascending.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// bindingFinding judges a rank that may run on allowed against GPU gpu
// (index idx on the node): "bound far from the GPU" when no allowed CPU is
// among the GPU's cores, with the NUMA distance when sysfs gives it.
func bindingFinding(allowed []int, idx int, gpu devmem.TopoDevice, numa numaLayout) probeFinding {
	where := fmt.Sprintf("GPU %d", idx)
	if gpu.NUMANode >= 0 {
		where += fmt.Sprintf(" (NUMA node %d, CPUs %s)", gpu.NUMANode, orUnknown(devmem.FormatCPUList(gpu.CPUs)))
	} else if len(gpu.CPUs) > 0 {
		where += fmt.Sprintf(" (CPUs %s)", devmem.FormatCPUList(gpu.CPUs))
	}
	mine := devmem.FormatCPUList(allowed)
	if len(gpu.CPUs) == 0 {
		return probeFinding{Area: "placement", Level: levelInfo,
			Detail: fmt.Sprintf("CPU binding: this rank may run on CPUs %s; %s: NVML gives no CPU affinity, so its distance is unknown", mine, where)}
	}
	var near []int
	for _, c := range allowed {
		if slices.Contains(gpu.CPUs, c) {
			near = append(near, c)
		}
	}
	bindFix := fmt.Sprintf("bind each rank to its GPU's cores: Open MPI mpirun --map-by numa --bind-to numa with one rank a GPU, MPICH mpiexec -bind-to numa, "+
		"numactl --cpunodebind=%d, or devmem.BindToDevice at start", max(gpu.NUMANode, 0))
	switch {
	case len(near) == 0:
		dist := ""
		if nodes := numa.nodesOf(allowed); len(nodes) > 0 && gpu.NUMANode >= 0 {
			if row := numa.Dist[gpu.NUMANode]; len(row) > slices.Max(nodes) {
				var ds []string
				for _, n := range nodes {
					ds = append(ds, fmt.Sprintf("node %d: %d", n, row[n]))
				}
				dist = fmt.Sprintf("; NUMA distance from the GPU's node %s (local is %d)", strings.Join(ds, ", "), row[gpu.NUMANode])
			}
		}
		return probeFinding{Area: "placement", Level: levelWarn,
			Detail: fmt.Sprintf("bound far from the GPU: this rank may run on CPUs %s, none of them near %s%s: every host-staged copy and CUDA's threads cross the CPUs' interconnect", mine, where, dist),
			Fix:    bindFix}
	case len(near) < len(allowed):
		return probeFinding{Area: "placement", Level: levelInfo,
			Detail: fmt.Sprintf("CPU binding: %d of this rank's %d CPUs (%s) are near %s; the others are not, and the scheduler may run its threads there", len(near), len(allowed), devmem.FormatCPUList(near), where),
			Fix:    bindFix}
	}
	return probeFinding{Area: "placement", Level: levelOK,
		Detail: fmt.Sprintf("CPU binding: all of this rank's CPUs (%s) are near %s", mine, where)}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// linkFindings describes the peer links between the node's GPUs: one line
// when every pair has NVLink, else the pairs without it, a warning for
// those whose path crosses the CPUs' interconnect (SYS), where CUDA
// usually gives no peer access.
func linkFindings(t *devmem.Topo) []probeFinding {
	n := len(t.Devices)
	if n <= 1 {
		return []probeFinding{{Area: "placement", Level: levelInfo, Detail: fmt.Sprintf("peer access: %d GPU on this node, no pair to link", n)}}
	}
	minNV, allNV := 1<<30, true
	var pcie, sys []string
	for i := range n {
		for j := i + 1; j < n; j++ {
			var l devmem.Link
			if i < len(t.Links) && j < len(t.Links[i]) {
				l = t.Links[i][j]
			}
			if l.NVLinks > 0 {
				minNV = min(minNV, l.NVLinks)
				continue
			}
			allNV = false
			pair := fmt.Sprintf("GPU%d-GPU%d %s", i, j, l.Path)
			if l.Path == devmem.PathSys || l.Path == devmem.PathUnknown {
				sys = append(sys, pair)
			} else {
				pcie = append(pcie, pair)
			}
		}
	}
	if allNV {
		return []probeFinding{{Area: "placement", Level: levelOK,
			Detail: fmt.Sprintf("peer access: NVLink between every pair of this node's %d GPUs (at least NV%d a pair)", n, minNV)}}
	}
	var out []probeFinding
	if len(pcie) > 0 {
		out = append(out, probeFinding{Area: "placement", Level: levelInfo,
			Detail: fmt.Sprintf("peer access: no NVLink between %s: peer copies go over PCIe", strings.Join(pcie, ", "))})
	}
	if len(sys) > 0 {
		out = append(out, probeFinding{Area: "placement", Level: levelWarn,
			Detail: fmt.Sprintf("peer access unlikely between %s: no NVLink, and the path crosses the CPUs' interconnect (SYS) or is unknown; transfers between them go through host memory", strings.Join(sys, ", ")),
			Fix:    "give the ranks that talk most GPUs of one PCIe switch or NUMA node (CUDA_VISIBLE_DEVICES, the launcher's mapping); the IPC line below shows whether handles open at all"})
	}
	return out
}

// probeTopo reports this rank's CPU binding against its GPU and, on local
// rank 0, the links between the node's GPUs.
func probeTopo(p *probeReport, c comm.Communicator) {
	allowed, aerr := allowedCPUs()
	topo, terr := devmem.Topology()
	first := c.LocalRank() == 0
	switch {
	case errors.Is(terr, devmem.ErrLibraryNotFound):
		if aerr == nil {
			p.add("placement", levelInfo, fmt.Sprintf("CPU binding: this rank may run on CPUs %s; its NUMA distance from the GPU is unknown (no NVML)", devmem.FormatCPUList(allowed)), "")
		}
		if first {
			p.add("placement", levelInfo, "peer access and NVLink between this node's GPUs: unknown (no NVML)", "")
		}
		return
	case terr != nil:
		p.add("placement", levelWarn, fmt.Sprintf("GPU topology: NVML failed: %v; CPU binding and peer links not judged", terr), "see gpucomm info's topology section, and nvidia-smi topo -m")
		return
	}
	dev := c.Device()
	switch {
	case aerr != nil:
		p.add("placement", levelWarn, fmt.Sprintf("CPU binding: %v", aerr), "")
	case dev == nil || dev.Kind() != devmem.CUDA:
		p.add("placement", levelInfo, fmt.Sprintf("CPU binding: this rank may run on CPUs %s; its device is %v, no GPU to be near", devmem.FormatCPUList(allowed), dev), "")
	default:
		td, err := topo.DeviceOf(dev)
		if err != nil {
			p.add("placement", levelWarn, fmt.Sprintf("CPU binding: %v", err), "")
		} else {
			f := bindingFinding(allowed, td.Index, *td, readNUMA())
			p.Findings = append(p.Findings, f)
		}
	}
	if first {
		p.Findings = append(p.Findings, linkFindings(topo)...)
	}
}

// ncclFinding applies NCCL's rule (one rank a GPU: it refuses two ranks on
// one GPU) to the node's placement. gpus[r] is local rank r's GPU key (0:
// not a GPU); visible is how many GPUs the rank sees.
func ncclFinding(backend string, gpus []int64, visible int) probeFinding {
	onGPU := 0
	owner := map[int64]int{}
	var shared []string
	for r, k := range gpus {
		if k == 0 {
			continue
		}
		onGPU++
		if o, ok := owner[k]; ok {
			shared = append(shared, fmt.Sprintf("local ranks %d and %d", o, r))
		} else {
			owner[k] = r
		}
	}
	fix := "run one rank a GPU: at most as many ranks a node as GPUs, each on the GPU of its local rank (the backends' default)"
	level := levelWarn
	if backend == "nccl" {
		level = levelError
	}
	switch {
	case len(shared) > 0:
		return probeFinding{Area: "nccl", Level: level,
			Detail: fmt.Sprintf("this placement does not allow the nccl backend: %s use one GPU, and NCCL refuses two ranks on one GPU", strings.Join(shared, ", ")), Fix: fix}
	case onGPU == len(gpus):
		return probeFinding{Area: "nccl", Level: levelOK,
			Detail: fmt.Sprintf("this placement allows the nccl backend: the node's %d ranks each use a GPU of their own", len(gpus))}
	case visible == 0:
		return probeFinding{Area: "nccl", Level: levelInfo, Detail: "the nccl backend needs a GPU a rank; no GPU is visible here"}
	case len(gpus) > visible:
		return probeFinding{Area: "nccl", Level: level,
			Detail: fmt.Sprintf("this placement does not allow the nccl backend: %d ranks on this node, %d GPUs, and NCCL refuses two ranks on one GPU", len(gpus), visible), Fix: fix}
	}
	return probeFinding{Area: "nccl", Level: levelOK,
		Detail: fmt.Sprintf("this placement allows the nccl backend: %d ranks on this node, %d GPUs, one rank a GPU by local rank", len(gpus), visible)}
}

// gpuKey identifies d's GPU among the node's (its UUID's first 8 bytes); 0
// when d is not a GPU.
func gpuKey(d *devmem.Device) int64 {
	if d == nil || d.Kind() != devmem.CUDA {
		return 0
	}
	u := d.UUID()
	k := int64(binary.LittleEndian.Uint64(u[:8]))
	if k == 0 {
		k = 1
	}
	return k
}

// ipcElems is each local rank's part of the IPC check's buffer.
const ipcElems = 1024

// ipcOne runs on every rank of c: it joins the ranks of its node, gathers
// their GPUs (for NCCL's rule), and checks that a NodeShared buffer,
// allocated by local rank 0 and opened through an IPC handle by the
// others, holds what each rank wrote in it.
func ipcOne(backend string, c comm.Communicator, visible int) []probeFinding {
	if c.LocalSize() <= 1 {
		return []probeFinding{
			{Area: "placement", Level: levelInfo, Detail: "IPC: one rank on this node, no handle to open"},
			ncclFinding(backend, []int64{gpuKey(c.Device())}, visible),
		}
	}
	ipcErr := func(format string, args ...any) probeFinding {
		return probeFinding{Area: "placement", Level: levelError,
			Detail: "IPC handles do not open between the local ranks: " + fmt.Sprintf(format, args...),
			Fix: "on GPUs, each rank must see every local GPU (no per-rank CUDA_VISIBLE_DEVICES) and have peer access to local rank 0's; " +
				"in containers, share the IPC namespace (--ipc=host) and /dev/shm"}
	}
	node, err := comm.SplitNode(c)
	if err != nil {
		return []probeFinding{ipcErr("splitting the node's ranks: %v", err)}
	}
	defer node.Close()
	nc := comm.NodeComm(node)
	keys, err := nc.AllGatherInt64(gpuKey(c.Device()))
	if err != nil {
		return []probeFinding{ipcErr("gathering the node's GPUs: %v", err)}
	}
	out := []probeFinding{ncclFinding(backend, keys, visible)}
	s, err := devmem.NewNodeSharedSlice[uint32](nc, ipcElems)
	if err != nil {
		return append(out, ipcErr("%v", err))
	}
	input := func(r int) []uint32 {
		rng := rand.New(rand.NewPCG(20261203, 1000+uint64(r)))
		v := make([]uint32, ipcElems)
		for i := range v {
			v[i] = rng.Uint32()
		}
		return v
	}
	me, size := node.Rank(), node.Size()
	// Poison the whole buffer from the root before anyone writes its part.
	var werr error
	if me == 0 {
		poison := make([]uint32, ipcElems*size)
		for i := range poison {
			poison[i] = 0xdeadbeef
		}
		werr = s.All().CopyFrom(poison, nil)
	}
	berr := s.Barrier()
	if werr == nil && berr == nil {
		werr = s.Mine().CopyFrom(input(me), nil)
	}
	berr = errors.Join(berr, s.Barrier())
	var got []uint32
	if werr == nil && berr == nil {
		got, werr = s.All().ToHost(nil)
	}
	cerr := errors.Join(s.Barrier(), s.Close())
	if err := errors.Join(werr, berr, cerr); err != nil {
		return append(out, ipcErr("%v", err))
	}
	for r := range size {
		want := input(r)
		for i, w := range want {
			if g := got[r*ipcElems+i]; g != w {
				return append(out, ipcErr("local rank %d read local rank %d's element %d as %#x, want %#x: the opened buffer is not the one written", me, r, i, g, w))
			}
		}
	}
	return append(out, probeFinding{Area: "placement", Level: levelOK,
		Detail: fmt.Sprintf("IPC: local rank 0's buffer opened by the node's %d ranks through IPC handles on %v, every rank's part content-checked", size, c.Device())})
}

// probeIPC runs ipcOne on every communicator of group (this process's
// ranks), bounded by bound, and returns the first rank's findings with the
// other ranks' errors folded in.
func probeIPC(backend string, group []comm.Communicator, visible int, bound time.Duration) []probeFinding {
	res := make([][]probeFinding, len(group))
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for i, c := range group {
			wg.Go(func() { res[i] = ipcOne(backend, c, visible) })
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(bound):
		return []probeFinding{{Area: "placement", Level: levelError,
			Detail: fmt.Sprintf("IPC check did not finish within %v: a local rank is stuck opening local rank 0's handle (or the bound, -timeout, is too short)", bound),
			Fix:    "run gpucomm check -probe-only with GPUCOMM_TRACE_DIR set and read it with gpucomm trace"}}
	}
	out := res[0]
	seen := map[string]bool{}
	for _, f := range out {
		seen[f.Detail] = true
	}
	for i, fs := range res[1:] {
		for _, f := range fs {
			if f.Level == levelError && !seen[f.Detail] {
				seen[f.Detail] = true
				f.Detail = fmt.Sprintf("rank %d: %s", group[i+1].Rank(), f.Detail)
				out = append(out, f)
			}
		}
	}
	return out
}

// probeNode adds the topology, NCCL and IPC findings after the operations'
// probe: the IPC check runs through the backend's collectives, so it is
// skipped when one of them failed.
func probeNode(p *probeReport, backend string, group []comm.Communicator, bound time.Duration) {
	probeTopo(p, group[0])
	for _, o := range p.Ops {
		if !o.OK {
			p.add("placement", levelInfo, "IPC and NCCL placement checks skipped: they run through the backend's operations, and "+o.Op+" failed above", "")
			return
		}
	}
	p.Findings = append(p.Findings, probeIPC(backend, group, readPlacement().GPUs, bound)...)
}
