package nccl

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
	"github.com/gpucomm/gpucomm/internal/mpi"
)

// What a machine without MPI, NCCL or a GPU is told, and that nothing
// crashes there.

type missingLib struct{ fakeLib }

func (*missingLib) load() error {
	return errors.New("nccl: load NCCL: libnccl.so.2: cannot open shared object file: library not found")
}

func TestProbeListsEverythingMissing(t *testing.T) {
	noGPU := func() (int, error) { return 0, errors.New("devmem: cuda driver: libcuda.so.1 not found") }
	v := probeWith(false, &missingLib{}, noGPU)
	for _, want := range []string{"not built", "-tags mpi", "-tags mpich", "NCCL not usable: nccl: load NCCL: libnccl.so.2", "no GPU: devmem: cuda driver: libcuda.so.1 not found"} {
		if v.Usable || !strings.Contains(v.Reason, want) {
			t.Errorf("nothing here: %+v; want unusable, saying %q", v, want)
		}
	}
	v = probeWith(true, &fakeLib{}, func() (int, error) { return 0, nil })
	if v.Usable || v.Reason != "no GPU: the CUDA driver sees none" {
		t.Errorf("no GPU visible: %+v", v)
	}
	v = probeWith(true, &fakeLib{}, func() (int, error) { return 2, nil })
	if !v.Usable || !strings.HasPrefix(v.Reason, "fake NCCL on 2 GPU(s), bootstrapped by ") {
		t.Errorf("all there: %+v", v)
	}
}

// Probe on this machine agrees with what is really here.
func TestProbeHere(t *testing.T) {
	v := Probe()
	loadErr := realLibrary().load()
	n, gpuErr := devmem.CUDADeviceCount()
	usable := mpi.Built() && loadErr == nil && gpuErr == nil && n > 0
	if v.Usable != usable {
		t.Errorf("Probe says usable %v (%s); MPI built %v, NCCL %v, %d GPUs (%v)", v.Usable, v.Reason, mpi.Built(), loadErr, n, gpuErr)
	}
	if !mpi.Built() && !strings.Contains(v.Reason, "not built") {
		t.Errorf("MPI is not built in, Probe says: %s", v.Reason)
	}
	if loadErr != nil && !strings.Contains(v.Reason, loadErr.Error()) {
		t.Errorf("NCCL does not load (%v), Probe says: %s", loadErr, v.Reason)
	}
	if cv, err := comm.Probe(Name); err != nil || cv != v {
		t.Errorf("comm.Probe(%q) = %+v, %v; want Probe's %+v", Name, cv, err, v)
	}
	t.Logf("Probe: %+v", v)
}

// With GPUCOMM_NCCL_LIB naming no library, Probe says NCCL is missing, in a
// process of its own, where NCCL was never loaded.
func TestProbeWithNCCLMissing(t *testing.T) {
	if os.Getenv("GPUCOMM_NCCL_TEST_PROBE_CHILD") != "" {
		v := Probe()
		err := realLibrary().load()
		if err == nil || v.Usable || !strings.Contains(v.Reason, "NCCL not usable: "+err.Error()) {
			t.Fatalf("Probe with GPUCOMM_NCCL_LIB=/nonexistent/libnccl.so.2: %+v (loading: %v)", v, err)
		}
		// A cgo build tried that file (a build without cgo says it has no NCCL at all).
		if !errors.Is(err, comm.ErrNotBuilt) && (!errors.Is(err, comm.ErrLibraryNotFound) || !strings.Contains(err.Error(), "/nonexistent/libnccl.so.2")) {
			t.Errorf("loading NCCL: %v; want ErrLibraryNotFound naming the file tried", err)
		}
		return
	}
	if inRanks() {
		t.Skip("runs outside MPI jobs")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProbeWithNCCLMissing$", "-test.v")
	cmd.Env = append(os.Environ(), "GPUCOMM_NCCL_TEST_PROBE_CHILD=1", "GPUCOMM_NCCL_LIB=/nonexistent/libnccl.so.2")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestRegisteredAndPreferredToLocal(t *testing.T) {
	names := comm.Backends()
	i, l := slices.Index(names, Name), slices.Index(names, "local")
	if i < 0 || l < 0 || i > l {
		t.Errorf("backends %v: want nccl registered, ahead of local", names)
	}
}

// Without MPI built in, Open says how to rebuild, and starts nothing.
func TestOpenWithoutMPIBuiltIn(t *testing.T) {
	if mpi.Built() {
		t.Skip("MPI is built in: TestRankHostDeviceIsRefused runs Open under MPI")
	}
	t.Setenv("GPUCOMM_BACKEND", "")
	for name, open := range map[string]func() (comm.Communicator, error){
		"Open":      func() (comm.Communicator, error) { return Open() },
		"comm.Open": func() (comm.Communicator, error) { return comm.Open(Name) },
	} {
		c, err := open()
		var ce *comm.Error
		switch {
		case c != nil && c != (*Comm)(nil):
			t.Errorf("%s: returned a communicator", name)
		case !errors.Is(err, comm.ErrNotBuilt) || !errors.As(err, &ce):
			t.Errorf("%s: %v; want a *comm.Error wrapping ErrNotBuilt", name, err)
		case ce.Backend != Name || ce.Op != "Open" || !strings.Contains(err.Error(), "-tags mpi"):
			t.Errorf("%s: %v; want the nccl backend's Open saying to rebuild with -tags mpi", name, err)
		}
	}
}
