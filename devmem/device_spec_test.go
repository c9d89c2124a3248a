package devmem

import (
	"errors"
	"testing"
)

// CheckSpec accepts exactly what Open understands, so that a typo in
// GPUCOMM_DEVICE is caught before any backend looks at it.
func TestCheckSpecAcceptsWhatOpenUnderstands(t *testing.T) {
	for _, s := range []string{"", "auto", "host", "cuda", "cuda:0", "CUDA:7", " Host "} {
		if err := CheckSpec(s); err != nil {
			t.Errorf("CheckSpec(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"bogus", "gpu0", "cuda:", "cuda:-1", "cuda:x", "cuda0", "host:0"} {
		err := CheckSpec(s)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("CheckSpec(%q) = %v; want ErrInvalidArgument", s, err)
		}
		if _, oerr := Open(s, 0); !errors.Is(oerr, ErrInvalidArgument) {
			t.Errorf("Open(%q) = %v; CheckSpec refused it, so must Open", s, oerr)
		}
	}
	for s, gpu := range map[string]bool{"cuda": true, "cuda:3": true, " CUDA:1": true, "host": false, "auto": false, "": false} {
		if IsGPUSpec(s) != gpu {
			t.Errorf("IsGPUSpec(%q) = %v", s, !gpu)
		}
	}
}

func TestParseMeminfoReadsAvailableAndTotal(t *testing.T) {
	free, total, err := parseMeminfo("MemTotal:       24683756 kB\nMemFree:  1 kB\nMemAvailable:   23925632 kB\nHugePages_Total:       0\n")
	if err != nil || free != 23925632<<10 || total != 24683756<<10 {
		t.Errorf("parseMeminfo = %d, %d, %v", free, total, err)
	}
	for _, bad := range []string{"", "MemTotal: 5 kB\n", "MemTotal: x kB\nMemAvailable: 1 kB\n"} {
		if _, _, err := parseMeminfo(bad); !errors.Is(err, ErrUnsupported) {
			t.Errorf("parseMeminfo(%q) = %v; want ErrUnsupported", bad, err)
		}
	}
	d := NewHostDevice()
	free, total, err = d.Memory()
	if err != nil || free <= 0 || total < free {
		t.Errorf("host device Memory() = %d, %d, %v; want 0 < free <= total on Linux", free, total, err)
	}
}

// On a GPU, Memory is the GPU's MemInfo (what solver.New checks a grid
// against), not the host's. Needs a GPU; skips without one.
func TestMemoryOfACUDADeviceIsItsMemInfo(t *testing.T) {
	d := needCUDA(t)
	free, total, err := d.Memory()
	if err != nil || free <= 0 || total < free {
		t.Fatalf("Memory() = %d, %d, %v; want 0 < free <= total", free, total, err)
	}
	_, miTotal, err := d.MemInfo()
	if err != nil || miTotal != total {
		t.Errorf("MemInfo total %d (%v), Memory total %d; want the same device memory", miTotal, err, total)
	}
	if _, hostTotal, err := HostMemory(); err == nil && hostTotal == total {
		t.Errorf("Memory of %v reports the host's %d bytes", d, total)
	}
}
