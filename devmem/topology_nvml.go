//go:build cgo

package devmem

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlLib answers nvmlQuery through go-nvml, which loads libnvidia-ml.so.1 at
// run time.
type nvmlLib struct {
	devs []nvml.Device
}

func nvmlErr(what string, ret nvml.Return) error {
	return fmt.Errorf("devmem: NVML %s: %s", what, nvml.ErrorString(ret))
}

func openNVML() (nvmlQuery, error) {
	switch ret := nvml.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("devmem: NVML (libnvidia-ml.so.1) not found; is the NVIDIA driver installed?: %w", ErrLibraryNotFound)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("devmem: NVML: the NVIDIA driver is not loaded: %w", ErrLibraryNotFound)
	default:
		return nil, fmt.Errorf("%w: %w", nvmlErr("init", ret), ErrUnsupported)
	}
	return &nvmlLib{}, nil
}

func (l *nvmlLib) shutdown() error {
	if ret := nvml.Shutdown(); ret != nvml.SUCCESS {
		return nvmlErr("shutdown", ret)
	}
	return nil
}

func (l *nvmlLib) driverVersion() (string, error) {
	v, ret := nvml.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return "", nvmlErr("driver version", ret)
	}
	return v, nil
}

func (l *nvmlLib) deviceCount() (int, error) {
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, nvmlErr("device count", ret)
	}
	l.devs = make([]nvml.Device, n)
	for i := range l.devs {
		if l.devs[i], ret = nvml.DeviceGetHandleByIndex(i); ret != nvml.SUCCESS {
			return 0, nvmlErr(fmt.Sprintf("device %d", i), ret)
		}
	}
	return n, nil
}

func busID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// affinityCPUs is how many CPUs' worth of mask is asked for; go-nvml sizes
// its buffer from it generously.
const affinityCPUs = 4096

func (l *nvmlLib) device(i int) (TopoDevice, error) {
	d := l.devs[i]
	td := TopoDevice{NUMANode: -1, GPUNUMAID: -1}
	var ret nvml.Return
	if td.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return td, nvmlErr(fmt.Sprintf("device %d name", i), ret)
	}
	if td.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return td, nvmlErr(fmt.Sprintf("device %d UUID", i), ret)
	}
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return td, nvmlErr(fmt.Sprintf("device %d PCI info", i), ret)
	}
	td.PCIBusID = busID(pci)
	if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		td.MemoryTotal = mem.Total
	}
	// Older drivers lack these; the caller falls back to sysfs for NUMA.
	if nodes, ret := d.GetMemoryAffinity(affinityCPUs, nvml.AFFINITY_SCOPE_NODE); ret == nvml.SUCCESS {
		if n := cpusOfMask(words64(nodes)); len(n) > 0 {
			td.NUMANode = n[0]
		}
	}
	// Only GPUs whose memory the CPU sees coherently (Grace Hopper) have one.
	if n, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS {
		td.GPUNUMAID = n
	}
	if words, ret := d.GetCpuAffinity(affinityCPUs); ret == nvml.SUCCESS {
		td.CPUs = cpusOfMask(words64(words))
	}
	return td, nil
}

// words64 is an NVML mask (C unsigned longs, 64-bit on every platform
// go-nvml supports) as uint64s.
func words64(words []uint) []uint64 {
	w := make([]uint64, len(words))
	for k, v := range words {
		w[k] = uint64(v)
	}
	return w
}

var nvmlPaths = map[nvml.GpuTopologyLevel]Path{
	nvml.TOPOLOGY_INTERNAL:   PathSelf,
	nvml.TOPOLOGY_SINGLE:     PathPIX,
	nvml.TOPOLOGY_MULTIPLE:   PathPXB,
	nvml.TOPOLOGY_HOSTBRIDGE: PathPHB,
	nvml.TOPOLOGY_NODE:       PathNode,
	nvml.TOPOLOGY_SYSTEM:     PathSys,
}

func (l *nvmlLib) commonAncestor(i, j int) (Path, error) {
	lvl, ret := l.devs[i].GetTopologyCommonAncestor(l.devs[j])
	if ret != nvml.SUCCESS {
		return PathUnknown, nvmlErr("topology", ret)
	}
	return nvmlPaths[lvl], nil
}

func (l *nvmlLib) nvlinkPeers(i int) ([]nvlinkPeer, error) {
	var peers []nvlinkPeer
	for link := range nvml.NVLINK_MAX_LINKS {
		state, ret := l.devs[i].GetNvLinkState(link)
		if ret != nvml.SUCCESS {
			if link == 0 {
				return nil, nvmlErr("NVLink state", ret)
			}
			break // past the GPU's last link
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		var p nvlinkPeer
		if typ, ret := l.devs[i].GetNvLinkRemoteDeviceType(link); ret == nvml.SUCCESS && typ == nvml.NVLINK_DEVICE_TYPE_SWITCH {
			p.toSwitch = true
		} else if pci, ret := l.devs[i].GetNvLinkRemotePciInfo(link); ret == nvml.SUCCESS {
			p.busID = busID(pci)
		}
		peers = append(peers, p)
	}
	return peers, nil
}
